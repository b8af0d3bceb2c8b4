// The local backend when something goes wrong: timeouts that name the rank that skipped a
// collective or the silent peer, fail-fast when a rank throws (also for communicators made on
// the rank threads), abort (pending and later calls fail, and it reaches split groups), flush
// (waits for earlier collectives to drop their tensors, and returns after an abort), and
// injected faults through the fault wrapper (comm/fault_backend.h).
// Timing-sensitive tests use 1 s timeouts and bounds of seconds, never tight ones (see
// local_test.cc). Every test spawns threads (ranks plus one communicator thread each).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/fault_backend.h"
#include "comm/local/local_backend.h"
#include "runtime/allocator.h"
#include "tests/comm/local_test_util.h"

namespace zs::comm {
namespace {

using local_testing::contains;
using local_testing::make;
using local_testing::Ms;
using local_testing::RankOutcome;
using local_testing::run_collecting;
using local_testing::seconds_since;
using local_testing::with_faults;
using local_testing::with_timeout;

TEST(LocalFailure, TimeoutNamesTheRankThatSkippedTheCollective) {
  const auto options = with_timeout(Ms(1000));
  std::vector<RankOutcome> outcomes = run_collecting(3, [&](Communicator& comm) {
    comm.barrier(options)->wait();
    if (comm.rank() == 2) return;  // skips the all_reduce and leaves
    CpuAllocator allocator(nullptr);
    Tensor t = make(allocator, 4096, DType::kF32, "grads");
    t.fill(1.0f);
    comm.all_reduce(t, ReduceOp::kSum, options)->wait();
  });
  int timeouts = 0;
  for (int r = 0; r < 2; ++r) {
    const RankOutcome& o = outcomes[r];
    ASSERT_TRUE(o.comm_error) << "rank " << r << ": " << o.message;
    timeouts += o.timeout;
    EXPECT_LT(o.seconds, 3.0) << "rank " << r;
    EXPECT_GE(o.seconds, 0.9) << "rank " << r;
    // Whether a rank timed out itself or was aborted by the one that did, its message carries
    // the timeout's diagnosis.
    EXPECT_TRUE(contains(o.message, "all_reduce #1 (4096 fp32, sum)")) << o.message;
    EXPECT_TRUE(contains(o.message, "timed out after")) << o.message;
    EXPECT_TRUE(contains(o.message, "waiting for rank 2 to arrive (arrived: 0, 1)")) << o.message;
    EXPECT_TRUE(contains(o.message, "rank 2: barrier #0")) << o.message;
  }
  EXPECT_GE(timeouts, 1);
  EXPECT_FALSE(outcomes[2].threw);
}

// The communicator's own timeout (LocalRunOptions::timeout here; zs-train --comm-timeout in a
// run) bounds every collective whose options name none, also on groups split from it.
TEST(LocalFailure, CollectivesWithoutATimeoutUseTheCommunicatorsTimeout) {
  LocalRunOptions run_options;
  run_options.timeout = Ms(1000);
  std::vector<RankOutcome> outcomes = run_collecting(
      2,
      [&](Communicator& comm) {
        EXPECT_EQ(comm.timeout(), Ms(1000));
        std::unique_ptr<Communicator> group = comm.split(0, comm.rank());
        ASSERT_NE(group, nullptr);
        EXPECT_EQ(group->timeout(), Ms(1000));
        if (comm.rank() == 1) return;  // skips the all_reduce and leaves
        CpuAllocator allocator(nullptr);
        Tensor t = make(allocator, 16, DType::kF32, "grads");
        t.fill(1.0f);
        comm.all_reduce(t, ReduceOp::kSum, {{}, "no timeout of its own"})->wait();
      },
      run_options);
  const RankOutcome& o = outcomes[0];
  ASSERT_TRUE(o.timeout) << o.message;
  EXPECT_GE(o.seconds, 0.9);
  EXPECT_LT(o.seconds, 3.0) << "the communicator's 1 s timeout, not the 600 s default";
  EXPECT_TRUE(contains(o.message, "all_reduce #1 (16 fp32, sum) [no timeout of its own]"))
      << o.message;
  EXPECT_TRUE(contains(o.message, "waiting for rank 1 to arrive")) << o.message;
  EXPECT_FALSE(outcomes[1].threw);
}

TEST(LocalFailure, ACommunicatorRefusesATimeoutThatIsNotPositive) {
  EXPECT_THROW(Communicator(std::move(make_local_backends(1)[0]), Ms(0)), InvalidArgument);
}

TEST(LocalFailure, RunLocalRanksRethrowsTheTimeout) {
  const auto options = with_timeout(Ms(1000));
  EXPECT_THROW(run_local_ranks(2,
                               [&](Communicator& comm) {
                                 if (comm.rank() == 0) comm.barrier(options)->wait();
                               }),
               CommTimeout);
}

TEST(LocalFailure, RecvTimeoutNamesTheSilentPeer) {
  const auto options = with_timeout(Ms(1000));
  std::vector<RankOutcome> outcomes = run_collecting(2, [&](Communicator& comm) {
    if (comm.rank() == 0) return;
    CpuAllocator allocator(nullptr);
    Tensor t = make(allocator, 3, DType::kBF16, "t");
    comm.recv(t, 0, options)->wait();
  });
  ASSERT_TRUE(outcomes[1].timeout) << outcomes[1].message;
  EXPECT_TRUE(contains(outcomes[1].message, "recv #0 (3 bf16 from rank 0) on rank 1 of 2"))
      << outcomes[1].message;
  EXPECT_TRUE(contains(outcomes[1].message, "rank 0 has issued no call")) << outcomes[1].message;
  EXPECT_LT(outcomes[1].seconds, 3.0);
}

TEST(LocalFailure, ARankThatThrowsMakesTheOthersFailFast) {
  const auto options = with_timeout(Ms(20000));
  std::vector<std::string> messages(3);
  const auto start = Clock::now();
  try {
    run_local_ranks(3, [&](Communicator& comm) {
      comm.barrier(options)->wait();
      if (comm.rank() == 1) throw std::runtime_error("rank 1 ran out of data");
      CpuAllocator allocator(nullptr);
      Tensor t = make(allocator, 1 << 16, DType::kF32, "grads");
      t.fill(1.0f);
      try {
        comm.all_reduce(t, ReduceOp::kSum, options)->wait();
      } catch (const CommError& e) {
        messages[comm.rank()] = e.what();
        throw;
      }
    });
    ADD_FAILURE() << "run_local_ranks did not rethrow";
  } catch (const std::runtime_error& e) {
    // The root cause, not the resulting CommErrors.
    EXPECT_EQ(dynamic_cast<const CommError*>(&e), nullptr) << e.what();
    EXPECT_STREQ(e.what(), "rank 1 ran out of data");
  }
  EXPECT_LT(seconds_since(start), 2.0) << "the others must fail fast, far under the 20 s timeout";
  for (int r : {0, 2}) {
    EXPECT_TRUE(
        contains(messages[r], "the group was aborted: rank 1 failed: rank 1 ran out of data"))
        << "rank " << r << ": " << messages[r];
  }
}

TEST(LocalMadeCommunicators, AreMadeOnTheRankThreadsAndAbortedWhenARankFails) {
  // make_communicator stands in for run_gpu_ranks' nccl group: each rank's Communicator is over a
  // separate group (not the run's local group), made on the rank's own thread. Rank 1 fails; the
  // others wait in an all_reduce of that separate group and must fail at once, reached only by
  // the Communicators' abort().
  const auto options = with_timeout(Ms(20000));
  std::vector<std::unique_ptr<Backend>> separate = make_local_backends(3);
  std::vector<std::thread::id> made_on(3);
  std::vector<std::thread::id> ran_on(3);
  std::vector<std::string> messages(3);
  LocalRunOptions run;
  run.make_communicator = [&](std::unique_ptr<Backend> local, int rank) {
    EXPECT_EQ(local->rank(), rank);
    made_on[static_cast<size_t>(rank)] = std::this_thread::get_id();
    return std::make_unique<Communicator>(std::move(separate[static_cast<size_t>(rank)]));
  };
  const auto start = Clock::now();
  try {
    run_local_ranks(
        3,
        [&](Communicator& comm) {
          ran_on[static_cast<size_t>(comm.rank())] = std::this_thread::get_id();
          comm.barrier(options)->wait();
          if (comm.rank() == 1) throw std::runtime_error("rank 1 hit a NaN");
          CpuAllocator allocator(nullptr);
          Tensor t = make(allocator, 64, DType::kF32, "grads");
          t.fill(1.0f);
          try {
            comm.all_reduce(t, ReduceOp::kSum, options)->wait();
          } catch (const CommError& e) {
            messages[static_cast<size_t>(comm.rank())] = e.what();
            throw;
          }
        },
        run);
    ADD_FAILURE() << "run_local_ranks did not rethrow";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(dynamic_cast<const CommError*>(&e), nullptr) << e.what();
    EXPECT_STREQ(e.what(), "rank 1 hit a NaN");
  }
  EXPECT_LT(seconds_since(start), 2.0) << "the others must fail fast, far under the 20 s timeout";
  for (int r = 0; r < 3; ++r) EXPECT_EQ(made_on[r], ran_on[r]) << "rank " << r;
  for (int r : {0, 2}) {
    EXPECT_TRUE(contains(messages[r], "rank 1 failed: rank 1 hit a NaN"))
        << "rank " << r << ": " << messages[r];
  }
}

TEST(LocalFailure, AbortFailsPendingAndLaterCalls) {
  const auto options = with_timeout(Ms(20000));
  const auto start = Clock::now();
  std::vector<RankOutcome> outcomes = run_collecting(3, [&](Communicator& comm) {
    if (comm.rank() == 0) {
      std::this_thread::sleep_for(Ms(100));  // let the others block first
      comm.abort("loss is NaN at step 12");
    } else {
      CpuAllocator allocator(nullptr);
      Tensor t = make(allocator, 16, DType::kF32, "t");
      t.fill(1.0f);
      WorkPtr pending = comm.all_reduce(t, ReduceOp::kSum, options);
      EXPECT_THROW(pending->wait(), CommError);
    }
    comm.barrier(options)->wait();  // every later call fails too
  });
  EXPECT_LT(seconds_since(start), 2.0);
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(outcomes[r].comm_error) << "rank " << r;
    EXPECT_FALSE(outcomes[r].timeout) << "rank " << r;
    EXPECT_TRUE(contains(outcomes[r].message, "rank 0 aborted: loss is NaN at step 12"))
        << outcomes[r].message;
  }
}

TEST(LocalFlush, WaitsForEarlierCollectivesToDropTheirTensorsAndIsNotCounted) {
  // Rank 0 issues an all_reduce, lets go of the tensor and the Work, and flushes; rank 1 joins
  // the all_reduce only once rank 0 has started flushing (and a little after). flush() on rank 0
  // returns only after the collective ran and dropped the tensor (its memory is back at the
  // tracker) — so never before rank 1 joined — and issues and counts nothing.
  const auto options = with_timeout(Ms(20000));
  std::promise<void> flushing;
  std::shared_future<void> flushing_started = flushing.get_future().share();
  std::atomic<bool> joined{false};
  run_local_ranks(2, [&](Communicator& comm) {
    MemoryTracker tracker("rank");
    CpuAllocator allocator(&tracker);
    if (comm.rank() == 1) {
      flushing_started.wait();
      std::this_thread::sleep_for(Ms(20));
      joined = true;
    }
    {
      Tensor t = make(allocator, 1024, DType::kF32, "t");
      t.fill(1.0f);
      (void)comm.all_reduce(t, ReduceOp::kSum, options);  // the Work is dropped at once
    }
    const uint64_t issued = comm.calls_issued();
    if (comm.rank() == 0) flushing.set_value();
    comm.flush();
    EXPECT_TRUE(joined) << "flush returned before the collective could have run";
    EXPECT_EQ(tracker.current_total(), 0u) << "the collective still holds the tensor";
    EXPECT_EQ(comm.calls_issued(), issued);
    EXPECT_EQ(comm.stats().get(CollectiveKind::kBarrier).calls, 0u);
    EXPECT_EQ(comm.stats().get(CollectiveKind::kAllReduce).calls, 1u);
  });
}

TEST(LocalFlush, AfterAnAbortReturnsWithoutThePeer) {
  // The engine's error path: abort, then flush — a collective the other rank never joins fails
  // instead of holding flush() until its timeout. Rank 1 does nothing until rank 0's flush has
  // returned, so a flush that waited for it would hang until the 20 s timeout.
  const auto options = with_timeout(Ms(20000));
  std::promise<void> flushed;
  std::shared_future<void> flush_returned = flushed.get_future().share();
  const auto start = Clock::now();
  std::vector<RankOutcome> outcomes = run_collecting(2, [&](Communicator& comm) {
    if (comm.rank() == 0) {
      CpuAllocator allocator(nullptr);
      Tensor t = make(allocator, 16, DType::kF32, "t");
      (void)comm.all_reduce(t, ReduceOp::kSum, options);  // rank 1 is not there
      comm.abort("step failed");
      comm.flush();
      flushed.set_value();
    } else {
      flush_returned.wait();
    }
    comm.barrier(options)->wait();  // fails on both: the group is aborted
  });
  EXPECT_LT(seconds_since(start), 5.0) << "flush waited for the collective's peer";
  EXPECT_TRUE(outcomes[0].comm_error);
  EXPECT_TRUE(outcomes[1].comm_error);
}

TEST(LocalFailure, AbortReachesGroupsSplitFromTheWorld) {
  const auto options = with_timeout(Ms(20000));
  const auto start = Clock::now();
  std::vector<RankOutcome> outcomes = run_collecting(4, [&](Communicator& world) {
    std::unique_ptr<Communicator> pair = world.split(world.rank() / 2, 0, options);
    if (world.rank() == 3) throw std::runtime_error("rank 3 failed to load its shard");
    // Rank 2 waits for rank 3 in the pair group; the world abort must reach it.
    pair->barrier(options)->wait();
  });
  EXPECT_LT(seconds_since(start), 2.0);
  EXPECT_TRUE(outcomes[2].comm_error) << outcomes[2].message;
  EXPECT_TRUE(contains(outcomes[2].message, "rank 3 failed to load its shard"))
      << outcomes[2].message;
}

// ---------------------------------------------------------------------------------------------
// Injected faults.

TEST(LocalFaults, FailedCallAbortsTheGroupAndNamesTheInjection) {
  const auto options = with_timeout(Ms(20000));
  const auto start = Clock::now();
  std::vector<RankOutcome> outcomes = run_collecting(
      3,
      [&](Communicator& comm) {
        comm.barrier(options)->wait();
        comm.barrier(options)->wait();  // call 1: fails on rank 1
        comm.barrier(options)->wait();
      },
      with_faults([](int rank) {
        return FaultSettings{Ms(0), rank == 1 ? 1 : -1, -1, ""};
      }));
  EXPECT_LT(seconds_since(start), 2.0);
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(outcomes[r].comm_error) << "rank " << r;
    EXPECT_TRUE(
        contains(outcomes[r].message, "injected fault: call 1 (barrier #1) on rank 1 failed"))
        << outcomes[r].message;
  }
}

