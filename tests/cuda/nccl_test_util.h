// Support for the nccl tests on device tensors (header-only): RankGpu, one rank's GPU, and
// run_nccl_ranks, ranks as threads (one per visible GPU), each a Communicator over its
// NcclBackend.
//
// Stream order in RankGpu: device tensors are allocated on `compute` (the allocator's stream);
// upload() orders the copy after compute (the allocation) and compute after the copy, with no host
// synchronization; download() orders the copy after compute (the work that wrote the tensor) and
// waits for it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/nccl/nccl_backend.h"
#include "runtime/allocator.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/copy.h"
#include "runtime/cuda/stream.h"
#include "runtime/memory_tracker.h"
#include "runtime/tensor.h"
#include "tests/support/threads.h"

namespace zs::testing {

// One rank's GPU: the compute stream with a tracked allocator on it, a copy stream, and host
// memory.
struct RankGpu {
  explicit RankGpu(int device)
      : tracker("cuda:" + std::to_string(device)),
        compute(device),
        allocator(compute, &tracker),
        copies(device) {}
  ~RankGpu() { compute.synchronize(); }

  Tensor empty(int64_t count, DType dtype, const std::string& name) {
    return Tensor::empty({count}, dtype, allocator, MemoryCategory::kOther, name);
  }
  // A device copy of a host tensor, ready for work on the compute stream (no host sync).
  Tensor upload(const Tensor& host) {
    Tensor device = empty(host.numel(), host.dtype(), host.name());
    copies.order_after(compute);  // after the allocation
    copies.copy(device, host);
    copies.order_before(compute);
    return device;
  }
  // A host copy after the work enqueued on the compute stream so far.
  Tensor download(const Tensor& device) {
    copies.order_after(compute);
    return cuda::to_host(device, host_allocator, copies);
  }

  MemoryTracker host_tracker{"cpu"};
  CpuAllocator host_allocator{&host_tracker};
  MemoryTracker tracker;
  cuda::Stream compute;
  cuda::CudaAllocator allocator;
  cuda::CopyStream copies;
};

// Runs body(rank, comm, gpu) on one thread per visible GPU, each rank a Communicator over its
// NcclBackend (NcclBackend::create_local with `options`; buffer device cuda:rank) made after
// the rank's RankGpu (which outlives the communicator and its tensors). With
// `attach_compute_stream` the communicator is ordered after gpu.compute
// (Communicator::set_compute_stream); without, the caller makes inputs complete before issuing.
// Rethrows the first failure by rank.
inline void run_nccl_ranks(const std::function<void(int, comm::Communicator&, RankGpu&)>& body,
                           bool attach_compute_stream = false,
                           const comm::NcclBackendOptions& options = {}) {
  const int n = cuda::cuda_device_count();
  std::vector<int> devices(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) devices[static_cast<size_t>(i)] = i;
  std::vector<std::unique_ptr<comm::NcclBackend>> backends =
      comm::NcclBackend::create_local(devices, options);
  run_threads(n, [&](int r) {
    cuda::DeviceGuard guard(r);
    RankGpu gpu(r);  // declared first: outlives the communicator and its tensors
    comm::Communicator comm(std::move(backends[static_cast<size_t>(r)]), Device::cuda(r));
    if (attach_compute_stream) comm.set_compute_stream(comm::stream_ref(gpu.compute));
    body(r, comm, gpu);
  });
}

}  // namespace zs::testing
