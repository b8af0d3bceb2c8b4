// GPU-free checks of the nccl backend's front door (part of zs_cuda_unit_tests, label unit):
// the factory of the CUDA build lists "nccl", never picks it for "auto", and asked for it on a
// machine without a CUDA device fails with an InvalidArgument naming the missing device and
// CUDA's reason (not a crash); the Communicator takes device tensors over a backend named
// "nccl" and host tensors over the others, and refuses the wrong kind before queueing anything.
//
// The front's device checks need no GPU: a backend stub that calls itself "nccl" stands in for
// the real one, and "device" tensors come from an allocator that labels host memory cuda:N
// (nothing ever dereferences them as device memory here). The same checks over the real nccl
// backend run in tests/cuda/nccl_communicator_test.cc (label gpu).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/factory.h"
#include "comm/local/local_backend.h"
#include "runtime/allocator.h"
#include "runtime/cuda/check.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#include "tests/support/error_text.h"
#include "tests/support/labelled_allocator.h"

namespace zs {
namespace {

using comm::Backend;
using comm::Call;
using comm::Communicator;
using comm::LaunchInfo;
using comm::ReduceOp;
using testing::contains;
using testing::invalid_argument_message;
// Host memory that claims to be cuda:N: enough for the front's checks, which look at
// Tensor::device() only.
using testing::LabelledAllocator;

// A one-rank backend named `name` that records the buffers it is given and moves nothing.
class RecordingBackend final : public Backend {
 public:
  explicit RecordingBackend(const char* name) : name_(name) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* name() const override { return name_; }

  void all_reduce(void* data, size_t, DType, ReduceOp, const Call&) override {
    buffers.push_back(data);
  }
  void all_gather(const void* shard, void* full, size_t, DType, const Call&) override {
    buffers.push_back(shard);
    buffers.push_back(full);
  }
  void reduce_scatter(const void* full, void* shard, size_t, DType, ReduceOp,
                      const Call&) override {
    buffers.push_back(full);
    buffers.push_back(shard);
  }
  void broadcast(void*, size_t, DType, int, const Call&) override { unsupported("broadcast"); }
  void gather(const void*, void*, size_t, DType, int, const Call&) override {
    unsupported("gather");
  }
  void scatter(const void*, void*, size_t, DType, int, const Call&) override {
    unsupported("scatter");
  }
  void barrier(const Call&) override {}
  void send(const void*, size_t, DType, int, const Call&) override { unsupported("send"); }
  void recv(void*, size_t, DType, int, const Call&) override { unsupported("recv"); }
  std::unique_ptr<Backend> split(int, int, const Call&) override {
    return std::make_unique<RecordingBackend>(name_);
  }
  void abort(const std::string&) override {}

  std::vector<const void*> buffers;  // read after the Works completed

 private:
  [[noreturn]] static void unsupported(const char* what) {
    ZS_THROW(NotImplemented, "RecordingBackend: ", what);
  }
  const char* name_;
};

TEST(NcclFactory, NcclIsBuiltAndListedFirst) {
  EXPECT_TRUE(comm::backend_built("nccl"));
  const std::vector<std::string> names = comm::built_backends();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "nccl");
  EXPECT_EQ(names.back(), "local");
  EXPECT_EQ(comm::resolve_backend("nccl", LaunchInfo{}), "nccl");
}

TEST(NcclFactory, AutoNeverPicksNccl) {
  EXPECT_EQ(comm::resolve_backend("auto", LaunchInfo{}), "local");
  LaunchInfo mpirun;
  mpirun.launcher = "openmpi";
  mpirun.rank = 1;
  mpirun.world_size = 2;
  mpirun.local_rank = 1;
  mpirun.local_size = 2;
  if (comm::backend_built("mpi")) {
    EXPECT_EQ(comm::resolve_backend("auto", mpirun), "mpi");
  }
  // And the world "auto" makes for a lone process is the local one, GPU or not.
  std::unique_ptr<Communicator> world = comm::make_world_communicator("auto", LaunchInfo{});
  EXPECT_STREQ(world->backend_name(), "local");
  EXPECT_TRUE(world->buffer_device().is_cpu());
}

TEST(NcclFactory, LaunchWithoutRendezvousFailsByName) {
  LaunchInfo torchrun;
  torchrun.launcher = "torchrun";
  torchrun.rank = 1;
  torchrun.world_size = 4;
  const std::string message =
      invalid_argument_message([&] { comm::resolve_backend("nccl", torchrun); });
  EXPECT_TRUE(contains(message, "backend 'nccl'")) << message;
  EXPECT_TRUE(contains(message, "launched by torchrun")) << message;
}

TEST(NcclFactory, WithoutADeviceTheWorldFailsNamingTheMissingDevice) {
  if (cuda::cuda_device_count() > 0) {
    GTEST_SKIP() << "a CUDA device is present: the no-device error cannot happen here (the "
                    "nccl world itself is tested by zs_cuda_tests)";
  }
  const std::string message = invalid_argument_message(
      [] { comm::make_world_communicator("nccl", LaunchInfo{}, std::chrono::seconds(5)); });
  ASSERT_NE(message, "") << "no InvalidArgument";
  EXPECT_TRUE(contains(message, "backend 'nccl' needs a CUDA device")) << message;
  EXPECT_TRUE(contains(message, cuda::cuda_unavailable_reason())) << message;
  EXPECT_TRUE(contains(message, "use backend 'mpi' or 'local'")) << message;
}

TEST(NcclFactory, GpuRankThreadsNeedAGpuEach) {
  // Refused before any thread starts: more rank threads than visible GPUs (none here).
  const int gpus = cuda::cuda_device_count();
  bool ran = false;
  const std::string message = invalid_argument_message(
      [&] { comm::run_gpu_ranks(gpus + 1, [&](Communicator&) { ran = true; }); });
  EXPECT_FALSE(ran);
  EXPECT_TRUE(contains(message, std::to_string(gpus + 1) + " rank threads on GPUs need"))
      << message;
  EXPECT_TRUE(contains(message, "mpirun or srun")) << message;
  if (gpus == 0) {
    EXPECT_TRUE(contains(message, cuda::cuda_unavailable_reason())) << message;
  }
}

TEST(NcclFront, DeviceTensorsGoThroughToAnNcclBackend) {
  auto backend = std::make_unique<RecordingBackend>("nccl");
  RecordingBackend* recorded = backend.get();
  Communicator comm(std::move(backend), Device::cuda(0));
  EXPECT_EQ(comm.buffer_device(), Device::cuda(0));
  LabelledAllocator device(Device::cuda(0));
  Tensor full = Tensor::empty({8}, DType::kF32, device, "full");
  Tensor shard = Tensor::empty({8}, DType::kF32, device, "shard");
  comm.all_reduce(full, ReduceOp::kSum)->wait();
  comm.all_gather(shard, full)->wait();
  comm.reduce_scatter(full, shard, ReduceOp::kSum)->wait();
  EXPECT_EQ(recorded->buffers,
            (std::vector<const void*>{full.raw_device_data(), shard.raw_device_data(),
                                      full.raw_device_data(), full.raw_device_data(),
                                      shard.raw_device_data()}));
  // A sub-group runs on the same GPU.
  std::unique_ptr<Communicator> sub = comm.split(0, 0);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->buffer_device(), Device::cuda(0));
}

