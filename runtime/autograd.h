// Autograd: a linear tape per rank.
//
// Ops record a TapeNode (inputs, outputs, backward closure) on the calling thread's tape when
// grad mode is on and an input requires grad. backward(loss) walks the tape in reverse: each
// node reads its outputs' gradients and accumulates into its inputs' gradients; as soon as a
// node has run, its closure (and the activations it saved) and its outputs' gradients are
// freed, so activation memory falls as backward proceeds. Leaf gradients accumulate into the
// leaf's grad buffer (a view of a unit's flat gradient buffer, for parameters).
//
// The tape and grad mode are thread-local: ranks that are threads of one process each have
// their own. Sharding records unit boundaries as nodes (always_run) on the same tape.
//
// Activation checkpointing (checkpoint_activations()): a function's forward runs without recording,
// and one node stands for it on the tape; that node's backward runs the function again with grad
// on, recording on a tape of its own (TapeScope: the outer tape is being walked and must not grow),
// and walks that tape from the function's output. The recomputed ops accumulate into the same
// gradients (leaves' buffers, the input's gradient) in the same order as an unrecorded run, so the
// results are the same bits when the function computes the same values twice.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace zs {

// Grad mode of the calling thread (on by default).
bool grad_enabled();
class GradModeScope {
 public:
  explicit GradModeScope(bool enabled);
  ~GradModeScope();
  GradModeScope(const GradModeScope&) = delete;
  GradModeScope& operator=(const GradModeScope&) = delete;

 private:
  bool previous_;
};
struct NoGradScope : GradModeScope {
  NoGradScope() : GradModeScope(false) {}
};

// Where a backward closure writes one input's gradient. If `accumulate` is false the buffer is
// fresh (contents undefined) and must be fully written; otherwise add into it.
struct GradSink {
  Tensor buffer;
  bool accumulate = false;
  explicit operator bool() const { return buffer.defined(); }
};

class BackwardContext;
using BackwardFn = std::function<void(BackwardContext&)>;

struct TapeNode {
  std::string op;                                     // "linear", "unit_end blocks.3", ...
  std::vector<std::shared_ptr<AutogradMeta>> inputs;  // null where no grad is needed
  std::vector<std::shared_ptr<AutogradMeta>> outputs;
  BackwardFn backward;
  bool always_run = false;  // run even when no output received a gradient
};

class BackwardContext {
 public:
  explicit BackwardContext(TapeNode& node) : node_(node) {}
  // The gradient of output i, or an undefined tensor if none reached it.
  Tensor grad_output(size_t i) const;
  bool needs_input_grad(size_t i) const;
  // The sink for input i's gradient (undefined buffer if that input needs none). The first
  // call for a value without a gradient allocates one (category gradients for leaves,
  // activations otherwise) with accumulate = false.
  GradSink grad_input(size_t i);
  // For ops whose input gradient equals the output gradient (views, identity boundaries):
  // hands `grad` over without a copy when input i has no gradient yet and is not a leaf,
  // otherwise adds it into the input's gradient.
  void alias_or_accumulate_input_grad(size_t i, const Tensor& grad);

 private:
  TapeNode& node_;
};

class Tape {
 public:
  Tape() = default;
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  void record(TapeNode node);
  // Backward from a scalar `loss` (seeded with `seed`, e.g. a loss scale), then clears the tape.
  void backward(const Tensor& loss, float seed = 1.0f);
  // Backward from `output` whose gradient is `grad` (same shape), then clears the tape: the
  // inner walk of a checkpointed function. `grad` becomes output's gradient (added to one it
  // already has).
  void backward(const Tensor& output, const Tensor& grad);
  void clear();
  size_t size() const { return nodes_.size(); }

 private:
  void run_backward(AutogradMeta& seeded);
  std::vector<TapeNode> nodes_;
};

// The calling thread's tape (the one a TapeScope installed, else the thread's own). It holds one
// graph at a time: backward() runs every node recorded since the last backward (or clear) and then
// empties the tape, so record one forward, run its backward, then record the next. A forward that
// is abandoned without backward must be dropped with current_tape().clear() before the allocators
// its tensors came from are destroyed.
Tape& current_tape();

// Records on `tape` instead of the calling thread's current tape for its lifetime (nests).
class TapeScope {
 public:
  explicit TapeScope(Tape& tape);
  ~TapeScope();
  TapeScope(const TapeScope&) = delete;
  TapeScope& operator=(const TapeScope&) = delete;

 private:
  Tape* previous_;
};

// True if grad mode is on and any of `inputs` requires grad: the op must record itself.
bool needs_grad(std::initializer_list<const Tensor*> inputs);

// Records an op on the current tape: marks outputs as requiring grad (non-leaf) and links
// metadata. Inputs that do not require grad get a null slot.
void record_op(const char* op, std::initializer_list<const Tensor*> inputs,
               std::initializer_list<const Tensor*> outputs, BackwardFn backward);

// Records a node that runs in backward at its position on the tape whether or not gradients
// reached it (no inputs or outputs): unit boundaries of the sharding layer. Runs only if grad
// mode is on.
void record_boundary(std::string op, BackwardFn backward);

// backward() on the calling thread's tape.
void backward(const Tensor& loss, float seed = 1.0f);

// Activation checkpointing: y = fn(input), keeping only `input` (and y, which the caller holds)
// instead of every activation fn saves. With grad mode off it is just fn(input). Otherwise fn
// runs under NoGradScope and one node "checkpoint <name>" is recorded; in backward that node
// calls fn(input) again with grad on, on a tape of its own, and walks it from the recomputed
// output seeded with y's gradient: parameters and `input` receive their gradients from the
// recomputed ops, in the order a recorded fn would have given them. Peak activation memory in
// backward is then one fn's saved activations (plus the checkpoints' inputs), not all of them.
// What fn must do for the same bits: compute the same values on both calls — read only its
// input, parameters and state left unchanged until backward (a dropout key from such state,
// not from a counter bumped per call; runtime/rng.h keys are pure functions). Its recording
// must not depend on grad mode other than by recording or not. fn is kept (copied) until the
// node's backward ran or the tape was cleared: what it refers to must live that long.
Tensor checkpoint_activations(const std::string& name, const Tensor& input,
                              std::function<Tensor(const Tensor&)> fn);

}  // namespace zs
