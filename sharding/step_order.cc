// StepOrder's transitions and their messages (sharding/step_order.h).
#include "sharding/step_order.h"

#include "runtime/error.h"

namespace zs::sharding {

namespace {

constexpr const char* kOrder =
    " (a step is forward → backward → finish_backward() per micro-batch, then the optimizer "
    "step, then after_step())";

constexpr const char* kDeferred =
    "the step's last micro-batch was deferred (ShardedModel::defer_sync(true)), so its gradients "
    "were never reduced; call defer_sync(false) before the last micro-batch's forward";

}  // namespace

void StepOrder::check_not_reduced(const char* call) const {
  ZS_CHECK(!reduces_once_per_step_ || phase_ != Phase::kFinished, "sharding: ", call,
           " after the step's gradients were reduced: grad_sync per_step reduces the local sum "
           "once, at the micro-batch that was not deferred, and nothing would reduce this one; "
           "call defer_sync(true) before every micro-batch of a step but the last, and "
           "after_step() after the optimizer step",
           kOrder);
}

void StepOrder::forward(bool grad_mode) {
  ZS_CHECK(phase_ != Phase::kStepped,
           "sharding: a forward after the optimizer step, before "
           "ShardedModel::after_step(): it would compute with the parameters from before the "
           "update; call after_step() after each optimizer step",
           kOrder);
  ZS_CHECK(!grad_mode || phase_ != Phase::kBackward,
           "sharding: a forward for a new micro-batch "
           "before ShardedModel::finish_backward() of the previous backward: its gradients are "
           "not reduced yet and the next backward would overwrite them; call finish_backward() "
           "after each backward",
           kOrder);
  if (grad_mode) check_not_reduced("a forward for a new micro-batch");
}

void StepOrder::backward() {
  ZS_CHECK(phase_ != Phase::kStepped,
           "sharding: a backward after the optimizer step, before "
           "ShardedModel::after_step(); call after_step() after each optimizer step",
           kOrder);
  ZS_CHECK(phase_ != Phase::kBackward,
           "sharding: a second backward before "
           "ShardedModel::finish_backward(): it would overwrite the first one's unreduced "
           "gradients; call finish_backward() after each backward",
           kOrder);
  check_not_reduced("a backward");
  phase_ = Phase::kBackward;
}

void StepOrder::finish_backward(bool deferred) {
  ZS_CHECK(phase_ != Phase::kStepped,
           "sharding: finish_backward() after the optimizer step, "
           "before ShardedModel::after_step(); call after_step() after each optimizer step",
           kOrder);
  ZS_CHECK(phase_ == Phase::kBackward, "sharding: finish_backward() without a backward since ",
           phase_ == Phase::kIdle ? "the last after_step() (or since the model was made)"
                                  : "the last finish_backward()",
           "; run backward(loss) first", kOrder);
  phase_ = deferred ? Phase::kAccumulated : Phase::kFinished;
}

void StepOrder::after_step() {
  ZS_CHECK(phase_ != Phase::kBackward,
           "sharding: after_step() before "
           "ShardedModel::finish_backward() of the last backward: its gradients were never "
           "reduced; call finish_backward() after each backward",
           kOrder);
  ZS_CHECK(phase_ != Phase::kIdle,
           "sharding: after_step() without a backward and "
           "finish_backward() since the last after_step() (or since the model was made)",
           kOrder);
  ZS_CHECK(phase_ != Phase::kAccumulated, "sharding: after_step(): ", kDeferred, kOrder);
  phase_ = Phase::kIdle;
}

void StepOrder::check(GradientUse use, const char* consumer) const {
  ZS_CHECK(phase_ != Phase::kBackward, consumer,
           ": the gradients were used before "
           "ShardedModel::finish_backward(): they are not reduced yet; call finish_backward() "
           "after each backward",
           kOrder);
  ZS_CHECK(phase_ != Phase::kIdle, consumer,
           ": no gradients since the last "
           "ShardedModel::after_step() (or since the model was made); run backward and "
           "finish_backward() first",
           kOrder);
  ZS_CHECK(phase_ != Phase::kAccumulated, consumer,
           ": the gradients were used before they were "
           "reduced: ",
           kDeferred, kOrder);
  ZS_CHECK(use != GradientUse::kStep || phase_ != Phase::kStepped, consumer,
           ": a second optimizer step on the same gradients, before ShardedModel::after_step(); "
           "call after_step() after each optimizer step",
           kOrder);
}

void StepOrder::stepped() { phase_ = Phase::kStepped; }

}  // namespace zs::sharding
