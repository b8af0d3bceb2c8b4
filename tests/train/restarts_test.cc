// Restarts after a failure (train/restarts.h) through zs-train's engine on two local ranks (the
// short 6-step GPT run of tests/support/short_run.h, checkpoints every 2 steps): a rank that
// fails at step 5 — by an exception on its thread or a collective failed by the
// FaultInjectingBackend — makes the run restart from the checkpoint of step 4 and finish with
// the losses, gradient norms and final weights of the uninterrupted run, bit for bit, and the
// restart is logged with its cause; the failed attempt leaves no thread behind; K spent gives
// the last error; an error that a restart cannot cure is not retried; --max-restarts without
// --checkpoint-dir, and under a launcher, is refused naming what to do.
#include "train/restarts.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <iterator>
#include <string>
#include <vector>

#include "comm/launch.h"
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

using zs::testing::error_message;
using zs::testing::learnable_corpus;
using zs::testing::LogCapture;
using zs::testing::read_bytes;
using zs::testing::ScratchDir;
using zs::testing::write_text;

// Threads of this process now (/proc/self/task).
size_t process_threads() {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)entry;
    ++n;
  }
  return n;
}

class Restarts : public ::testing::Test {
 protected:
  Restarts() { write_text(corpus, learnable_corpus()); }

  // The short run on 2 ranks at stage 3, checkpointing every 2 steps into dir/`name`, writing its
  // final weights to dir/`name`.safetensors.
  TrainConfig run(const std::string& name) const {
    TrainConfig c = zs::testing::short_gpt_run(corpus, 2, 3, DType::kF32);
    c.checkpoint_dir = dir.path(name);
    c.checkpoint_interval = 2;
    // Synchronous saves: the checkpoint of step k is published before step k + 1 starts, so the
    // checkpoint a restart resumes from does not depend on how fast a background write ends
    // (an asynchronous one is published at the first step boundary after it; under load that
    // can be after a fault the test places right behind the save).
    c.checkpoint_async = false;
    c.save_weights = dir.path(name + ".safetensors");
    return c;
  }

  // Rank `rank` throws `kind` before `step` of attempt `attempt`.
  static InjectedFault fault(int rank, int64_t step, int attempt,
                             InjectedFault::Kind kind = InjectedFault::Kind::kCommError) {
    InjectedFault f;
    f.rank = rank;
    f.step = step;
    f.attempt = attempt;
    f.kind = kind;
    return f;
  }

  // The restarted run equals the uninterrupted one bit for bit: every step's record and the
  // final weights.
  void expect_same_run(const TrainConfig& full_config, const TrainResult& full,
                       const TrainConfig& restarted_config, const TrainResult& restarted) {
    ASSERT_EQ(restarted.steps.size(), full.steps.size());
    for (size_t i = 0; i < full.steps.size(); ++i) {
      zs::testing::expect_same_step_bits(full.steps[i], restarted.steps[i]);
    }
    ASSERT_EQ(restarted.evals.size(), full.evals.size());
    EXPECT_EQ(restarted.evals.back().loss, full.evals.back().loss);
    EXPECT_TRUE(read_bytes(full_config.save_weights) == read_bytes(restarted_config.save_weights))
        << "the final parameters differ";
  }

  // Runs `restarted` (run("restarted") with faults) and the same run uninterrupted: the
  // restarted one restarts once, logs each of `logged`, and equals the uninterrupted one bit for
  // bit. Returns the process's threads after the uninterrupted run.
  size_t expect_restarted_once_like_uninterrupted(const TrainConfig& restarted_config,
                                                  const std::vector<std::string>& logged) {
    const TrainConfig full_config = run("full");
    const TrainResult full = run_training(full_config);
    EXPECT_EQ(full.steps.size(), 6u);
    EXPECT_EQ(full.restarts, 0);
    const size_t threads = process_threads();
    LogCapture log;
    const TrainResult restarted = run_training(restarted_config);
    EXPECT_EQ(restarted.restarts, 1);
    expect_same_run(full_config, full, restarted_config, restarted);
    for (const std::string& line : logged) EXPECT_CONTAINS(log.text(), line);
    return threads;
  }

  ScratchDir dir;
  const std::string corpus = dir.path("corpus.txt");
};

