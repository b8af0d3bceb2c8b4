// Optimizer: the base of the optimizers that run once per step over a rank's flat fp32 shards
// (optim/adamw.h, optim/sgd.h), and the access to their state that checkpoints need.
//
// An optimizer is built over a list of ShardViews (optim/shard_view.h) — for the sharding
// engine, one per flat buffer of which this rank owns a slice — or over whole parameters (the
// unsharded path: each parameter becomes a view with one segment, and its gradient is read from
// the parameter's autograd gradient at each step). step(lr) updates every view once; the update
// of each element depends only on that element and the step's scalars, so the result does not
// depend on the thread count or on how the parameters are split into shards.
//
// State. The per-element state (AdamW: exp_avg, exp_avg_sq; SGD with momentum: momentum_buffer)
// is fp32, one tensor per view and state name with the view's master shape, allocated EAGERLY by
// the constructor on the master's allocator in category optimizer_state and zero-filled, so that
// memory is accounted for before the first step and a checkpoint can be loaded into it before
// the first step. The optimizer owns these tensors; state() and state_dict() return handles to
// them: reading or writing through a handle reads or writes the optimizer's state. The step
// count (steps()) is the only other state.
//
// Paged state (optimizer offload to NVMe): an optimizer built with a TensorPager
// (runtime/tensor_pager.h) allocates no state tensors; the pager holds them, and step() brings each
// view's state in (the next view's read started before this view's update; the pager writes a
// changed view out when its buffer is needed), with the same update on the same values — the
// results are bitwise those of resident state. The paged step visits the views in sweeps,
// alternately 0..N-1 (odd steps) and N-1..0 (even steps): the views a step updated last are
// still in the pager's buffers and are the next step's first, so with K buffers for N views a
// step reads about N − K views, not N − K + 1 as in the same order every step (the pager's
// Eviction::kSweeps plans for that order). Each element's update is independent of the others',
// so the order does not change a bit. prefetch_state() starts the first views' reads
// early (they run during forward and backward), and step() returns without waiting for any
// write-out: a failed one is thrown to the next user of its buffer (a later step, a
// checkpoint's access_state, flush_state), and the buffer keeps the view until one lands. state()
// and state_dict() then refuse (there are no resident tensors to hand out); access_state() works
// either way and is what checkpoints use.
//
// Paged masters (runtime/shard_view.h's MasterPages: the sharding engine keeps the masters on
// NVMe with the state): a view's master is read in beside its state (the same order and
// prefetches), updated in the page, handed to the view's `updated` and released changed (the
// pager writes it out when its buffer is needed). Paged masters need paged state. access_master()
// is the master's access for checkpoints, resident or paged; flush_state() flushes the masters'
// pagers too.
//
// Thread-safety: none; one optimizer per rank, used from the rank's compute thread. Inside
// step() the loops use the calling thread's OpenMP team (its intra-op threads).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "optim/shard_view.h"
#include "runtime/macros.h"
#include "runtime/tensor.h"
#include "runtime/tensor_pager.h"

namespace zs::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  ZS_DISALLOW_COPY(Optimizer);

  // One update of every view at learning rate `lr` (the schedule's value). steps() is
  // incremented first: the first call runs step t = 1. A view built from a whole parameter that
  // has no gradient yet is skipped. lr must be finite and >= 0. Views with a gate
  // (runtime/shard_view.h: the sharding engine's) are checked before any update — a step on
  // gradients that finish_backward has not completed, or a second step on the same gradients,
  // throws and changes nothing — and told afterwards that the step ran.
  void step(float lr);
  // Zeroes the gradient of every view (whole gradient tensors, padding included; for whole
  // parameters, only the gradients already allocated).
  void zero_grad();

  int64_t steps() const { return steps_; }
  // Restores the step count from a checkpoint (bias corrections depend on it).
  void set_steps(int64_t steps);

  size_t num_views() const { return slots_.size(); }
  // View i as given to the constructor, its segments normalized. For a whole parameter, grad is
  // undefined: the step reads master.grad().
  const ShardView& view(size_t i) const;
  // Views whose gradient is defined right now, with grad filled in (whole parameters: their
  // autograd gradient): what clip_grad_norm and the loss scaler's unscale take.
  std::vector<ShardView> grad_views() const;

  // View i's state tensors, resident while the object lives (paged state is read in, and written
  // back at destruction if mark_written() was called); resident state is simply handed out.
  using StateAccess = PageAccess;
  StateAccess access_state(size_t i) const;
  // View i's master as the one tensor of a StateAccess (paged: read in, and written back at its
  // destruction if mark_written() was called; resident: the master itself).
  StateAccess access_master(size_t i) const;
  // Whether the state lives in a TensorPager (not resident).
  bool paged() const { return pager_ != nullptr; }
  // Waits for the pager's write-outs (a checkpoint load's): no-op for resident state.
  void flush_state() const;
  // Paged state: starts reading the first views' state into the pager's buffers (waiting for a
  // buffer's last write-out where it must), so that the reads run while the caller computes
  // (the engine calls it as a step's forward begins); step() then finds them resident. No-op
  // for resident state.
  void prefetch_state() const;

  // Names of the per-element state tensors of each view, in order.
  const std::vector<std::string>& state_names() const { return state_names_; }
  // The state tensors of view i in the order of state_names() (handles, read/write). Resident
  // state only (InvalidArgument for a paged optimizer: use access_state()).
  const std::vector<Tensor>& state(size_t i) const;
  // Every state tensor as ("<view name>.<state name>", handle), views in order. A view without a
  // name is called "view<i>".
  std::vector<std::pair<std::string, Tensor>> state_dict() const;

 protected:
  // `kind` names the optimizer in errors ("AdamW"). `pager`: paged state (must outlive the
  // optimizer); null keeps the state resident on each view's master allocator.
  Optimizer(const char* kind, std::vector<ShardView> views, std::vector<std::string> state_names,
            TensorPager* pager = nullptr);
  // Whole parameters; decay[i] is params[i]'s weight-decay flag.
  Optimizer(const char* kind, const std::vector<Tensor>& params, const std::vector<bool>& decay,
            std::vector<std::string> state_names);

  // Updates one view (its grad resolved and checked) with its state tensors at step t.
  virtual void update(const ShardView& view, const std::vector<Tensor>& state, float lr,
                      int64_t t) = 0;

 private:
  struct Slot {
    ShardView view;
    bool grad_from_autograd = false;  // whole parameter: grad is master.grad() at step time
    std::vector<Tensor> state;
  };
  void add_slot(ShardView view, bool grad_from_autograd);
  Tensor resolved_grad(const Slot& slot) const;
  // Paged state: starts reading view i's state (and its paged master) into the pagers' buffers.
  void prefetch_view(size_t i, bool may_wait = true) const;
  // Paged state: the k-th view step t updates. Odd steps go up (0..N-1), even steps down.
  size_t sweep_view(int64_t t, size_t k) const;

  const char* kind_;
  std::vector<std::string> state_names_;
  std::vector<Slot> slots_;
  std::vector<GradientGate*> gates_;  // the views' distinct gates (none for autograd parameters)
  TensorPager* pager_ = nullptr;
  std::vector<TensorPager*> master_pagers_;  // the views' distinct master pagers (paged masters)
  int64_t steps_ = 0;
};

}  // namespace zs::optim
