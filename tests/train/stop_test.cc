// Stopping a run before its last step without losing it (train/stop.h, issue 28 findings 9 and
// the planned exits): a SIGTERM (here raised by one rank's process through --inject-fault
// RANK:STEP:sigterm) stops every rank after the same step, saves a checkpoint there and makes
// zs-train exit with kExitPreempted, without a restart; --exit-after-steps and
// --exit-after-minutes save and stop with exit 0; a chain of jobs with --resume auto ends with the
// bits of one uninterrupted run; a second signal ends the process at once.
#include "train/stop.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "tests/support/corpus.h"
#include "tests/support/error_text.h"
#include "tests/support/log_capture.h"
#include "tests/support/scratch.h"
#include "tests/support/short_run.h"
#include "tests/support/step_bits.h"
#include "train/cli.h"
#include "train/config.h"
#include "train/engine.h"

namespace zs::train {
namespace {

using zs::testing::invalid_argument_message;
using zs::testing::learnable_corpus;
using zs::testing::LogCapture;
using zs::testing::read_bytes;
using zs::testing::ScratchDir;
using zs::testing::write_text;

// Rank `rank`'s process raises SIGTERM before step `step` (--inject-fault RANK:STEP:sigterm).
InjectedFault sigterm_before(int rank, int64_t step) {
  InjectedFault fault;
  fault.rank = rank;
  fault.step = step;
  fault.kind = InjectedFault::Kind::kSigterm;
  return fault;
}

class RunStop : public ::testing::Test {
 protected:
  RunStop() { write_text(corpus_, learnable_corpus()); }
  // 6 steps on 2 ranks at stage 3, saving the final weights to `weights`.
  TrainConfig run(const std::string& weights) const {
    TrainConfig c = zs::testing::short_gpt_run(corpus_, 2, 3, DType::kF32);
    c.save_weights = dir_.path(weights);
    return c;
  }
  // The bits of the uninterrupted run (its final weights and every step's record).
  TrainResult uninterrupted() const { return run_training(run("whole.safetensors")); }
  bool same_weights(const std::string& a, const std::string& b) const {
    return read_bytes(dir_.path(a)) == read_bytes(dir_.path(b));
  }
  ScratchDir dir_;
  const std::string corpus_ = dir_.path("corpus.txt");
};

TEST_F(RunStop, AChainOfPlannedExitsEndsWithTheBitsOfOneUninterruptedRun) {
  const TrainResult whole = uninterrupted();
  TrainConfig job = run("chain.safetensors");
  job.checkpoint_dir = dir_.path("ckpt");
  job.resume = "auto";  // the first job finds no checkpoint and starts the run
  job.exit_after_steps = 2;
  std::vector<StepRecord> steps;
  for (int j = 0; j < 3; ++j) {
    LogCapture log;
    const TrainResult r = run_training(job);
    steps.insert(steps.end(), r.steps.begin(), r.steps.end());
    if (j < 2) {
      EXPECT_EQ(r.stopped, StopReason::kPlanned) << "job " << j;
      EXPECT_EQ(r.stopped_after, 2 * (j + 1)) << "job " << j;
      EXPECT_TRUE(
          std::filesystem::is_directory(dir_.path("ckpt/step-00000" + std::to_string(2 * (j + 1)))))
          << "job " << j;
      EXPECT_NE(log.text().find("stopped after step " + std::to_string(2 * (j + 1)) +
                                " of 6 (--exit-after-steps 2)"),
                std::string::npos)
          << log.text();
      // Stopped early: no final weights yet.
      EXPECT_FALSE(std::filesystem::exists(job.save_weights)) << "job " << j;
    } else {
      EXPECT_EQ(r.stopped, StopReason::kNone);  // the last job ran to the end
    }
  }
  TrainResult chained;
  chained.steps = steps;
  zs::testing::expect_same_steps(whole, chained, "the chain of 3 jobs");
  EXPECT_TRUE(same_weights("whole.safetensors", "chain.safetensors"));
}

TEST_F(RunStop, ASigtermStopsEveryRankAfterTheSameStepSavedAndTheResumeIsBitForBit) {
  const TrainResult whole = uninterrupted();
  TrainConfig job = run("resumed.safetensors");
  job.checkpoint_dir = dir_.path("ckpt");
  job.max_restarts = 2;  // a preemption is not a failure: no restart
  job.injected_faults = {sigterm_before(1, 2)};
  TrainResult first;
  {
    LogCapture log;
    first = run_training(job);
    EXPECT_NE(log.text().find("stopped after step 3 of 6 (SIGTERM)"), std::string::npos)
        << log.text();
  }
  EXPECT_EQ(first.stopped, StopReason::kSignal);
  EXPECT_EQ(first.stopped_after, 3);  // rank 1 got it before step 2: step 2 ends, then the stop
  EXPECT_EQ(first.restarts, 0);
  ASSERT_EQ(first.steps.size(), 3u);
  EXPECT_TRUE(std::filesystem::is_directory(dir_.path("ckpt/step-000003")));
  EXPECT_FALSE(std::filesystem::exists(job.save_weights));
  job.injected_faults.clear();
  job.resume = "auto";
  const TrainResult rest = run_training(job);
  EXPECT_EQ(rest.stopped, StopReason::kNone);
  TrainResult chained;
  chained.steps = first.steps;
  chained.steps.insert(chained.steps.end(), rest.steps.begin(), rest.steps.end());
  zs::testing::expect_same_steps(whole, chained, "stopped by SIGTERM after 3 steps, resumed");
  EXPECT_TRUE(same_weights("whole.safetensors", "resumed.safetensors"));
}

TEST_F(RunStop, ASigtermWithoutACheckpointDirStopsAndSaysNothingWasSaved) {
  TrainConfig job = run("none.safetensors");
  job.injected_faults = {sigterm_before(0, 1)};
  LogCapture log;
  const TrainResult r = run_training(job);
  EXPECT_EQ(r.stopped, StopReason::kSignal);
  EXPECT_EQ(r.stopped_after, 2);
  EXPECT_NE(log.text().find("no --checkpoint-dir, so nothing was saved"), std::string::npos)
      << log.text();
}

TEST_F(RunStop, ZsTrainExitsWithItsPreemptedStatusAfterASignalAndZeroAfterAPlannedExit) {
  const std::string ckpt = dir_.path("ckpt");
  std::vector<std::string> args = {"zs-train",
                                   "--text",
                                   corpus_,
                                   "--layers",
                                   "2",
                                   "--width",
                                   "32",
                                   "--heads",
                                   "2",
                                   "--context",
                                   "32",
                                   "--ranks",
                                   "2",
                                   "--threads",
                                   "1",
                                   "--micro-batch",
                                   "2",
                                   "--steps",
                                   "6",
                                   "--eval-batches",
                                   "1",
                                   "--no-progress",
                                   "--checkpoint-dir",
                                   ckpt};
  const auto zs_train = [](std::vector<std::string> words) {
    std::vector<const char*> argv;
    for (const std::string& w : words) argv.push_back(w.c_str());
    return train_main(static_cast<int>(argv.size()), argv.data());
  };
  std::vector<std::string> preempted = args;
  preempted.insert(preempted.end(), {"--inject-fault", "0:1:sigterm"});
  EXPECT_EQ(zs_train(preempted), kExitPreempted);
  EXPECT_TRUE(std::filesystem::is_directory(ckpt + "/step-000002"));
  std::vector<std::string> planned = args;
  planned.insert(planned.end(), {"--resume", "auto", "--exit-after-steps", "2"});
  EXPECT_EQ(zs_train(planned), 0);
  EXPECT_TRUE(std::filesystem::is_directory(ckpt + "/step-000004"));
}

TEST_F(RunStop, ATimeLimitStopsAfterTheFirstStepPastIt) {
  TrainConfig job = run("timed.safetensors");
  job.checkpoint_dir = dir_.path("ckpt");
  job.exit_after_minutes = 1e-9;  // already past when the first step ends
  const TrainResult r = run_training(job);
  EXPECT_EQ(r.stopped, StopReason::kPlanned);
  EXPECT_EQ(r.stopped_after, 1);
  EXPECT_TRUE(std::filesystem::is_directory(dir_.path("ckpt/step-000001")));
}

TEST_F(RunStop, APlannedExitNeedsACheckpointDirAndNumbersInRange) {
  TrainConfig c = run("x.safetensors");
  c.exit_after_steps = 2;
  EXPECT_NE(invalid_argument_message([&] { validate(c, 2); }).find("give --checkpoint-dir"),
            std::string::npos);
  c.checkpoint_dir = dir_.path("ckpt");
  EXPECT_NO_THROW(validate(c, 2));
  c.exit_after_steps = -1;
  EXPECT_NE(invalid_argument_message([&] {
              validate(c, 2);
            }).find("--exit-after-steps must be >= 1 (0 = off), got -1"),
            std::string::npos);
  c.exit_after_steps = 0;
  c.exit_after_minutes = -3;
  EXPECT_NE(invalid_argument_message([&] { validate(c, 2); }).find("--exit-after-minutes"),
            std::string::npos);
}

// The first signal is recorded; the second ends the process with the signal's default action
// (here in a child process, which the second SIGTERM kills).
TEST(StopSignals, TheFirstSignalIsRecordedAndTheSecondEndsTheProcess) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    StopSignals signals;
    std::raise(SIGTERM);
    if (StopSignals::received() != SIGTERM) _exit(3);
    std::raise(SIGTERM);
    _exit(4);  // not reached: the second SIGTERM ends the process
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  // In this process: nothing received, and the handlers are back as they were after a run.
  {
    StopSignals signals;
    EXPECT_EQ(StopSignals::received(), 0);
  }
  struct sigaction now;
  sigaction(SIGTERM, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

}  // namespace
}  // namespace zs::train