TEST(NcclFront, HostTensorsAreRefusedByAnNcclCommunicator) {
  Communicator comm(std::make_unique<RecordingBackend>("nccl"), Device::cuda(0));
  CpuAllocator host(nullptr);
  LabelledAllocator device(Device::cuda(0));
  Tensor on_host = Tensor::empty({4}, DType::kF32, host, "grads");
  Tensor on_device = Tensor::empty({4}, DType::kF32, device, "params");
  const std::string message =
      invalid_argument_message([&] { comm.all_reduce(on_host, ReduceOp::kSum); });
  EXPECT_TRUE(contains(message,
                       "all_reduce: 'tensor' 'grads' [4] fp32 is on cpu, but the nccl "
                       "backend moves device memory: pass a tensor on cuda:0"))
      << message;
  // Every argument is checked, not just the first.
  const std::string gather = invalid_argument_message([&] { comm.all_gather(on_device, on_host); });
  EXPECT_TRUE(contains(gather, "all_gather: 'full'")) << gather;
  EXPECT_TRUE(contains(gather, "is on cpu")) << gather;
  EXPECT_EQ(comm.calls_issued(), 0u);  // refused before anything was queued
}

TEST(NcclFront, TensorsOnAnotherGpuAreRefused) {
  Communicator comm(std::make_unique<RecordingBackend>("nccl"), Device::cuda(0));
  LabelledAllocator gpu1(Device::cuda(1));
  Tensor elsewhere = Tensor::empty({4}, DType::kF32, gpu1, "params");
  const std::string message =
      invalid_argument_message([&] { comm.all_reduce(elsewhere, ReduceOp::kSum); });
  EXPECT_TRUE(contains(message, "is on cuda:1, but this rank's nccl communicator runs on cuda:0"))
      << message;
  // Without a known index (the one-argument constructor) any GPU passes the front.
  Communicator any_gpu(std::make_unique<RecordingBackend>("nccl"));
  EXPECT_TRUE(any_gpu.buffer_device().is_cuda());
  any_gpu.all_reduce(elsewhere, ReduceOp::kSum)->wait();
}

TEST(NcclFront, DeviceTensorsAreRefusedByHostBackends) {
  std::unique_ptr<Communicator> local = comm::make_world_communicator("local", LaunchInfo{});
  LabelledAllocator device(Device::cuda(0));
  Tensor on_device = Tensor::empty({4}, DType::kF32, device, "params");
  const std::string message =
      invalid_argument_message([&] { local->all_reduce(on_device, ReduceOp::kSum); });
  EXPECT_TRUE(contains(message,
                       "'params' [4] fp32 is on cuda:0, but the local backend moves "
                       "host memory"))
      << message;
  EXPECT_TRUE(contains(message, "nccl backend")) << message;
  // The same for a backend named "mpi" (the check is the front's, by the backend's kind).
  Communicator mpi_named(std::make_unique<RecordingBackend>("mpi"));
  const std::string mpi =
      invalid_argument_message([&] { mpi_named.all_reduce(on_device, ReduceOp::kSum); });
  EXPECT_TRUE(contains(mpi, "but the mpi backend moves host memory")) << mpi;
}

TEST(NcclFront, BufferDeviceMustSuitTheBackend) {
  const std::string cpu_for_nccl = invalid_argument_message(
      [] { Communicator c(std::make_unique<RecordingBackend>("nccl"), Device::cpu()); });
  EXPECT_TRUE(contains(cpu_for_nccl, "the nccl backend moves device memory")) << cpu_for_nccl;
  const std::string gpu_for_local = invalid_argument_message(
      [] { Communicator c(std::move(comm::make_local_backends(1)[0]), Device::cuda(0)); });
  EXPECT_TRUE(contains(gpu_for_local, "the local backend moves host memory")) << gpu_for_local;
}

}  // namespace
}  // namespace zs
