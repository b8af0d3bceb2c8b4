// The nccl backend (comm/nccl) on every visible GPU, ranks as threads of this process
// (NcclBackend::create_local): all_reduce (sum, avg, max), all_gather, reduce_scatter and
// broadcast against closed forms, abort, split (the parent usable again after it, a rank of no
// color getting no group), and (with two GPUs or more) a skipped collective that
// fails with CommTimeout instead of hanging (label gpu; skips with "no CUDA device: skipped
// (compiled only)" where there is no GPU). With one GPU the group has one rank — the collectives
// still run through NCCL.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <vector>

#include "comm/local/local_backend.h"
#include "comm/nccl/nccl_backend.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/stream.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/threads.h"

namespace zs {
namespace {

using comm::Call;
using comm::Clock;
using comm::CollectiveKind;
using comm::NcclBackend;
using comm::ReduceOp;

Call make_call(CollectiveKind kind, uint64_t sequence,
               std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  return Call{kind, sequence, Clock::now() + timeout, "nccl test"};
}

// Runs body(rank, backend) on one thread per rank; rethrows the first failure.
void run_ranks(std::vector<std::unique_ptr<NcclBackend>>& backends,
               const std::function<void(int, NcclBackend&)>& body) {
  testing::run_threads(static_cast<int>(backends.size()), [&](int r) {
    NcclBackend& backend = *backends[static_cast<size_t>(r)];
    cuda::DeviceGuard guard(backend.device());
    body(r, backend);
  });
}

std::vector<float> device_to_vector(const float* device, size_t count) {
  std::vector<float> host(count);
  ZS_CUDA_CHECK(cudaMemcpy(host.data(), device, count * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

float* device_from_vector(const std::vector<float>& host) {
  float* device = nullptr;
  ZS_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device), host.size() * sizeof(float)));
  ZS_CUDA_CHECK(
      cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  return device;
}

class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ZS_SKIP_WITHOUT_CUDA();
    std::vector<int> devices(static_cast<size_t>(cuda::cuda_device_count()));
    for (size_t i = 0; i < devices.size(); ++i) devices[i] = static_cast<int>(i);
    backends_ = NcclBackend::create_local(devices);
  }
  std::vector<std::unique_ptr<NcclBackend>> backends_;
};

TEST_F(NcclTest, AllReduceSumAvgMaxMatchClosedForms) {
  const int n = static_cast<int>(backends_.size());
  const size_t count = 100003;
  run_ranks(backends_, [&](int rank, NcclBackend& backend) {
    EXPECT_EQ(backend.rank(), rank);
    EXPECT_EQ(backend.size(), n);
    std::vector<float> values(count);
    for (size_t i = 0; i < count; ++i) values[i] = static_cast<float>((rank + 1) * (i % 7 + 1));
    uint64_t sequence = 0;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      float* data = device_from_vector(values);
      backend.all_reduce(data, count, DType::kF32, op,
                         make_call(CollectiveKind::kAllReduce, sequence++));
      const std::vector<float> got = device_to_vector(data, count);
      ZS_CUDA_CHECK(cudaFree(data));
      for (size_t i = 0; i < count; i += 997) {
        const float unit = static_cast<float>(i % 7 + 1);
        const float expected = op == ReduceOp::kSum   ? unit * n * (n + 1) / 2.0f
                               : op == ReduceOp::kAvg ? unit * (n + 1) / 2.0f
                                                      : unit * n;
        EXPECT_FLOAT_EQ(got[i], expected) << comm::reduce_op_name(op) << " element " << i;
      }
    }
  });
}

TEST_F(NcclTest, AllGatherReduceScatterAndBroadcast) {
  const int n = static_cast<int>(backends_.size());
  const size_t count = 1031;  // per rank
  run_ranks(backends_, [&](int rank, NcclBackend& backend) {
    std::vector<float> shard(count, static_cast<float>(rank));
    float* d_shard = device_from_vector(shard);
    float* d_full = device_from_vector(std::vector<float>(count * n, -1.0f));
    backend.all_gather(d_shard, d_full, count, DType::kF32,
                       make_call(CollectiveKind::kAllGather, 0));
    const std::vector<float> full = device_to_vector(d_full, count * n);
    for (int q = 0; q < n; ++q) EXPECT_EQ(full[static_cast<size_t>(q) * count], q);

    // reduce_scatter of the gathered buffer: slice r holds r on every rank → r·n.
    backend.reduce_scatter(d_full, d_shard, count, DType::kF32, ReduceOp::kSum,
                           make_call(CollectiveKind::kReduceScatter, 1));
    EXPECT_EQ(device_to_vector(d_shard, count)[count - 1], static_cast<float>(rank * n));

    std::vector<float> root_data(count, rank == 0 ? 42.0f : 0.0f);
    float* d_root = device_from_vector(root_data);
    backend.broadcast(d_root, count, DType::kF32, 0, make_call(CollectiveKind::kBroadcast, 2));
    EXPECT_EQ(device_to_vector(d_root, count)[7], 42.0f);
    backend.barrier(make_call(CollectiveKind::kBarrier, 3));
    ZS_CUDA_CHECK(cudaFree(d_shard));
    ZS_CUDA_CHECK(cudaFree(d_full));
    ZS_CUDA_CHECK(cudaFree(d_root));
  });
}

TEST_F(NcclTest, AbortedGroupFailsFastWithTheReason) {
  run_ranks(backends_, [&](int, NcclBackend& backend) {
    backend.abort("test abort");
    float* data = device_from_vector(std::vector<float>(8, 1.0f));
    try {
      backend.all_reduce(data, 8, DType::kF32, ReduceOp::kSum,
                         make_call(CollectiveKind::kAllReduce, 0));
      ADD_FAILURE() << "no CommError after abort";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("the group was aborted: test abort"), std::string::npos)
          << e.what();
    }
    ZS_CUDA_CHECK(cudaFree(data));
  });
}

