// Tests for the local backend (comm/local) through the Communicator front.
//
// - The backend-agnostic collective suite (collective_suite.h) on 1, 2, 3 and 4 rank threads.
// - all_reduce equals reduce_scatter + all_gather bit for bit on random fp32 and bf16 data (where
//   summation order matters), and both equal the serial fp32 reduction over ranks 0, 1, … in
//   that order, rounded once.
// - Subgroups (split), overlap (a Work is asynchronous), eager send/recv, CommStats against
//   collective_traffic, and bad input. Timeouts, fail-fast, abort, flush and injected faults:
//   local_failure_test.cc.
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
#include "tests/comm/local_test_util.h"

namespace zs::comm {
namespace {

using local_testing::bytes_of;
using local_testing::contains;
using local_testing::make;
using local_testing::Ms;
using local_testing::RankOutcome;
using local_testing::run_collecting;
using local_testing::seconds_since;
using local_testing::with_faults;
using local_testing::with_timeout;

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
        return FaultSettings{delay, -1, -1, ""};
      }));
}

// A delay with a tag prefix slows the calls whose tag starts with it and no other call.
TEST(LocalOverlap, ADelayWithATagPrefixSlowsOnlyTheCallsTaggedWithIt) {
  run_local_ranks(
      2,
      [&](Communicator& comm) {
        CpuAllocator allocator(nullptr);
        Tensor t = make(allocator, 16, DType::kF32, "t");
        t.fill(1.0f);
        auto started = Clock::now();
        comm.all_reduce(t, ReduceOp::kSum, {{}, "parameters of x"})->wait();
        EXPECT_LT(seconds_since(started), 0.25) << "an untagged call was delayed";
        started = Clock::now();
        comm.all_reduce(t, ReduceOp::kSum, {{}, "gradients of x"})->wait();
        EXPECT_GE(seconds_since(started), 0.29) << "the tagged call was not delayed";
        EXPECT_EQ(t.to_vector()[3], 4.0f);
      },
      with_faults([&](int) {
        FaultSettings settings;
        settings.delay = Ms(300);
        settings.delay_tag_prefix = "gradients of ";
        return settings;
      }));
}

// ---------------------------------------------------------------------------------------------
// Timeouts, failures, abort.

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

// The local backend's transport is memcpy, so CommStats::bytes_copied is every byte it moves.
// An all-gather from a separate shard copies all of full (its own slice too); the in-place form
// (the shard is the rank's slot of full) copies the other ranks' slices only: (N−1)/N of the
// unit's bytes, at N = 2, 3, 4, and the same bits.
TEST(LocalStats, InPlaceAllGatherCopiesTheOtherRanksSlicesOnly) {
  for (int n : {2, 3, 4}) {
    run_local_ranks(n, [n](Communicator& comm) {
      const int rank = comm.rank();
      CpuAllocator allocator(nullptr);
      const int64_t shard = 1000;
      const uint64_t full_bytes = static_cast<uint64_t>(shard * n) * 4;
      Tensor separate = make(allocator, shard, DType::kF32, "separate shard");
      Tensor gathered = make(allocator, shard * n, DType::kF32, "gathered");
      Tensor full = make(allocator, shard * n, DType::kF32, "full");
      Tensor own = comm.rank_slice(full);
      EXPECT_EQ(own.storage(), full.storage());
      EXPECT_EQ(own.offset_bytes(), static_cast<size_t>(rank * shard) * 4);
      for (int64_t i = 0; i < shard; ++i) {
        separate.data<float>()[i] = static_cast<float>(rank * shard + i);
        own.data<float>()[i] = static_cast<float>(rank * shard + i);
      }
      comm.stats().reset();
      comm.all_gather(separate, gathered)->wait();
      EXPECT_EQ(comm.stats().get(CollectiveKind::kAllGather).bytes_copied, full_bytes)
          << "separate shard, " << n << " ranks";
      comm.stats().reset();
      comm.all_gather(own, full)->wait();
      const CollectiveStats in_place = comm.stats().get(CollectiveKind::kAllGather);
      EXPECT_EQ(in_place.bytes_copied, full_bytes * (n - 1) / n) << "in place, " << n << " ranks";
      // The traffic is the collective's, whichever form: (N−1)/N of full each way.
      EXPECT_EQ(in_place.bytes_received, full_bytes * (n - 1) / n);
      EXPECT_EQ(bytes_of(full), bytes_of(gathered)) << n << " ranks";
      for (int64_t i = 0; i < shard * n; ++i) {
        ASSERT_EQ(full.data<float>()[i], static_cast<float>(i)) << "element " << i;
      }
      // A reduction writes, it does not copy; the table shows the column.
      comm.stats().reset();
      comm.reduce_scatter(gathered, own, ReduceOp::kSum)->wait();
      EXPECT_EQ(comm.stats().get(CollectiveKind::kReduceScatter).bytes_copied, 0u);
      EXPECT_NE(comm.stats().table().find("copied"), std::string::npos);
    });
  }
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
    // A shard inside full but not at this rank's slot would be overwritten before it is read.
    Tensor flat = make(allocator, 9, DType::kF32, "flat");
    try {
      comm.all_gather(flat.slice(3 * ((comm.rank() + 1) % 3), {3}), flat);
      ADD_FAILURE() << "all_gather accepted a shard at another rank's slot";
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(), "rank_slice")) << e.what();
    }
    EXPECT_THROW(comm.rank_slice(wrong_full), InvalidArgument);  // 10 is not 3 × something
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
