// The nccl backend through the normal front door (label gpu; each test skips with "no CUDA
// device: skipped (compiled only)" where there is no GPU): a Communicator over NcclBackend on
// every visible GPU (ranks as threads) runs all_reduce, all_gather and reduce_scatter on device
// tensors against closed forms; the factory's "nccl" world (one rank here, bootstrapped over the
// local backend) works on device tensors and refuses host tensors by name.
//
// Stream order: each rank allocates on its own stream (the allocator's), uploads on a copy
// stream ordered after it, and synchronizes the copy stream before issuing a collective — the
// front's contract for device tensors (comm/communicator.h: inputs complete when the call is
// issued). A collective's outputs are complete when its Work's wait() returns.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/factory.h"
#include "comm/nccl/nccl_backend.h"
#include "runtime/allocator.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/copy.h"
#include "runtime/cuda/stream.h"
#include "runtime/error.h"
#include "runtime/memory_tracker.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/nccl_test_util.h"

namespace zs {
namespace {

using comm::Communicator;
using comm::ReduceOp;
using testing::RankGpu;
using testing::run_nccl_ranks;

// A device copy of `values` on the rank's GPU, complete when this returns: the front's contract
// for a collective's inputs when no compute stream is attached.
Tensor upload_complete(RankGpu& gpu, const std::vector<float>& values, const std::string& name) {
  Tensor host =
      Tensor::empty({static_cast<int64_t>(values.size())}, DType::kF32, gpu.host_allocator, name);
  host.copy_from(values);
  Tensor device = gpu.upload(host);
  gpu.copies.synchronize();  // inputs complete before the collective is issued
  return device;
}

TEST(NcclCommunicator, CollectivesOnDeviceTensorsMatchClosedForms) {
  ZS_SKIP_WITHOUT_CUDA();
  const int n = cuda::cuda_device_count();
  const size_t count = 4099;  // per rank
  run_nccl_ranks([&](int rank, Communicator& comm, RankGpu& device) {
    EXPECT_EQ(comm.rank(), rank);
    EXPECT_EQ(comm.size(), n);
    EXPECT_STREQ(comm.backend_name(), "nccl");
    EXPECT_EQ(comm.buffer_device(), Device::cuda(rank));

    // all_reduce sum of (rank + 1)·u: u·n(n+1)/2.
    std::vector<float> values(count);
    for (size_t i = 0; i < count; ++i) values[i] = static_cast<float>((rank + 1) * (i % 5 + 1));
    Tensor reduced = upload_complete(device, values, "reduced");
    comm.all_reduce(reduced, ReduceOp::kSum)->wait();
    const std::vector<float> sums = device.download(reduced).to_vector();
    for (size_t i = 0; i < count; i += 409) {
      EXPECT_FLOAT_EQ(sums[i], static_cast<float>(i % 5 + 1) * n * (n + 1) / 2.0f) << i;
    }

    // all_gather of a shard holding the rank: slice q of full holds q.
    Tensor shard =
        upload_complete(device, std::vector<float>(count, static_cast<float>(rank)), "shard");
    Tensor full = upload_complete(device, std::vector<float>(count * n, -1.0f), "full");
    comm.all_gather(shard, full)->wait();
    const std::vector<float> gathered = device.download(full).to_vector();
    for (int q = 0; q < n; ++q) {
      EXPECT_EQ(gathered[static_cast<size_t>(q) * count], q);
      EXPECT_EQ(gathered[static_cast<size_t>(q + 1) * count - 1], q);
    }

    // reduce_scatter of the gathered buffer: slice r holds r on every rank, so r·n.
    comm.reduce_scatter(full, shard, ReduceOp::kSum)->wait();
    const std::vector<float> mine = device.download(shard).to_vector();
    EXPECT_EQ(mine.front(), static_cast<float>(rank * n));
    EXPECT_EQ(mine.back(), static_cast<float>(rank * n));
    comm.barrier()->wait();
    EXPECT_EQ(comm.stats().get(comm::CollectiveKind::kAllReduce).calls, 1u);
  });
}

TEST(NcclCommunicator, FactoryWorldTakesDeviceTensorsAndRefusesHostOnes) {
  ZS_SKIP_WITHOUT_CUDA();
  // LaunchInfo{}: a lone process, so the NCCL group of one rank is formed over the local
  // backend, on cuda:0.
  std::unique_ptr<Communicator> world =
      comm::make_world_communicator("nccl", comm::LaunchInfo{}, std::chrono::seconds(60));
  ASSERT_NE(world, nullptr);
  EXPECT_STREQ(world->backend_name(), "nccl");
  EXPECT_EQ(world->size(), 1);
  EXPECT_EQ(world->buffer_device(), Device::cuda(0));
  {
    cuda::DeviceGuard guard(0);
    RankGpu device(0);
    Tensor on_device = upload_complete(device, {1.0f, 2.0f, 3.0f}, "params");
    world->all_reduce(on_device, ReduceOp::kSum)->wait();
    EXPECT_EQ(device.download(on_device).to_vector(), (std::vector<float>{1.0f, 2.0f, 3.0f}));

    CpuAllocator host(nullptr);
    Tensor on_host = Tensor::empty({3}, DType::kF32, host, "grads");
    try {
      world->all_reduce(on_host, ReduceOp::kSum);
      FAIL() << "a host tensor was accepted by the nccl communicator";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("is on cpu, but the nccl backend moves device memory"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace zs