TEST_F(NcclTest, AnAbortReachesGroupsSplitFromTheAbortedOne) {
  // As the local backend: aborting a group fails the groups split from it (made before or after
  // the abort is irrelevant here: before), with the parent's reason.
  run_ranks(backends_, [&](int rank, NcclBackend& backend) {
    std::unique_ptr<comm::Backend> child =
        backend.split(0, rank, make_call(CollectiveKind::kSplit, 0));
    ASSERT_NE(child, nullptr);
    backend.abort("parent aborted in test");
    float* data = device_from_vector(std::vector<float>(8, 1.0f));
    try {
      child->all_reduce(data, 8, DType::kF32, ReduceOp::kSum,
                        make_call(CollectiveKind::kAllReduce, 0));
      ADD_FAILURE() << "no CommError on the split group after the parent's abort";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("parent aborted in test"), std::string::npos)
          << e.what();
    }
    ZS_CUDA_CHECK(cudaFree(data));
  });
}

TEST_F(NcclTest, SplitWithoutAColorGivesNoGroupAndLeavesTheParentUsable) {
  // Rank 0 joins no group (color < 0: NCCL_SPLIT_NOCOLOR), the others form one; every rank's
  // parent then runs a collective.
  const int n = static_cast<int>(backends_.size());
  run_ranks(backends_, [&](int rank, NcclBackend& backend) {
    std::unique_ptr<comm::Backend> rest =
        backend.split(rank == 0 ? -1 : 0, rank, make_call(CollectiveKind::kSplit, 0));
    EXPECT_EQ(rest == nullptr, rank == 0);
    if (rest != nullptr) {
      EXPECT_EQ(rest->size(), n - 1);
    }
    float* data = device_from_vector(std::vector<float>(5, 2.0f));
    backend.all_reduce(data, 5, DType::kF32, ReduceOp::kSum,
                       make_call(CollectiveKind::kAllReduce, 1));
    EXPECT_EQ(device_to_vector(data, 5)[4], static_cast<float>(2 * n));
    ZS_CUDA_CHECK(cudaFree(data));
  });
}

TEST(NcclBootstrap, FormsAGroupOverALocalBackendAndSplitsIt) {
  // The path of a multi-process job (unique id over a CPU backend, non-blocking
  // ncclCommInitRankConfig under a deadline), with ranks as threads and the local backend as
  // the bootstrap instead of MPI; then ncclCommSplit into even and odd ranks.
  ZS_SKIP_WITHOUT_CUDA();
  const int n = cuda::cuda_device_count();
  std::vector<std::unique_ptr<comm::Backend>> bootstraps = comm::make_local_backends(n);
  std::vector<std::unique_ptr<NcclBackend>> backends(static_cast<size_t>(n));
  testing::run_threads(n, [&](int r) {
    backends[r] = NcclBackend::create(std::move(bootstraps[r]), r, std::chrono::seconds(60));
  });
  run_ranks(backends, [&](int rank, NcclBackend& backend) {
    float* data = device_from_vector(std::vector<float>(33, 1.0f));
    backend.all_reduce(data, 33, DType::kF32, ReduceOp::kSum,
                       make_call(CollectiveKind::kAllReduce, 0));
    EXPECT_EQ(device_to_vector(data, 33)[32], static_cast<float>(n));
    std::unique_ptr<comm::Backend> half =
        backend.split(rank % 2, rank, make_call(CollectiveKind::kSplit, 1));
    ASSERT_NE(half, nullptr);
    EXPECT_EQ(half->size(), (n - rank % 2 + 1) / 2);
    EXPECT_EQ(half->rank(), rank / 2);
    half->all_reduce(data, 33, DType::kF32, ReduceOp::kMax,
                     make_call(CollectiveKind::kAllReduce, 0));
    EXPECT_EQ(device_to_vector(data, 33)[0], static_cast<float>(n));
    // The parent is usable again once the split returned (NCCL refuses a non-blocking parent
    // until the split running in its background has finished).
    backend.all_reduce(data, 33, DType::kF32, ReduceOp::kSum,
                       make_call(CollectiveKind::kAllReduce, 2));
    EXPECT_EQ(device_to_vector(data, 33)[0], static_cast<float>(n * n));
    ZS_CUDA_CHECK(cudaFree(data));
  });
}

TEST_F(NcclTest, SkippedCollectiveTimesOutInsteadOfHanging) {
  if (backends_.size() < 2) GTEST_SKIP() << "needs 2 CUDA devices, found " << backends_.size();
  run_ranks(backends_, [&](int rank, NcclBackend& backend) {
    if (rank == 0) return;  // rank 0 skips the collective
    float* data = device_from_vector(std::vector<float>(8, 1.0f));
    const auto start = Clock::now();
    try {
      backend.all_reduce(data, 8, DType::kF32, ReduceOp::kSum,
                         make_call(CollectiveKind::kAllReduce, 0, std::chrono::seconds(2)));
      ADD_FAILURE() << "no CommTimeout";
    } catch (const CommTimeout& e) {
      EXPECT_NE(std::string(e.what()).find("all_reduce #0 'nccl test' (8 fp32, sum) timed out"),
                std::string::npos)
          << e.what();
    }
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
    ZS_CUDA_CHECK(cudaFree(data));
  });
}

}  // namespace
}  // namespace zs
