// The training loop and the two kinds of things it calls at named points: parts (evaluation,
// logging, reports, sampling, weight export) and the checkpointer (save/restore of the state
// that makes a run resumable).
//
// One run of TrainLoop::run(steps, eval_interval):
//   first = checkpointer.restore()          // completed steps of the restored state, 0: fresh
//   steps.start(first)                      // data positioned at step `first`
//   part.on_start(first, steps)
//   for step in [first, steps):
//     part.before_step(step, last)
//     record = steps.step(step)             // batch → forward → backward → ... → after-step
//     part.after_step(record, last)
//     if eval_interval divides step + 1 and not last: part.on_eval(step + 1)
//     checkpointer.publish(false)           // a save whose background writes finished
//     stop = not last and stop_check.after_step(first, step + 1)   // every rank agrees
//     if checkpointer.due(step + 1, last or stop): checkpointer.save(step + 1)
//     if stop: checkpointer.publish(true); return {step + 1, stop}  // no final evaluation
//   part.on_eval(steps)                     // the final evaluation (the last save writes on)
//   checkpointer.publish(true)              // waits for the last save's writes, publishes it
//   part.on_end(steps)
// Parts are called in the order given. Every rank runs the same loop (parts that communicate
// issue their collectives on every rank in the same order). Not thread-safe: one rank's thread.
#pragma once

#include <cstdint>
#include <vector>

#include "train/records.h"

namespace zs::train {

// A part of a run, called by the loop at its named points. Default: nothing.
class TrainerPart {
 public:
  virtual ~TrainerPart() = default;
  virtual void on_start(int64_t /*first_step*/, int64_t /*steps*/) {}
  virtual void before_step(int64_t /*step*/, bool /*last*/) {}
  virtual void after_step(const StepRecord& /*record*/, bool /*last*/) {}
  // Evaluation point: after `completed_steps` optimizer steps.
  virtual void on_eval(int64_t /*completed_steps*/) {}
  virtual void on_end(int64_t /*steps*/) {}
};

// The save/restore seam (train/checkpoints.h names the state it covers).
class Checkpointer {
 public:
  virtual ~Checkpointer() = default;
  // Before the first step: loads the newest saved state, if any, and returns how many optimizer
  // steps it had completed (0: nothing restored, start from scratch).
  virtual int64_t restore() = 0;
  // Whether to save after `completed_steps` steps (`last`: the run's final step).
  virtual bool due(int64_t completed_steps, bool last) const = 0;
  // Saves the state after `completed_steps` steps: snapshots it (the next step may change it
  // then) and may leave the writing to the background, for publish() to finish.
  virtual void save(int64_t completed_steps) = 0;
  // Publishes the pending save once its writes have finished: after every step (`wait` false:
  // only when they have, else it stays pending) and once at the end of the run (`wait` true).
  // A failed write is thrown here, stopping the run at the step after the save. Every rank
  // calls it at the same points (it may communicate).
  virtual void publish(bool wait) = 0;
};

// Whether to stop after a step before the run's last: a signal, a planned exit (train/stop.h's
// StopRule). Every rank calls it at the same points (it may communicate).
class StopCheck {
 public:
  virtual ~StopCheck() = default;
  // After `completed_steps`, the first step this process ran being `first_step`.
  virtual StopReason after_step(int64_t first_step, int64_t completed_steps) = 0;
};

// How a loop ended: after how many steps, and why early (kNone: it ran every step).
struct LoopEnd {
  int64_t completed = 0;
  StopReason stopped = StopReason::kNone;
};

// What runs the steps: Trainer, through the engine that owns the data and the model.
class StepRunner {
 public:
  virtual ~StepRunner() = default;
  // Before the first step; `first_step` > 0 after a restore (the data resumes there).
  virtual void start(int64_t first_step) = 0;
  virtual StepRecord step(int64_t step) = 0;
};

class TrainLoop {
 public:
  // `eval_interval` 0: evaluate at the end only. Parts, the checkpointer and `stop` (null: never
  // early) must outlive run().
  TrainLoop(int64_t steps, int64_t eval_interval, std::vector<TrainerPart*> parts,
            Checkpointer& checkpointer, StopCheck* stop = nullptr);
  LoopEnd run(StepRunner& runner);

 private:
  const int64_t steps_;
  const int64_t eval_interval_;
  std::vector<TrainerPart*> parts_;
  Checkpointer& checkpointer_;
  StopCheck* stop_;
};

}  // namespace zs::train
