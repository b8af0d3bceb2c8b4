// Communicator::duplicate: a second queue over the same ranks. Its collectives complete while
// the original's queue is blocked (here by an all_reduce that a peer issues only after the
// duplicate's all_gather), and its traffic is counted in the original's stats().
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "comm/local/local_backend.h"
#include "runtime/allocator.h"
#include "tests/comm/local_test_util.h"

namespace zs::comm {
namespace {

using local_testing::make;
using local_testing::Ms;
using local_testing::with_timeout;

TEST(Duplicate, RunsBesideTheOriginalQueueAndCountsInItsStats) {
  // Bounded: on a single queue rank 0's all_gather would wait behind its all_reduce, which waits
  // for rank 1, which waits for that all_gather — a timeout instead of a hang.
  const CollectiveOptions bounded = with_timeout(Ms(10000));
  run_local_ranks(2, [&](Communicator& comm) {
    std::unique_ptr<Communicator> twin = comm.duplicate(bounded);
    ASSERT_NE(twin, nullptr);
    EXPECT_EQ(twin->rank(), comm.rank());
    EXPECT_EQ(twin->size(), comm.size());
    comm.stats().reset();
    CpuAllocator allocator(nullptr);
    Tensor summed = make(allocator, 4, DType::kF32, "summed");
    summed.fill(static_cast<float>(comm.rank() + 1));
    Tensor shard = make(allocator, 3, DType::kF32, "shard");
    shard.fill(static_cast<float>(10 * (comm.rank() + 1)));
    Tensor full = make(allocator, 6, DType::kF32, "full");
    WorkPtr reduction;
    if (comm.rank() == 0) reduction = comm.all_reduce(summed, ReduceOp::kSum, bounded);
    twin->all_gather(shard, full, bounded)->wait();
    if (comm.rank() == 0) {
      EXPECT_FALSE(reduction->test());  // rank 1 has not issued it yet
    }
    // Rank 1 issues its all_reduce only after rank 0 has looked (else the look could race it).
    twin->barrier(bounded)->wait();
    if (comm.rank() == 1) reduction = comm.all_reduce(summed, ReduceOp::kSum, bounded);
    reduction->wait();
    EXPECT_EQ(full.to_vector(), (std::vector<float>{10, 10, 10, 20, 20, 20}));
    EXPECT_EQ(summed.to_vector(), (std::vector<float>{3, 3, 3, 3}));
    // One stats object: the duplicate's all_gather is in the original's, and a reset of either
    // resets both.
    EXPECT_EQ(comm.stats().get(CollectiveKind::kAllGather).calls, 1u);
    EXPECT_EQ(comm.stats().get(CollectiveKind::kAllGather).bytes_received, 12u);
    EXPECT_EQ(comm.stats().get(CollectiveKind::kAllReduce).calls, 1u);
    EXPECT_EQ(&twin->stats(), &comm.stats());
    twin->stats().reset();
    EXPECT_EQ(comm.stats().total().calls, 0u);
  });
}

TEST(Duplicate, IsAbortedWithTheOriginalGroup) {
  run_local_ranks(2, [&](Communicator& comm) {
    std::unique_ptr<Communicator> twin = comm.duplicate();
    comm.barrier()->wait();  // both ranks hold their duplicate before one aborts
    if (comm.rank() == 0) comm.abort("test abort");
    CpuAllocator allocator(nullptr);
    Tensor t = make(allocator, 4, DType::kF32, "t");
    EXPECT_THROW(twin->all_reduce(t, ReduceOp::kSum, with_timeout(Ms(10000)))->wait(), CommError);
  });
}

}  // namespace
}  // namespace zs::comm
