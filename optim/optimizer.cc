// The optimizer base: views, eager state allocation, the step loop, state access.
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <exception>

#include "runtime/logging.h"
#include "runtime/memory_tracker.h"

namespace zs::optim {
namespace {

// View `v`'s paged master, acquired from its pager, as a tensor of the master's shape.
Tensor acquire_paged_master(const ShardView& v) {
  return page_view(v.pages.pager->acquire(v.pages.page).front(), v.master.shape(), DType::kF32,
                   v.master.name());
}

}  // namespace

Optimizer::Optimizer(const char* kind, std::vector<ShardView> views,
                     std::vector<std::string> state_names, TensorPager* pager)
    : kind_(kind),
      state_names_(std::move(state_names)),
      gates_(distinct_gates(views)),
      pager_(pager) {
  for (ShardView& view : views) {
    check_shard_view(view, kind_);
    add_slot(std::move(view), false);
  }
  for (const Slot& slot : slots_) {
    TensorPager* masters = slot.view.pages.pager;
    if (masters == nullptr) continue;
    ZS_CHECK(pager_ != nullptr, kind_, ": view '", slot.view.name, "' has its master paged (",
             masters->describe(),
             ") but the optimizer state is resident; page the state too (a TensorPager for the "
             "optimizer), so that the step finds the master and its state in host buffers");
    if (std::find(master_pagers_.begin(), master_pagers_.end(), masters) == master_pagers_.end()) {
      master_pagers_.push_back(masters);
    }
  }
  if (pager_ != nullptr) {
    std::vector<int64_t> numel;
    for (const Slot& slot : slots_) numel.push_back(slot.view.master.numel());
    pager_->attach(numel, state_names_.size());
  }
}

Optimizer::Optimizer(const char* kind, const std::vector<Tensor>& params,
                     const std::vector<bool>& decay, std::vector<std::string> state_names)
    : kind_(kind), state_names_(std::move(state_names)) {
  ZS_CHECK(decay.size() == params.size(), kind_, ": ", decay.size(), " decay flags for ",
           params.size(), " parameters; pass one flag per parameter");
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    ZS_CHECK(p.defined() && p.dtype() == DType::kF32, kind_, ": parameter ", p.describe(),
             " must be fp32 (mixed precision keeps fp32 master weights in the sharded "
             "optimizer: build ShardViews over the fp32 master shards instead)");
    add_slot(whole_tensor_view(p, Tensor(), decay[i]), true);
  }
}

void Optimizer::add_slot(ShardView view, bool grad_from_autograd) {
  if (view.name.empty()) view.name = "view" + std::to_string(slots_.size());
  for (const Slot& other : slots_) {
    ZS_CHECK(other.view.name != view.name, kind_, ": two views are named '", view.name,
             "'; view names key the optimizer state in checkpoints and must be unique");
  }
  view.segments = normalize_segments(std::move(view.segments), view.master.numel(),
                                     ::zs::detail::concat(kind_, " view '", view.name, "'"));
  Slot slot;
  slot.grad_from_autograd = grad_from_autograd;
  for (const std::string& state_name : state_names_) {
    if (pager_ != nullptr) break;  // the pager holds it
    slot.state.push_back(Tensor::zeros(view.master.shape(), DType::kF32, view.master.allocator(),
                                       MemoryCategory::kOptimizerState,
                                       view.name + "." + state_name));
  }
  slot.view = std::move(view);
  slots_.push_back(std::move(slot));
}

Tensor Optimizer::resolved_grad(const Slot& slot) const {
  if (!slot.grad_from_autograd) return slot.view.grad;
  Tensor grad = slot.view.master.grad();
  if (!grad.defined()) return grad;
  ZS_CHECK(grad.dtype() == DType::kF32 && grad.numel() == slot.view.master.numel(), kind_,
           ": the gradient ", grad.describe(), " of parameter ", slot.view.master.describe(),
           " must be fp32 with the parameter's shape");
  return grad;
}

