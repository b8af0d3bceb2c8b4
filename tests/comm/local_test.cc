// Tests for the local backend (comm/local) through the Communicator front, and for the fault
// wrapper (comm/fault_backend.h).
//
// - The backend-agnostic collective suite (collective_suite.h) on 1, 2, 3 and 4 rank threads.
// - all_reduce equals reduce_scatter + all_gather bit for bit on random fp32 and bf16 data (where
//   summation order matters), and both equal the serial fp32 reduction over ranks 0, 1, … in
//   that order, rounded once.
// - Subgroups (split), overlap (a Work is asynchronous), timeouts that name the missing rank,
//   fail-fast when a rank throws, abort, injected faults, eager send/recv, CommStats against
//   collective_traffic, and bad input.
// Timing-sensitive tests use 1 s timeouts and bounds of seconds, never tight ones: they check
// that a failure arrives "well under the timeout" or "within timeout + 2 s", which holds on a
// loaded 2-core machine. Every test spawns threads (ranks plus one communicator thread each).
#include "comm/local/local_backend.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/fault_backend.h"
#include "runtime/allocator.h"
#include "runtime/half.h"
#include "tests/comm/collective_suite.h"

namespace zs::comm {
namespace {

using Ms = std::chrono::milliseconds;

CollectiveOptions with_timeout(Ms timeout) {
  CollectiveOptions options;
  options.timeout = timeout;
  return options;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

Tensor make(CpuAllocator& allocator, int64_t count, DType dtype, const char* name) {
  return Tensor::empty({count}, dtype, allocator, MemoryCategory::kCommBuffers, name);
}

std::vector<unsigned char> bytes_of(const Tensor& t) {
  std::vector<unsigned char> out(t.nbytes());
  if (!out.empty()) std::memcpy(out.data(), t.raw_data(), out.size());
  return out;
}

// What each rank saw: its error (type and message) and when it arrived.
struct RankOutcome {
  bool threw = false;
  bool comm_error = false;
  bool timeout = false;
  std::string message;
  double seconds = 0;  // from the start of the run to the error
};

// Runs fn on every rank through run_local_ranks and records each rank's error in its outcome.
// The errors still propagate to run_local_ranks (which aborts the group on the first, as in a
// real run); its final rethrow is swallowed here.
std::vector<RankOutcome> run_collecting(int size, const std::function<void(Communicator&)>& fn,
                                        const LocalRunOptions& options = {}) {
  std::vector<RankOutcome> outcomes(static_cast<size_t>(size));
  const auto start = Clock::now();
  try {
    run_local_ranks(
        size,
        [&](Communicator& comm) {
          RankOutcome& mine = outcomes[static_cast<size_t>(comm.rank())];
          try {
            fn(comm);
          } catch (const CommTimeout& e) {
            mine = {true, true, true, e.what(), seconds_since(start)};
            throw;
          } catch (const CommError& e) {
            mine = {true, true, false, e.what(), seconds_since(start)};
            throw;
          } catch (const std::exception& e) {
            mine = {true, false, false, e.what(), seconds_since(start)};
            throw;
          }
        },
        options);
  } catch (const std::exception&) {
  }
  return outcomes;
}

LocalRunOptions with_faults(std::function<FaultSettings(int rank)> settings_of) {
  LocalRunOptions options;
  options.wrap_backend = [settings_of](std::unique_ptr<Backend> backend, int rank) {
    return std::unique_ptr<Backend>(
        new FaultInjectingBackend(std::move(backend), settings_of(rank)));
  };
  return options;
}

// ---------------------------------------------------------------------------------------------
// The suite: every collective, dtype and size against the serial reference.

class LocalSuite : public ::testing::TestWithParam<int> {};

TEST_P(LocalSuite, EveryCollectiveMatchesTheSerialReference) {
  const int size = GetParam();
  std::atomic<int> finished{0};
  run_local_ranks(size, [&](Communicator& comm) {
    EXPECT_EQ(comm.size(), size);
    EXPECT_STREQ(comm.backend_name(), "local");
    testing::run_collective_suite(comm);
    finished.fetch_add(1);
  });
  EXPECT_EQ(finished.load(), size);
}

INSTANTIATE_TEST_SUITE_P(Ranks, LocalSuite, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

// ---------------------------------------------------------------------------------------------
// all_reduce == reduce_scatter + all_gather == the serial reduction in rank order, bitwise.

// Random inputs of rank `rank` (normal, so fp32 sums round and order matters), stored as dtype.
std::vector<unsigned char> random_input(int rank, int64_t count, DType dtype) {
  std::mt19937 rng(977 + static_cast<uint32_t>(rank));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<unsigned char> out(static_cast<size_t>(count) * dtype_size(dtype));
  for (int64_t i = 0; i < count; ++i) {
    const float v = normal(rng) * (1.0f + static_cast<float>(i % 13));
    if (dtype == DType::kF32) {
      std::memcpy(out.data() + i * 4, &v, 4);
    } else {
      const uint16_t bits = float_to_bf16_bits(v);
      std::memcpy(out.data() + i * 2, &bits, 2);
    }
  }
  return out;
}

float widen(const std::vector<unsigned char>& data, DType dtype, int64_t i) {
  if (dtype == DType::kF32) {
    float v;
    std::memcpy(&v, data.data() + i * 4, 4);
    return v;
  }
  uint16_t bits;
  std::memcpy(&bits, data.data() + i * 2, 2);
  return bf16_bits_to_float(bits);
}

class LocalAllReduceOrder : public ::testing::TestWithParam<int> {};

TEST_P(LocalAllReduceOrder, EqualsReduceScatterThenAllGatherBitwise) {
  const int size = GetParam();
  const int64_t shard = 30011;  // odd, so all_reduce slices and shards do not line up
  const int64_t count = shard * size;
  run_local_ranks(size, [&](Communicator& comm) {
    CpuAllocator allocator(nullptr);
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      std::vector<std::vector<unsigned char>> inputs;
      for (int q = 0; q < size; ++q) inputs.push_back(random_input(q, count, dtype));
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
        const std::string what =
            testing::suite_detail::label("all_reduce vs reduce_scatter + all_gather",
                                         reduce_op_name(op), dtype, count, -1, comm);
        Tensor reduced = make(allocator, count, dtype, "all_reduce.data");
        std::memcpy(reduced.raw_data(), inputs[comm.rank()].data(), reduced.nbytes());
        Tensor full = make(allocator, count, dtype, "reduce_scatter.full");
        std::memcpy(full.raw_data(), inputs[comm.rank()].data(), full.nbytes());
        Tensor mine = make(allocator, shard, dtype, "reduce_scatter.shard");
        Tensor gathered = make(allocator, count, dtype, "all_gather.full");
        comm.all_reduce(reduced, op);
        comm.reduce_scatter(full, mine, op);
        comm.all_gather(mine, gathered)->wait();  // the queue runs in order: all three are done
        EXPECT_EQ(bytes_of(reduced), bytes_of(gathered)) << what;

        // The serial reference: fp32, ranks 0, 1, … in order, divided by N for avg, one rounding.
        std::vector<unsigned char> expected(reduced.nbytes());
        for (int64_t i = 0; i < count; ++i) {
          float acc = widen(inputs[0], dtype, i);
          for (int q = 1; q < size; ++q) {
            const float x = widen(inputs[q], dtype, i);
            acc = op == ReduceOp::kMax ? (x > acc ? x : acc) : acc + x;
          }
          if (op == ReduceOp::kAvg) acc = acc / static_cast<float>(size);
          testing::suite_detail::store_float(expected.data(), dtype, static_cast<size_t>(i), acc);
        }
        EXPECT_TRUE(bytes_of(reduced) == expected) << what << ": differs from the serial reference";
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, LocalAllReduceOrder, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

// ---------------------------------------------------------------------------------------------
// Subgroups.

TEST(LocalSplit, TwoByTwoGroupsRunTheSuiteAndReduceAcross) {
  testing::CollectiveSuiteOptions small;
  small.sizes = {0, 1, 7, 4097};
  run_local_ranks(4, [&](Communicator& world) {
    const int rank = world.rank();
    // intra: {0, 1} and {2, 3}; inter: {0, 2} and {1, 3}.
    std::unique_ptr<Communicator> intra = world.split(rank / 2, rank);
    std::unique_ptr<Communicator> inter = world.split(rank % 2, rank);
    ASSERT_NE(intra, nullptr);
    ASSERT_NE(inter, nullptr);
    EXPECT_EQ(intra->size(), 2);
    EXPECT_EQ(intra->rank(), rank % 2);
    EXPECT_EQ(inter->size(), 2);
    EXPECT_EQ(inter->rank(), rank / 2);

    testing::run_collective_suite(*intra, small);

    // Hybrid-style: reduce inside the node group, then across groups; both in flight at once
    // on different communicators.
    CpuAllocator allocator(nullptr);
    Tensor within = make(allocator, 5, DType::kI32, "within");
    Tensor across = make(allocator, 5, DType::kI32, "across");
    for (int i = 0; i < 5; ++i) {
      within.data<int32_t>()[i] = (rank + 1) * (i + 1);
      across.data<int32_t>()[i] = (rank + 1) * 100 + i;
    }
    WorkPtr w1 = intra->all_reduce(within, ReduceOp::kSum);
    WorkPtr w2 = inter->all_reduce(across, ReduceOp::kSum);
    w1->wait();
    w2->wait();
    const int g = rank / 2;       // intra group: ranks 2g, 2g+1
    const int parity = rank % 2;  // inter group: ranks parity, parity+2
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(within.data<int32_t>()[i], (2 * g + 1 + 2 * g + 2) * (i + 1)) << "rank " << rank;
      EXPECT_EQ(across.data<int32_t>()[i], (parity + 1 + parity + 3) * 100 + 2 * i)
          << "rank " << rank;
    }

    // The inter group after the intra group: the sum of the intra sums, i.e. the world sum.
    Tensor total = make(allocator, 1, DType::kF32, "total");
    total.data<float>()[0] = static_cast<float>(rank + 1);
    intra->all_reduce(total, ReduceOp::kSum)->wait();
    inter->all_reduce(total, ReduceOp::kSum)->wait();
    EXPECT_EQ(total.data<float>()[0], 10.0f) << "rank " << rank;
  });
}

TEST(LocalSplit, KeyOrdersRanksAndNegativeColorJoinsNoGroup) {
  run_local_ranks(4, [](Communicator& world) {
    const int rank = world.rank();
    std::unique_ptr<Communicator> reversed = world.split(0, -rank);
    ASSERT_NE(reversed, nullptr);
    EXPECT_EQ(reversed->rank(), 3 - rank);
    EXPECT_EQ(reversed->size(), 4);
    // Equal keys: old rank order breaks the tie.
    std::unique_ptr<Communicator> tied = world.split(7, 0);
    ASSERT_NE(tied, nullptr);
    EXPECT_EQ(tied->rank(), rank);

    std::unique_ptr<Communicator> without_zero = world.split(rank == 0 ? -1 : 3, rank);
    if (rank == 0) {
      EXPECT_EQ(without_zero, nullptr);
      return;
    }
    ASSERT_NE(without_zero, nullptr);
    EXPECT_EQ(without_zero->size(), 3);
    EXPECT_EQ(without_zero->rank(), rank - 1);
    CpuAllocator allocator(nullptr);
    Tensor t = make(allocator, 1, DType::kI32, "t");
    t.data<int32_t>()[0] = rank;  // new rank r holds old rank r+1; broadcast from new root 2
    without_zero->broadcast(t, 2)->wait();
    EXPECT_EQ(t.data<int32_t>()[0], 3);
  });
}

// ---------------------------------------------------------------------------------------------
// Asynchrony: a Work returns at once and completes later.

TEST(LocalOverlap, AllReduceRunsWhileTheCallerComputes) {
  const Ms delay(300);
  run_local_ranks(
      2,
      [&](Communicator& comm) {
        CpuAllocator allocator(nullptr);
        Tensor t = make(allocator, 1024, DType::kF32, "grads");
        t.fill(static_cast<float>(comm.rank() + 1));
        const auto issued = Clock::now();
        WorkPtr work = comm.all_reduce(t, ReduceOp::kSum);
        EXPECT_LT(seconds_since(issued), 0.1) << "all_reduce must return before it runs";
        EXPECT_FALSE(work->test());
        // The caller's compute, overlapping the collective.
        double acc = 0;
        for (int i = 0; i < 2000000; ++i) acc += 1.0 / (1.0 + i);
        EXPECT_GT(acc, 0.0);
        EXPECT_FALSE(work->test()) << "the injected 300 ms delay cannot have passed yet";
        work->wait();
        EXPECT_TRUE(work->test());
        EXPECT_GE(seconds_since(issued), 0.29);
        EXPECT_EQ(t.to_vector()[17], 3.0f);
      },
      with_faults([&](int) {
        return FaultSettings{delay, -1, -1};
      }));
}

// ---------------------------------------------------------------------------------------------
// Timeouts, failures, abort.

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
        return FaultSettings{Ms(0), rank == 1 ? 1 : -1, -1};
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
        return FaultSettings{Ms(0), -1, rank == 2 ? 1 : -1};
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

TEST(LocalSendRecv, BothRanksSendFirstWithoutDeadlock) {
  const int64_t count = (1 << 20) + 5;
  run_local_ranks(2, [&](Communicator& comm) {
    CpuAllocator allocator(nullptr);
    const int peer = 1 - comm.rank();
    Tensor out = make(allocator, count, DType::kI32, "out");
    Tensor in = make(allocator, count, DType::kI32, "in");
    for (int64_t i = 0; i < count; ++i) out.data<int32_t>()[i] = comm.rank() * 1000003 + int32_t(i);
    const auto options = with_timeout(Ms(5000));
    // Several messages in a row to the same peer arrive in order.
    comm.send(out, peer, options);
    Tensor small = make(allocator, 2, DType::kF32, "small");
    small.data<float>()[0] = 1.5f * (comm.rank() + 1);
    small.data<float>()[1] = -2.0f;
    comm.send(small, peer, options);
    comm.recv(in, peer, options)->wait();
    Tensor small_in = make(allocator, 2, DType::kF32, "small_in");
    comm.recv(small_in, peer, options)->wait();
    for (int64_t i : {int64_t{0}, int64_t{1}, count / 2, count - 1}) {
      EXPECT_EQ(in.data<int32_t>()[i], peer * 1000003 + int32_t(i));
    }
    EXPECT_EQ(small_in.data<float>()[0], 1.5f * (peer + 1));
    EXPECT_EQ(small_in.data<float>()[1], -2.0f);
  });
}

// ---------------------------------------------------------------------------------------------
// CommStats: bytes per collective equal the closed form.

TEST(LocalStats, BytesEqualCollectiveTrafficOnThreeRanks) {
  run_local_ranks(3, [](Communicator& comm) {
    const int n = comm.size();
    const int rank = comm.rank();
    CpuAllocator allocator(nullptr);
    const int64_t shard = 100;
    Tensor a = make(allocator, 1000, DType::kF32, "a");
    Tensor s = make(allocator, shard, DType::kBF16, "s");
    Tensor full = make(allocator, shard * n, DType::kBF16, "full");
    a.fill(1.0f);
    s.fill(1.0f);
    full.fill(1.0f);
    comm.all_reduce(a, ReduceOp::kSum);
    comm.all_gather(s, full);
    comm.reduce_scatter(full, s, ReduceOp::kAvg);
    comm.broadcast(a, 1);
    comm.gather(s, rank == 2 ? full : Tensor(), 2);
    comm.scatter(rank == 0 ? full : Tensor(), s, 0);
    comm.barrier();
    comm.send(a, (rank + 1) % n);
    comm.recv(a, (rank + n - 1) % n)->wait();

    struct Expected {
      CollectiveKind kind;
      uint64_t bytes;
      int root;
    };
    const uint64_t full_bytes = static_cast<uint64_t>(shard * n * 2);
    for (const Expected& e :
         {Expected{CollectiveKind::kAllReduce, 4000, 0},
          Expected{CollectiveKind::kAllGather, full_bytes, 0},
          Expected{CollectiveKind::kReduceScatter, full_bytes, 0},
          Expected{CollectiveKind::kBroadcast, 4000, 1},
          Expected{CollectiveKind::kGather, full_bytes, 2},
          Expected{CollectiveKind::kScatter, full_bytes, 0},
          Expected{CollectiveKind::kBarrier, 0, 0}, Expected{CollectiveKind::kSend, 4000, 0},
          Expected{CollectiveKind::kRecv, 4000, 0}}) {
      const CollectiveStats got = comm.stats().get(e.kind);
      const Traffic want = collective_traffic(e.kind, e.bytes, n, rank, e.root);
      EXPECT_EQ(got.calls, 1u) << collective_name(e.kind) << " on rank " << rank;
      EXPECT_EQ(got.bytes_sent, want.sent) << collective_name(e.kind) << " on rank " << rank;
      EXPECT_EQ(got.bytes_received, want.received)
          << collective_name(e.kind) << " on rank " << rank;
    }
    // Spot checks of the closed form itself: ring all-reduce moves 2(N−1)/N of the buffer.
    EXPECT_EQ(comm.stats().get(CollectiveKind::kAllReduce).bytes_sent, 2u * 2u * 4000u / 3u);
    EXPECT_EQ(comm.stats().get(CollectiveKind::kAllGather).bytes_received, 2u * full_bytes / 3u);
  });
}

// ---------------------------------------------------------------------------------------------
// Bad input: InvalidArgument for what one rank can check, CommError for disagreement.

TEST(LocalBadInput, LocalChecksThrowInvalidArgumentAndLeaveTheGroupUsable) {
  run_local_ranks(3, [](Communicator& comm) {
    CpuAllocator allocator(nullptr);
    Tensor shard = make(allocator, 3, DType::kF32, "shard");
    Tensor wrong_full = make(allocator, 10, DType::kF32, "wrong_full");
    Tensor half_full = make(allocator, 9, DType::kF16, "half_full");
    Tensor t = make(allocator, 4, DType::kF32, "t");
    EXPECT_THROW(comm.all_gather(shard, wrong_full), InvalidArgument);
    try {
      comm.reduce_scatter(wrong_full, shard, ReduceOp::kSum);  // 10 is not 3 × 3
      ADD_FAILURE() << "reduce_scatter accepted a shard that does not divide the buffer";
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(), "pad the buffer")) << e.what();
    }
    EXPECT_THROW(comm.all_gather(shard, half_full), InvalidArgument);  // dtypes differ
    EXPECT_THROW(comm.reduce_scatter(half_full, shard, ReduceOp::kMax), InvalidArgument);
    EXPECT_THROW(comm.broadcast(t, 3), InvalidArgument);
    EXPECT_THROW(comm.broadcast(t, -1), InvalidArgument);
    EXPECT_THROW(comm.gather(t, Tensor(), 5), InvalidArgument);
    EXPECT_THROW(comm.scatter(Tensor(), t, -2), InvalidArgument);
    EXPECT_THROW(comm.send(t, comm.rank()), InvalidArgument);
    EXPECT_THROW(comm.send(t, 3), InvalidArgument);
    EXPECT_THROW(comm.recv(t, -1), InvalidArgument);
    EXPECT_THROW(comm.all_reduce(Tensor(), ReduceOp::kSum), InvalidArgument);
    // Nothing was issued: the group still works and sequence numbers still agree.
    t.fill(1.0f);
    comm.all_reduce(t, ReduceOp::kSum)->wait();
    EXPECT_EQ(t.to_vector()[3], 3.0f);
  });
}

// Every rank runs `issue(comm, allocator)` (which disagrees across ranks) and must get a
// CommError that names rank 0's call and the first differing rank's call.
void expect_disagreement(int size, const std::function<void(Communicator&, CpuAllocator&)>& issue,
                         const std::string& rank0_call, const std::string& other_call) {
  const auto start = Clock::now();
  std::vector<RankOutcome> outcomes = run_collecting(size, [&](Communicator& comm) {
    CpuAllocator allocator(nullptr);
    issue(comm, allocator);
  });
  EXPECT_LT(seconds_since(start), 2.0);
  for (int r = 0; r < size; ++r) {
    EXPECT_TRUE(outcomes[r].comm_error && !outcomes[r].timeout)
        << "rank " << r << ": " << outcomes[r].message;
    EXPECT_TRUE(contains(outcomes[r].message, rank0_call)) << outcomes[r].message;
    EXPECT_TRUE(contains(outcomes[r].message, other_call)) << outcomes[r].message;
  }
}

TEST(LocalBadInput, RanksDisagreeingOnACollectiveGetCommError) {
  const auto options = with_timeout(Ms(5000));
  // Count.
  expect_disagreement(
      3,
      [&](Communicator& comm, CpuAllocator& allocator) {
        Tensor t = make(allocator, comm.rank() == 2 ? 11 : 10, DType::kF32, "t");
        t.fill(0.0f);
        comm.all_reduce(t, ReduceOp::kSum, options)->wait();
      },
      "rank 0 called all_reduce #0 (10 fp32, sum)", "rank 2 called all_reduce #0 (11 fp32, sum)");
  // Dtype.
  expect_disagreement(
      2,
      [&](Communicator& comm, CpuAllocator& allocator) {
        Tensor t = make(allocator, 4, comm.rank() == 0 ? DType::kF16 : DType::kBF16, "t");
        t.fill(0.0f);
        comm.broadcast(t, 0, options)->wait();
      },
      "rank 0 called broadcast #0 (4 fp16, root 0)", "rank 1 called broadcast #0 (4 bf16, root 0)");
  // Root.
  expect_disagreement(
      2,
      [&](Communicator& comm, CpuAllocator& allocator) {
        Tensor t = make(allocator, 4, DType::kF32, "t");
        t.fill(0.0f);
        comm.broadcast(t, comm.rank(), options)->wait();
      },
      "rank 0 called broadcast #0 (4 fp32, root 0)", "rank 1 called broadcast #0 (4 fp32, root 1)");
  // Reduce op.
  expect_disagreement(
      2,
      [&](Communicator& comm, CpuAllocator& allocator) {
        Tensor t = make(allocator, 4, DType::kI32, "t");
        t.fill(0.0f);
        comm.all_reduce(t, comm.rank() == 0 ? ReduceOp::kSum : ReduceOp::kMax, options)->wait();
      },
      "(4 int32, sum)", "rank 1 called all_reduce #0 (4 int32, max)");
  // Kind.
  expect_disagreement(
      2,
      [&](Communicator& comm, CpuAllocator& allocator) {
        Tensor t = make(allocator, 4, DType::kF32, "t");
        t.fill(0.0f);
        if (comm.rank() == 0) {
          comm.barrier(options)->wait();
        } else {
          comm.all_reduce(t, ReduceOp::kSum, options)->wait();
        }
      },
      "rank 0 called barrier #0", "rank 1 called all_reduce #0 (4 fp32, sum)");
}

TEST(LocalBadInput, SendRecvDisagreeingOnCountGetCommError) {
  const auto options = with_timeout(Ms(5000));
  for (bool receiver_first : {false, true}) {
    std::vector<RankOutcome> outcomes = run_collecting(2, [&](Communicator& comm) {
      CpuAllocator allocator(nullptr);
      if (comm.rank() == 0) {
        if (receiver_first) std::this_thread::sleep_for(Ms(100));
        Tensor t = make(allocator, 5, DType::kF32, "t");
        t.fill(1.0f);
        comm.send(t, 1, options)->wait();
      } else {
        Tensor t = make(allocator, 6, DType::kF32, "t");
        comm.recv(t, 0, options)->wait();
      }
    });
    const std::string& message = outcomes[1].message;
    EXPECT_TRUE(outcomes[1].comm_error && !outcomes[1].timeout) << message;
    EXPECT_TRUE(
        contains(message, "rank 0's send #0 carries 5 fp32 but rank 1's recv #0 expects 6 fp32"))
        << "receiver_first=" << receiver_first << ": " << message;
  }
}

TEST(LocalBadInput, GroupMisuse) {
  EXPECT_THROW(LocalGroup::create(0), InvalidArgument);
  std::shared_ptr<LocalGroup> group = LocalGroup::create(2);
  std::unique_ptr<Backend> first = group->backend(1);
  EXPECT_EQ(first->rank(), 1);
  EXPECT_EQ(first->size(), 2);
  EXPECT_THROW(group->backend(1), InvalidArgument);
  EXPECT_THROW(group->backend(2), InvalidArgument);
  EXPECT_THROW(run_local_ranks(0, [](Communicator&) {}), InvalidArgument);
}

}  // namespace
}  // namespace zs::comm
