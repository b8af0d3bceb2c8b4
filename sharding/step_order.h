// StepOrder: the order a ShardedModel's step must follow, enforced.
//
//   forward → backward → finish_backward()  (once or more: gradient accumulation; with
//                                            defer_sync, every one but the last deferred)
//     → [clip, unscale: read the gradients] → optimizer step → after_step()
//
// Every call out of this order is an InvalidArgument that names the call that was missed,
// instead of a step on stale or partial values: a forgotten finish_backward() leaves gradients
// unreduced (stage 1: not even launched), a forgotten after_step() leaves the model computing
// with the parameters from before the update, and a second backward before finish_backward()
// overwrites the first one's gradients (stages 0/1 zero their buffer at each backward). The
// phases:
//
//   kIdle         after construction and after_step(): forward and backward may start
//   kBackward     a backward ran; only finish_backward() (or a forward without grad mode) may
//                 follow
//   kAccumulated  finish_backward() of a micro-batch whose reduction was deferred
//                 (ShardedModel::defer_sync): more micro-batches must follow, the last one not
//                 deferred; the gradients are not the step's reduced sum yet, so nothing may
//                 read them and after_step() is refused
//   kFinished     the gradients hold the step's reduced sum: read them, step, or run the next
//                 micro-batch (forward + backward) to accumulate — unless the model reduces once
//                 per step (GradSync::kPerStep): then the sum was reduced and a further
//                 micro-batch is refused, since nothing would reduce it
//   kStepped      an optimizer stepped on them: only after_step() (or reading them) may follow
//
// finish_backward() is an explicit call, not the tape's final callback (FSDP's root
// post-backward): a backward here is a plain walk of the thread's tape, which may hold more than
// the model, and the call is also where the host waits for the reductions, which the caller
// should see.
//
// StepOrder is the GradientGate (runtime/shard_view.h) of the model's local shards: optimizers
// and clipping ask it before they touch the gradients, and an optimizer step reports itself
// through stepped(). Shared between the ShardedModel and the views (shared_ptr). Not
// thread-safe: the rank's compute thread drives the step.
#pragma once

#include "runtime/shard_view.h"

namespace zs::sharding {

class StepOrder final : public GradientGate {
 public:
  enum class Phase { kIdle, kBackward, kAccumulated, kFinished, kStepped };

  // reduces_once_per_step: the model reduces a step's gradients once (GradSync::kPerStep), so
  // no micro-batch may follow the one that reduced them.
  explicit StepOrder(bool reduces_once_per_step = false)
      : reduces_once_per_step_(reduces_once_per_step) {}

  // Each checks that the call may come now (else throws, leaving the phase as it was) and moves
  // to the phase that follows it.
  void forward(bool grad_mode);  // the model's forward starts (grad_mode: it records a backward)
  void backward();               // a backward pass reached the model
  void finish_backward(bool deferred = false);  // deferred: ShardedModel::defer_sync(true)
  void after_step();

  void check(GradientUse use, const char* consumer) const override;
  void stepped() override;

  Phase phase() const { return phase_; }

 private:
  // A micro-batch with grad mode in kFinished under reduce-once: a clear error.
  void check_not_reduced(const char* call) const;

  bool reduces_once_per_step_ = false;
  Phase phase_ = Phase::kIdle;
};

}  // namespace zs::sharding