void Optimizer::step(float lr) {
  ZS_CHECK(std::isfinite(lr) && lr >= 0.0f, kind_, ": learning rate ", lr,
           " must be finite and >= 0; check the schedule");
  // Every gate agrees before anything changes.
  for (GradientGate* gate : gates_) gate->check(GradientUse::kStep, kind_);
  ++steps_;
  if (pager_ != nullptr) {
    // Paged: view i+1's state is read while view i updates, and view i's written out while
    // view i+1 updates. Views built from whole parameters are never paged (the engine's are
    // shards).
    // A paged master (runtime/shard_view.h) comes in and goes out the same way, beside its
    // state, and its owner refreshes its compute copy from the page before it goes.
    // The views go in sweeps, alternately up and down (sweep_view): the views the last step
    // left in the buffers are the ones this step needs first.
    const size_t n = slots_.size();
    for (size_t k = 0; k < n; ++k) {
      const size_t i = sweep_view(steps_, k);
      const ShardView& view = slots_[i].view;
      TensorPager* masters = view.pages.pager;
      const std::vector<Tensor> state = pager_->acquire(i);
      ShardView resident = view;
      bool master_acquired = false;
      bool changed = false;  // the update ran: the buffers hold changed bytes
      try {
        if (masters != nullptr) {
          resident.master = acquire_paged_master(view);
          master_acquired = true;
        }
        // After the acquires: with a single buffer, a prefetch first would take the buffer view
        // i needs and read view i+1 for nothing.
        if (k + 1 < n) prefetch_view(sweep_view(steps_, k + 1));
        for (size_t later = k + 2; later < n; ++later) {
          prefetch_view(sweep_view(steps_, later), false);
        }
        update(resident, state, lr, steps_);
        changed = true;
        if (masters != nullptr && view.pages.updated) view.pages.updated(resident.master);
      } catch (...) {
        // The step fails (an earlier write-out's error surfacing at an eviction, or the refresh
        // of the compute copy): view i is given back, changed if its update ran (the state and
        // master agree with each other), so that the pagers stay consistent for whoever handles
        // the error.
        if (master_acquired) masters->release(view.pages.page, changed);
        pager_->release(i, changed);
        throw;
      }
      // Both go back even if one release fails (a write-out that cannot be submitted): the
      // other pager stays consistent for whoever handles the error.
      std::exception_ptr error;
      if (masters != nullptr) {
        try {
          masters->release(view.pages.page, true);
        } catch (...) {
          error = std::current_exception();
        }
      }
      pager_->release(i, true);
      if (error) std::rethrow_exception(error);
    }
    // No flush: the changed views stay in their buffers until a buffer is needed (their
    // write-outs then run, started early where the pager sees the eviction coming); a buffer is
    // reused only after its write-out landed, and a failed one fails whoever waits for it next
    // (an acquire or eviction of a later step, a checkpoint's access, flush_state()) and keeps
    // its view.
    for (GradientGate* gate : gates_) gate->stepped();
    return;
  }
  for (const Slot& slot : slots_) {
    if (slot.grad_from_autograd) {
      const Tensor grad = resolved_grad(slot);
      if (!grad.defined()) continue;  // a parameter that took no part in the loss
      ShardView view = slot.view;
      view.grad = grad;
      update(view, slot.state, lr, steps_);
    } else {
      update(slot.view, slot.state, lr, steps_);
    }
  }
  for (GradientGate* gate : gates_) gate->stepped();
}

void Optimizer::zero_grad() {
  for (const Slot& slot : slots_) {
    const Tensor grad = resolved_grad(slot);
    // zero_bytes: a memset on the CPU, enqueued on the allocator's stream on a device.
    if (grad.defined() && grad.numel() > 0) zero_bytes(grad);
  }
}

void Optimizer::set_steps(int64_t steps) {
  ZS_CHECK(steps >= 0, kind_, ": step count ", steps, " must be >= 0");
  steps_ = steps;
}

const ShardView& Optimizer::view(size_t i) const {
  ZS_CHECK(i < slots_.size(), kind_, ": view ", i, " does not exist (", slots_.size(), " views)");
  return slots_[i].view;
}

std::vector<ShardView> Optimizer::grad_views() const {
  std::vector<ShardView> views;
  for (const Slot& slot : slots_) {
    ShardView view = slot.view;
    view.grad = resolved_grad(slot);
    if (view.grad.defined()) views.push_back(std::move(view));
  }
  return views;
}

const std::vector<Tensor>& Optimizer::state(size_t i) const {
  (void)view(i);
  ZS_CHECK(pager_ == nullptr, kind_, ": the state of view '", slots_[i].view.name, "' is paged (",
           pager_->describe(), "), not resident: use access_state()");
  return slots_[i].state;
}

Optimizer::StateAccess Optimizer::access_state(size_t i) const {
  (void)view(i);
  if (pager_ == nullptr) return StateAccess(nullptr, i, slots_[i].state);
  return StateAccess(pager_, i, pager_->acquire(i));
}

Optimizer::StateAccess Optimizer::access_master(size_t i) const {
  const ShardView& v = view(i);
  if (v.pages.pager == nullptr) return StateAccess(nullptr, i, {v.master});
  return StateAccess(v.pages.pager, v.pages.page, {acquire_paged_master(v)});
}

void Optimizer::flush_state() const {
  if (pager_ != nullptr) pager_->flush();
  for (TensorPager* masters : master_pagers_) masters->flush();
}

void Optimizer::prefetch_view(size_t i, bool may_wait) const {
  pager_->prefetch(i, may_wait);
  const MasterPages& pages = slots_[i].view.pages;
  if (pages.pager != nullptr) pages.pager->prefetch(pages.page, may_wait);
}

size_t Optimizer::sweep_view(int64_t t, size_t k) const {
  return t % 2 == 1 ? k : slots_.size() - 1 - k;
}

void Optimizer::prefetch_state() const {
  if (pager_ == nullptr) return;
  // In the next step's order. The pager takes free or idle buffers and skips a view when none
  // is left or when it would evict a view needed sooner. Waiting, where it must, for the last
  // step's write-outs of the buffers it takes (mostly done by now), so that every buffer
  // holds a read running through forward and backward.
  for (size_t k = 0; k < slots_.size(); ++k) prefetch_view(sweep_view(steps_ + 1, k));
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state_dict() const {
  ZS_CHECK(pager_ == nullptr, kind_, ": the state is paged (", pager_->describe(),
           "), not resident: use access_state() per view");
  std::vector<std::pair<std::string, Tensor>> entries;
  for (const Slot& slot : slots_) {
    for (size_t k = 0; k < state_names_.size(); ++k) {
      entries.emplace_back(slot.view.name + "." + state_names_[k], slot.state[k]);
    }
  }
  return entries;
}

}  // namespace zs::optim
