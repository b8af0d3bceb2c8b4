// Stream ordering of nccl collectives against the compute stream, and fp32-accumulated half
// reductions (label gpu; each test skips with "no CUDA device: skipped (compiled only)" where
// there is no GPU). Ranks are threads, one per visible GPU, each a Communicator over its
// NcclBackend with the rank's compute stream attached (Communicator::set_compute_stream).
//
// - Issue side: the compute stream is held by a host function for 1 s and then writes the
//   buffer (cudaMemsetAsync); the all_reduce is issued right after, with no host
//   synchronization, and must see the written values — it can only do so if the comm stream
//   waited for the event captured on the compute stream at issue.
// - Completion side: Work::wait_on(compute) returns while that host function still holds the
//   compute stream (so the host did not wait for the collective), and a copy enqueued on the
//   compute stream afterwards reads the reduced values. Several collectives in flight at once
//   (each after its own producer) come out right too.
// - Half precision: fp16/bf16 all_reduce (sum, avg) and reduce_scatter (sum) through nccl
//   equal the local (CPU) backend's fp32-accumulated results on the same inputs: bit for bit on
//   one GPU, within one unit in the last place of the dtype across GPUs (NCCL's summation order
//   is its own).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/local/local_backend.h"
#include "comm/nccl/nccl_backend.h"
#include "runtime/allocator.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/copy.h"
#include "runtime/cuda/stream.h"
#include "runtime/half.h"
#include "runtime/memory_tracker.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/nccl_test_util.h"

