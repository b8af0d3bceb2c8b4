// The training loop's named points, in order, with test doubles for the step, the parts and
// the checkpointer: what a part sees and when the save/restore seam is called (a save's
// publication after each step and, waiting, at the end), fresh and after a restore.
#include "train/loop.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "train/checkpoints.h"

namespace zs::train {
namespace {

using Calls = std::vector<std::string>;

class FakeSteps final : public StepRunner {
 public:
  explicit FakeSteps(Calls& calls) : calls_(calls) {}
  void start(int64_t first_step) override {
    calls_.push_back("start " + std::to_string(first_step));
  }
  StepRecord step(int64_t step) override {
    calls_.push_back("step " + std::to_string(step));
    StepRecord r;
    r.step = step;
    r.loss = static_cast<float>(step);
    return r;
  }

 private:
  Calls& calls_;
};

class RecordingPart final : public TrainerPart {
 public:
  RecordingPart(Calls& calls, std::string name) : calls_(calls), name_(std::move(name)) {}
  void on_start(int64_t first, int64_t steps) override {
    add("on_start " + std::to_string(first) + "/" + std::to_string(steps));
  }
  void before_step(int64_t step, bool last) override {
    add("before_step " + std::to_string(step) + (last ? " last" : ""));
  }
  void after_step(const StepRecord& r, bool last) override {
    add("after_step " + std::to_string(r.step) + (last ? " last" : ""));
  }
  void on_eval(int64_t completed) override { add("on_eval " + std::to_string(completed)); }
  void on_end(int64_t steps) override { add("on_end " + std::to_string(steps)); }

 private:
  void add(const std::string& call) { calls_.push_back(name_ + "." + call); }
  Calls& calls_;
  std::string name_;
};

// Saves every `interval` steps and at the end; restores `restored` completed steps.
class RecordingCheckpointer final : public Checkpointer {
 public:
  RecordingCheckpointer(Calls& calls, int64_t interval, int64_t restored)
      : calls_(calls), interval_(interval), restored_(restored) {}
  int64_t restore() override {
    calls_.push_back("restore");
    return restored_;
  }
  bool due(int64_t completed, bool last) const override {
    return last || completed % interval_ == 0;
  }
  void save(int64_t completed) override { calls_.push_back("save " + std::to_string(completed)); }
  void publish(bool wait) override { calls_.push_back(wait ? "publish wait" : "publish"); }

 private:
  Calls& calls_;
  const int64_t interval_;
  const int64_t restored_;
};

TEST(TrainLoop, CallsThePartsAndTheSeamAtTheirNamedPoints) {
  Calls calls;
  FakeSteps steps(calls);
  RecordingPart a(calls, "a");
  RecordingCheckpointer checkpoints(calls, 2, 0);
  TrainLoop(3, 2, {&a}, checkpoints).run(steps);
  // A save's writes are published at the next step boundary, or waited for at the end.
  const Calls expected = {"restore",        "start 0",
                          "a.on_start 0/3", "a.before_step 0",
                          "step 0",         "a.after_step 0",
                          "publish",        "a.before_step 1",
                          "step 1",         "a.after_step 1",
                          "a.on_eval 2",    "publish",
                          "save 2",         "a.before_step 2 last",
                          "step 2",         "a.after_step 2 last",
                          "publish",        "save 3",
                          "a.on_eval 3",    "publish wait",
                          "a.on_end 3"};
  EXPECT_EQ(calls, expected);
}

// Stops after `at` completed steps for `reason`; records each question.
class StopAt final : public StopCheck {
 public:
  StopAt(Calls& calls, int64_t at, StopReason reason) : calls_(calls), at_(at), reason_(reason) {}
  StopReason after_step(int64_t first, int64_t completed) override {
    calls_.push_back("stop? " + std::to_string(first) + "/" + std::to_string(completed));
    return completed == at_ ? reason_ : StopReason::kNone;
  }

 private:
  Calls& calls_;
  const int64_t at_;
  const StopReason reason_;
};

// A stop saves as the last step would (between the checkpoint interval's saves), waits for the
// save to be published, and ends the loop there: no final evaluation, no end of run. The last
// step is never asked about.
TEST(TrainLoop, AStopSavesWaitsForThePublicationAndEndsTheLoop) {
  Calls calls;
  FakeSteps steps(calls);
  RecordingPart a(calls, "a");
  RecordingCheckpointer checkpoints(calls, 100, 1);
  StopAt stop(calls, 3, StopReason::kSignal);
  const LoopEnd end = TrainLoop(5, 0, {&a}, checkpoints, &stop).run(steps);
  EXPECT_EQ(end.completed, 3);
  EXPECT_EQ(end.stopped, StopReason::kSignal);
  const Calls expected = {"restore",         "start 1",        "a.on_start 1/5", "a.before_step 1",
                          "step 1",          "a.after_step 1", "publish",        "stop? 1/2",
                          "a.before_step 2", "step 2",         "a.after_step 2", "publish",
                          "stop? 1/3",       "save 3",         "publish wait"};
  EXPECT_EQ(calls, expected);
  // Never asked after the last step: the run ends there anyway.
  Calls all;
  FakeSteps more(all);
  RecordingCheckpointer none(all, 100, 0);
  StopAt never(all, 99, StopReason::kPlanned);
  const LoopEnd whole = TrainLoop(2, 0, {}, none, &never).run(more);
  EXPECT_EQ(whole.completed, 2);
  EXPECT_EQ(whole.stopped, StopReason::kNone);
  EXPECT_EQ(std::count(all.begin(), all.end(), "stop? 0/1"), 1);
  EXPECT_EQ(std::count(all.begin(), all.end(), "stop? 0/2"), 0);
}

TEST(TrainLoop, ARestoreStartsAtTheRestoredStepAndPartsRunInOrder) {
  Calls calls;
  FakeSteps steps(calls);
  RecordingPart a(calls, "a");
  RecordingPart b(calls, "b");
  RecordingCheckpointer checkpoints(calls, 10, 2);
  TrainLoop(3, 0, {&a, &b}, checkpoints).run(steps);
  const Calls expected = {"restore",
                          "start 2",
                          "a.on_start 2/3",
                          "b.on_start 2/3",
                          "a.before_step 2 last",
                          "b.before_step 2 last",
                          "step 2",
                          "a.after_step 2 last",
                          "b.after_step 2 last",
                          "publish",
                          "save 3",
                          "a.on_eval 3",
                          "b.on_eval 3",
                          "publish wait",
                          "a.on_end 3",
                          "b.on_end 3"};
  EXPECT_EQ(calls, expected);
}

TEST(TrainLoop, ARestoredStateBeyondTheRunIsAnError) {
  Calls calls;
  FakeSteps steps(calls);
  RecordingCheckpointer checkpoints(calls, 1, 5);
  EXPECT_THROW(TrainLoop(3, 0, {}, checkpoints).run(steps), InvalidArgument);
}

TEST(TrainLoop, WithoutCheckpointsNothingIsRestoredOrSaved) {
  NoCheckpoints none;
  EXPECT_EQ(none.restore(), 0);
  EXPECT_FALSE(none.due(1, true));
  none.publish(true);
  const std::unique_ptr<Checkpointer> made = make_checkpointer(TrainConfig{}, TrainState{});
  EXPECT_EQ(made->restore(), 0);
  EXPECT_FALSE(made->due(100, true));
}

}  // namespace
}  // namespace zs::train