TEST_F(Restarts, AFailedRankRestartsFromTheNewestCheckpointAndFinishesBitForBit) {
  TrainConfig c = run("restarted");
  c.max_restarts = 3;
  c.injected_faults = {fault(1, 5, 0)};
  const size_t threads = expect_restarted_once_like_uninterrupted(
      c,
      {"restart 1 of 3 after: CommError: [rank 1]", "rank 1 fails before step 5 of attempt 0",
       "resuming from the newest checkpoint in " + c.checkpoint_dir, "step-000004 after 4 steps"});
  // The failed attempt's rank threads have joined (its world is gone): as many threads are left
  // as after the uninterrupted run.
  EXPECT_EQ(process_threads(), threads);
}

TEST_F(Restarts, ACollectiveFailedByTheFaultInjectingBackendIsRestarted) {
  TrainConfig c = run("restarted");
  c.max_restarts = 1;
  InjectedFault f;
  f.rank = 0;
  f.attempt = 0;
  // A collective of step 3, after the checkpoint of step 2. The fault wraps the world
  // communicator, which carries the split of the ShardedModel's gather group (call 0) and per
  // step 6 reduce-scatters and 2 all-reduces (step 1 also the unit order check); the step's 12
  // all-gathers run on the gather group, which the fault does not wrap. Step 3: calls 18–25.
  f.comm.fail_call = 22;
  c.injected_faults = {f};
  expect_restarted_once_like_uninterrupted(
      c, {"restart 1 of 1 after: CommError", "fail_call", "step-000002 after 2 steps"});
}

TEST_F(Restarts, SpentRestartsGiveTheLastError) {
  TrainConfig c = run("spent");
  c.max_restarts = 2;
  c.injected_faults = {fault(1, 1, 0), fault(0, 3, 1, InjectedFault::Kind::kIoError),
                       fault(1, 4, 2)};
  LogCapture log;
  const std::string error = error_message<CommError>([&] { run_training(c); });
  EXPECT_CONTAINS(error, "rank 1 fails before step 4 of attempt 2");
  EXPECT_CONTAINS(log.text(), "restart 1 of 2 after: CommError");
  EXPECT_CONTAINS(log.text(), "restart 2 of 2 after: IoError");
  EXPECT_CONTAINS(log.text(), "all 2 restarts (--max-restarts) are spent");
  EXPECT_EQ(log.text().find("restart 3"), std::string::npos) << log.text();
}

TEST_F(Restarts, AnErrorARestartCannotCureIsNotRetried) {
  for (const auto kind :
       {InjectedFault::Kind::kNumericalError, InjectedFault::Kind::kInvalidArgument}) {
    TrainConfig c = run("diverged");
    c.max_restarts = 3;
    // A second attempt would fail differently: it must not run.
    c.injected_faults = {fault(1, 3, 0, kind), fault(0, 0, 1)};
    LogCapture log;
    std::string error;
    try {
      run_training(c);
    } catch (const CommError& e) {
      FAIL() << "restarted: " << e.what();
    } catch (const Error& e) {
      error = e.what();
      EXPECT_FALSE(restart_can_cure(e)) << error_kind(e);
    }
    EXPECT_CONTAINS(error, "rank 1 fails before step 3 of attempt 0");
    EXPECT_CONTAINS(log.text(), "a restart cannot cure it");
    EXPECT_EQ(log.text().find("restart 1 of"), std::string::npos) << log.text();
  }
}

TEST(RestartPolicy, RetriesLostPeersAndIoButNotWhatFailsAgain) {
  EXPECT_TRUE(restart_can_cure(CommError("lost")));
  EXPECT_TRUE(restart_can_cure(CommTimeout("late")));
  EXPECT_TRUE(restart_can_cure(IoError("eio")));
  EXPECT_TRUE(restart_can_cure(std::runtime_error("other")));
  EXPECT_FALSE(restart_can_cure(InvalidArgument("flag")));
  EXPECT_FALSE(restart_can_cure(CorruptCheckpoint("crc")));
  EXPECT_FALSE(restart_can_cure(OutOfMemory("budget")));
  EXPECT_FALSE(restart_can_cure(NumericalError("nan")));
  EXPECT_FALSE(restart_can_cure(NotImplemented("x")));
  EXPECT_EQ(error_kind(CommTimeout("late")), "CommTimeout");
  EXPECT_EQ(error_kind(CommError("lost")), "CommError");
  EXPECT_EQ(error_kind(std::runtime_error("other")), "std::exception");
}

// --inject-fault RANK:STEP:hang (run under mpirun by ctest mpi.train.hung_rank_named.np3).
TEST(RestartFlags, AHangFaultParses) {
  const InjectedFault hang = parse_injected_fault("2:3:hang");
  EXPECT_EQ(hang.rank, 2);
  EXPECT_EQ(hang.step, 3);
  EXPECT_EQ(hang.kind, InjectedFault::Kind::kHang);
  EXPECT_CONTAINS(error_message<InvalidArgument>([] { parse_injected_fault("2:3:hung"); }),
                  "invalid, hang or sigterm");
  EXPECT_EQ(parse_injected_fault("1:4:sigterm").kind, InjectedFault::Kind::kSigterm);
}