namespace zs {
namespace {

using comm::Communicator;
using comm::ReduceOp;
using comm::WorkPtr;
using testing::RankGpu;

// Far longer than issuing a collective takes; the collectives are warmed up first, because NCCL
// connects peers lazily, on the host, at a communicator's first collectives.
constexpr auto kHold = std::chrono::milliseconds(1000);

// Runs on the compute stream (cudaLaunchHostFunc): holds it for kHold, then flags that it ended.
// Makes no CUDA call, as host functions must not.
void CUDART_CB hold_stream(void* released) {
  std::this_thread::sleep_for(kHold);
  static_cast<std::atomic<bool>*>(released)->store(true);
}

// body(rank, comm, gpu) on one thread per visible GPU; the communicator is ordered after the
// rank's compute stream. Rethrows the first failure.
void run_ordered_ranks(const std::function<void(int, Communicator&, RankGpu&)>& body,
                       const comm::NcclBackendOptions& options = {}) {
  testing::run_nccl_ranks(body, /*attach_compute_stream=*/true, options);
}

TEST(NcclOrder, CollectiveWaitsForTheComputeStreamAndComputeWaitsForIt) {
  ZS_SKIP_WITHOUT_CUDA();
  const int n = cuda::cuda_device_count();
  const int64_t count = (int64_t{1} << 20) + 5;
  const size_t bytes = static_cast<size_t>(count) * sizeof(int32_t);
  run_ordered_ranks([&](int, Communicator& comm, RankGpu& gpu) {
    Tensor data = gpu.empty(count, DType::kI32, "data");
    Tensor out = gpu.empty(count, DType::kI32, "out");
    // Zeros, complete on the device: what a collective that did not wait would read.
    ZS_CUDA_CHECK(cudaMemsetAsync(data.raw_device_data(), 0, bytes, gpu.compute.get()));
    gpu.compute.synchronize();
    comm.all_reduce(data, ReduceOp::kSum)->wait();  // warm-up (sums zeros)

    // The producer: the compute stream is held for kHold, then writes 0x01010101 everywhere.
    std::atomic<bool> released{false};
    ZS_CUDA_CHECK(cudaLaunchHostFunc(gpu.compute.get(), hold_stream, &released));
    ZS_CUDA_CHECK(cudaMemsetAsync(data.raw_device_data(), 0x01, bytes, gpu.compute.get()));
    WorkPtr work = comm.all_reduce(data, ReduceOp::kSum);  // no host sync before it
    work->wait_on(comm::stream_ref(gpu.compute));
    // The collective cannot complete before the compute stream is released: wait_on returned
    // without waiting for it.
    EXPECT_FALSE(released.load()) << "wait_on blocked the host until the collective completed";
    // The consumer, on the compute stream, after wait_on.
    ZS_CUDA_CHECK(cudaMemcpyAsync(out.raw_device_data(), data.raw_device_data(), bytes,
                                  cudaMemcpyDeviceToDevice, gpu.compute.get()));
    const Tensor host = gpu.download(out);
    work->wait();
    const int32_t expected = n * 0x01010101;
    const int32_t* values = host.data<int32_t>();
    int64_t wrong = 0;
    for (int64_t i = 0; i < count; ++i) wrong += values[i] != expected;
    EXPECT_EQ(wrong, 0) << "first value " << values[0] << ", expected " << expected;
  });
}

TEST(NcclOrder, SeveralCollectivesInFlightEachAfterItsProducer) {
  ZS_SKIP_WITHOUT_CUDA();
  const int n = cuda::cuda_device_count();
  const int64_t count = 4099;
  const size_t bytes = static_cast<size_t>(count) * sizeof(int32_t);
  run_ordered_ranks([&](int rank, Communicator& comm, RankGpu& gpu) {
    {  // warm-up of the same collectives and sizes
      Tensor warm = gpu.empty(count, DType::kI32, "warm-up");
      Tensor warm_shard = gpu.empty(count / n, DType::kI32, "warm-up shard");
      ZS_CUDA_CHECK(cudaMemsetAsync(warm.raw_device_data(), 0, bytes, gpu.compute.get()));
      gpu.compute.synchronize();
      comm.all_reduce(warm, ReduceOp::kSum)->wait();
      comm.reduce_scatter(warm.slice(0, {(count / n) * n}), warm_shard, ReduceOp::kMax)->wait();
    }
    std::atomic<bool> released{false};
    ZS_CUDA_CHECK(cudaLaunchHostFunc(gpu.compute.get(), hold_stream, &released));
    std::vector<Tensor> buffers;
    std::vector<WorkPtr> works;
    for (int k = 0; k < 4; ++k) {
      buffers.push_back(gpu.empty(count, DType::kI32, "bucket" + std::to_string(k)));
      // Byte k+1 in every byte: int32 (k+1)·0x01010101 on every rank.
      ZS_CUDA_CHECK(
          cudaMemsetAsync(buffers.back().raw_device_data(), k + 1, bytes, gpu.compute.get()));
      works.push_back(comm.all_reduce(buffers.back(), ReduceOp::kSum));
    }
    // A reduce_scatter (max: no int32 overflow) of the last bucket's result, issued before
    // anything completed: it follows that all_reduce on the comm stream.
    Tensor shard = gpu.empty(count / n, DType::kI32, "shard");
    Tensor full = buffers.back().slice(0, {(count / n) * n});
    works.push_back(comm.reduce_scatter(full, shard, ReduceOp::kMax));
    for (const WorkPtr& w : works) w->wait_on(comm::stream_ref(gpu.compute));
    EXPECT_FALSE(released.load()) << "wait_on blocked the host until the collectives completed";
    for (int k = 0; k < 4; ++k) {
      const Tensor host = gpu.download(buffers[static_cast<size_t>(k)]);
      EXPECT_EQ(host.data<int32_t>()[count - 1], n * (k + 1) * 0x01010101) << "bucket " << k;
    }
    const Tensor mine = gpu.download(shard);
    EXPECT_EQ(mine.data<int32_t>()[0], n * 4 * 0x01010101) << "rank " << rank;
    for (const WorkPtr& w : works) w->wait();
  });
}

// Inputs of rank r: element i in about [-4, 4), not exactly summable in 16 bits.
std::vector<float> half_inputs(int rank, int64_t count) {
  std::vector<float> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t h =
        static_cast<uint32_t>(i) * 2654435761u + static_cast<uint32_t>(rank) * 40503u;
    values[static_cast<size_t>(i)] = static_cast<float>(h % 65521u) / 8190.0f - 4.0f;
  }
  return values;
}

uint16_t bits_of(float value, DType dtype) {
  return dtype == DType::kF16 ? float_to_half_bits(value) : float_to_bf16_bits(value);
}

// Same sign and at most one representable value apart (or bitwise equal when `exact`).
void expect_close_bits(const std::vector<float>& got, const std::vector<float>& want, DType dtype,
                       bool exact, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t off = 0;
  size_t first = got.size();
  for (size_t i = 0; i < got.size(); ++i) {
    const int a = bits_of(got[i], dtype);
    const int b = bits_of(want[i], dtype);
    const bool ok =
        exact ? a == b
              : (a == b || (std::signbit(got[i]) == std::signbit(want[i]) && std::abs(a - b) <= 1));
    if (!ok) {
      ++off;
      if (first == got.size()) first = i;
    }
  }
  EXPECT_EQ(off, 0) << what << ": first at " << first << ": "
                    << (first < got.size() ? got[first] : 0.0f) << " vs "
                    << (first < got.size() ? want[first] : 0.0f);
}

TEST(NcclOrder, HalfReductionsMatchTheCpuBackendsFp32Accumulation) {
  ZS_SKIP_WITHOUT_CUDA();
  const int n = cuda::cuda_device_count();
  const int64_t shard_count = 1031;
  const int64_t count = shard_count * n;
  struct Results {
    std::vector<float> sum, avg, scattered;
  };
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    // The reference: the local backend, n ranks as threads, on host tensors.
    std::vector<Results> cpu(static_cast<size_t>(n)), gpu(static_cast<size_t>(n));
    comm::run_local_ranks(n, [&](Communicator& comm) {
      CpuAllocator allocator(nullptr);
      const int r = comm.rank();
      Tensor sum = Tensor::empty({count}, dtype, allocator, "sum");
      sum.copy_from(half_inputs(r, count));
      Tensor avg = Tensor::empty({count}, dtype, allocator, "avg");
      avg.copy_from(half_inputs(r, count));
      Tensor full = Tensor::empty({count}, dtype, allocator, "full");
      full.copy_from(half_inputs(r + 7, count));
      Tensor shard = Tensor::empty({shard_count}, dtype, allocator, "shard");
      comm.all_reduce(sum, ReduceOp::kSum)->wait();
      comm.all_reduce(avg, ReduceOp::kAvg)->wait();
      comm.reduce_scatter(full, shard, ReduceOp::kSum)->wait();
      cpu[static_cast<size_t>(r)] = {sum.to_vector(), avg.to_vector(), shard.to_vector()};
    });
    run_ordered_ranks([&](int r, Communicator& comm, RankGpu& device) {
      CpuAllocator allocator(nullptr);
      auto host_of = [&](const std::vector<float>& values, const char* name) {
        Tensor host = Tensor::empty({static_cast<int64_t>(values.size())}, dtype, allocator, name);
        host.copy_from(values);
        return host;
      };
      Tensor sum = device.upload(host_of(half_inputs(r, count), "sum"));
      Tensor avg = device.upload(host_of(half_inputs(r, count), "avg"));
      Tensor full = device.upload(host_of(half_inputs(r + 7, count), "full"));
      Tensor shard = device.empty(shard_count, dtype, "shard");
      // Issued straight after the uploads: the compute stream orders them.
      comm.all_reduce(sum, ReduceOp::kSum)->wait_on(comm::stream_ref(device.compute));
      comm.all_reduce(avg, ReduceOp::kAvg)->wait_on(comm::stream_ref(device.compute));
      comm.reduce_scatter(full, shard, ReduceOp::kSum)->wait_on(comm::stream_ref(device.compute));
      gpu[static_cast<size_t>(r)] = {device.download(sum).to_vector(),
                                     device.download(avg).to_vector(),
                                     device.download(shard).to_vector()};
    });
    const bool exact = n == 1;
    for (int r = 0; r < n; ++r) {
      const std::string where = std::string(dtype_name(dtype)) + " rank " + std::to_string(r) +
                                " of " + std::to_string(n);
      const Results& c = cpu[static_cast<size_t>(r)];
      const Results& g = gpu[static_cast<size_t>(r)];
      expect_close_bits(g.sum, c.sum, dtype, exact, "all_reduce sum " + where);
      expect_close_bits(g.avg, c.avg, dtype, exact, "all_reduce avg " + where);
      expect_close_bits(g.scattered, c.scattered, dtype, exact, "reduce_scatter sum " + where);
    }
  }
}

TEST(NcclOrder, HalfReductionScratchIsChargedAsCommBuffersAndReleased) {
  ZS_SKIP_WITHOUT_CUDA();
  const int64_t count = 4096;
  MemoryTracker comm_tracker("cuda comm");
  comm::NcclBackendOptions options;
  options.tracker = &comm_tracker;
  run_ordered_ranks(
      [&](int, Communicator& comm, RankGpu& gpu) {
        Tensor data = gpu.empty(count, DType::kBF16, "grads");
        ZS_CUDA_CHECK(cudaMemsetAsync(data.raw_device_data(), 0, data.nbytes(), gpu.compute.get()));
        comm.all_reduce(data, ReduceOp::kSum)->wait();
      },
      options);
  // Every rank's fp32 buffer (2× the bf16 bytes) was charged and released.
  const int n = cuda::cuda_device_count();
  EXPECT_GE(comm_tracker.peak(MemoryCategory::kCommBuffers), static_cast<size_t>(count) * 4u);
  EXPECT_LE(comm_tracker.peak(MemoryCategory::kCommBuffers), static_cast<size_t>(count) * 4u * n);
  EXPECT_EQ(comm_tracker.current(MemoryCategory::kCommBuffers), 0u);
}

}  // namespace
}  // namespace zs
