// TrainLoop: the order of the named points (train/loop.h).
#include "train/loop.h"

#include <utility>

#include "runtime/error.h"

namespace zs::train {

TrainLoop::TrainLoop(int64_t steps, int64_t eval_interval, std::vector<TrainerPart*> parts,
                     Checkpointer& checkpointer, StopCheck* stop)
    : steps_(steps),
      eval_interval_(eval_interval),
      parts_(std::move(parts)),
      checkpointer_(checkpointer),
      stop_(stop) {}

LoopEnd TrainLoop::run(StepRunner& runner) {
  const int64_t first = checkpointer_.restore();
  ZS_CHECK(first >= 0 && first <= steps_, "the restored state has completed ", first,
           " steps, but this run has ", steps_, "; raise --steps to continue it");
  runner.start(first);
  for (TrainerPart* part : parts_) part->on_start(first, steps_);
  for (int64_t step = first; step < steps_; ++step) {
    const bool last = step == steps_ - 1;
    for (TrainerPart* part : parts_) part->before_step(step, last);
    const StepRecord record = runner.step(step);
    for (TrainerPart* part : parts_) part->after_step(record, last);
    const int64_t completed = step + 1;
    if (eval_interval_ > 0 && completed % eval_interval_ == 0 && !last) {
      for (TrainerPart* part : parts_) part->on_eval(completed);
    }
    checkpointer_.publish(false);
    const StopReason stop =
        stop_ && !last ? stop_->after_step(first, completed) : StopReason::kNone;
    // A stop saves as the last step does: the run continues from there.
    if (checkpointer_.due(completed, last || stop != StopReason::kNone)) {
      checkpointer_.save(completed);
    }
    if (stop != StopReason::kNone) {
      checkpointer_.publish(true);
      return {completed, stop};
    }
  }
  for (TrainerPart* part : parts_) part->on_eval(steps_);
  checkpointer_.publish(true);
  for (TrainerPart* part : parts_) part->on_end(steps_);
  return {steps_, StopReason::kNone};
}

}  // namespace zs::train