TEST(LocalFaults, DroppedRankMakesPeersTimeOutNamingIt) {
  const auto options = with_timeout(Ms(1000));
  std::string dropped_message;
  std::vector<RankOutcome> outcomes = run_collecting(
      3,
      [&](Communicator& comm) {
        CpuAllocator allocator(nullptr);
        Tensor t = make(allocator, 8, DType::kF16, "t");
        t.fill(1.0f);
        comm.all_reduce(t, ReduceOp::kSum, options)->wait();
        try {
          comm.all_reduce(t, ReduceOp::kSum, options)->wait();  // call 1: rank 2 drops out
        } catch (const CommError& e) {
          if (comm.rank() != 2) throw;
          // The dropped rank leaves quietly, like a dead process: nobody aborts the group.
          dropped_message = e.what();
        }
      },
      with_faults([](int rank) {
        return FaultSettings{Ms(0), -1, rank == 2 ? 1 : -1, ""};
      }));
  EXPECT_TRUE(contains(dropped_message, "injected fault: rank 2 dropped out at call 1"))
      << dropped_message;
  int timeouts = 0;
  for (int r = 0; r < 2; ++r) {
    timeouts += outcomes[r].timeout;
    EXPECT_TRUE(contains(outcomes[r].message, "waiting for rank 2 to arrive"))
        << outcomes[r].message;
    EXPECT_LT(outcomes[r].seconds, 3.0);
  }
  EXPECT_GE(timeouts, 1);
}

// ---------------------------------------------------------------------------------------------
// send/recv.

}  // namespace
}  // namespace zs::comm