TEST(RestartFlags, MaxRestartsNeedsACheckpointDirAndRankThreads) {
  TrainConfig c;
  const char* argv[] = {
      "zs-train",      "--max-restarts", "3", "--inject-fault", "1:5", "--inject-fault",
      "0:2:numerical", "--text",         "x"};
  ASSERT_FALSE(parse_train_args(9, argv, c, nullptr, nullptr));
  EXPECT_EQ(c.max_restarts, 3);
  ASSERT_EQ(c.injected_faults.size(), 2u);
  EXPECT_EQ(c.injected_faults[0].rank, 1);
  EXPECT_EQ(c.injected_faults[0].step, 5);
  EXPECT_EQ(c.injected_faults[0].kind, InjectedFault::Kind::kCommError);
  EXPECT_EQ(c.injected_faults[1].kind, InjectedFault::Kind::kNumericalError);

  const comm::LaunchInfo none;
  const std::string no_dir =
      error_message<InvalidArgument>([&] { check_restart_settings(c, true, none); });
  EXPECT_CONTAINS(no_dir, "--max-restarts 3 needs --checkpoint-dir");

  c.checkpoint_dir = "ckpt";
  comm::LaunchInfo mpi;
  mpi.rank = 1;
  mpi.world_size = 4;
  mpi.launcher = "openmpi";
  const std::string under_mpi =
      error_message<InvalidArgument>([&] { check_restart_settings(c, false, mpi); });
  EXPECT_CONTAINS(under_mpi, "rank 1 of 4");
  EXPECT_CONTAINS(under_mpi, "scripts/zs-launch --max-restarts 3");
  EXPECT_NO_THROW(check_restart_settings(c, true, none));

  c.max_restarts = -1;
  EXPECT_CONTAINS(error_message<InvalidArgument>([&] { check_restart_settings(c, true, none); }),
                  "--max-restarts -1 must be >= 0");

  for (const char* bad : {"1", "a:2", "1:2:segv", "1:-2"}) {
    TrainConfig d;
    const char* args[] = {"zs-train", "--inject-fault", bad, "--text", "x"};
    EXPECT_CONTAINS(
        error_message<InvalidArgument>([&] { parse_train_args(5, args, d, nullptr, nullptr); }),
        "expected RANK:STEP[:KIND]");
  }
}

TEST_F(Restarts, ZsTrainExitsNonZeroWithTheErrorThatEndsTheRun) {
  const std::string checkpoints = dir.path("ckpt");
  const auto zs_train = [&](const char* fault, const char* max_restarts) {
    // clang-format off
    const char* argv[] = {"zs-train", "--text", corpus.c_str(), "--layers", "2", "--width", "32",
                          "--heads", "2", "--context", "32", "--micro-batch", "2", "--ranks", "2",
                          "--threads", "1", "--steps", "4", "--eval-batches", "1", "--no-progress",
                          "--checkpoint-dir", checkpoints.c_str(), "--checkpoint-interval", "2",
                          "--inject-fault", fault, "--max-restarts", max_restarts};
    // clang-format on
    return train_main(static_cast<int>(std::size(argv)), argv);
  };
  {
    // Cured by one restart: exit 0.
    LogCapture log;
    EXPECT_EQ(zs_train("1:3", "1"), 0);
    EXPECT_CONTAINS(log.text(), "restart 1 of 1 after: CommError");
  }
  std::filesystem::remove_all(checkpoints);
  {
    // Not retried: exit 1 after the first attempt.
    LogCapture log;
    EXPECT_EQ(zs_train("1:3:numerical", "2"), 1);
    EXPECT_CONTAINS(log.text(), "not restarting after NumericalError");
    EXPECT_EQ(log.text().find("restart 1 of"), std::string::npos) << log.text();
  }
}

TEST_F(Restarts, ZsTrainRefusesMaxRestartsWithoutACheckpointDir) {
  TrainConfig c = zs::testing::short_gpt_run(corpus, 2, 3, DType::kF32);
  c.max_restarts = 1;
  EXPECT_CONTAINS(error_message<InvalidArgument>([&] { run_training(c); }),
                  "--max-restarts 1 needs --checkpoint-dir");
}

}  // namespace
}  // namespace zs::train
