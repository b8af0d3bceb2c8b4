// Allocators for CUDA: device memory from CUDA's stream-ordered pools, and pinned host memory.
//
// CudaAllocator (device cuda:N) allocates with cudaMallocAsync and frees with cudaFreeAsync on
// one stream, the allocator's stream, from the device's default memory pool. The pool keeps
// freed memory for reuse (its release threshold is raised to "keep everything" by default), so
// this is the caching allocator of the CUDA path without a cache of our own. Every allocation
// is charged to the device's MemoryTracker in the same categories as on the CPU (parameters,
// gradients, …) before it happens, so a budget, the per-category peaks and `--profile-memory`
// work per GPU exactly as on the CPU. The tracker counts requested bytes; the pool's own
// reserve (cudaMemPoolAttrReservedMemCurrent) is reported by reserved_bytes().
//
// Stream order (the one rule of stream-ordered allocation): memory returned by allocate() may be
// used at once by work on the allocator's stream; work on any other stream must first be
// ordered after that stream (Stream::wait_for / an Event). A free is enqueued on the allocator's
// stream: if another stream still uses the memory, order the allocator's stream after that
// work before the Storage is released (as with PyTorch's record_stream). The host never blocks
// in allocate() or deallocate().
//
// PinnedHostAllocator (device cpu) allocates page-locked host memory with cudaHostAlloc
// (portable: pinned for every device), for offload buffers and the data loader's staging
// buffers: copies between it and a device run asynchronously and at full PCIe/NVLink speed.
// Charged to the host's MemoryTracker like CpuAllocator memory. Pinning is slow (it maps pages);
// allocate pinned buffers once and reuse them.
//
// Device hooks: the constructor installs the CUDA entry of the runtime's device hook table
// (runtime/device_kernels.h; runtime/cuda/device_kernels.h), so Tensor::to_vector / copy_from /
// fill / zero_bytes and accumulate_into (the autograd tape's gradient sums) work on the CUDA
// tensors it makes. They run on this allocator's stream — the stream every op on its tensors
// uses (ops/cuda/context.h) — so they need no extra ordering.
//
// Ownership and thread-safety as runtime/allocator.h: allocate/deallocate are thread-safe; the
// tracker and the stream must outlive the allocator, the allocator every Storage it made.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "runtime/allocator.h"
#include "runtime/cuda/stream.h"
#include "runtime/tensor.h"

namespace zs::cuda {

struct CudaAllocatorOptions {
  // Bytes the pool may keep cached after frees before it returns memory to the driver at the
  // next synchronization; the default keeps everything (as a caching allocator does).
  uint64_t pool_release_threshold = UINT64_MAX;
};

class CudaAllocator : public Allocator {
 public:
  // Allocations are ordered on `stream` (which fixes the device); `tracker` may be null.
  // Throws InvalidArgument if the device has no memory-pool support.
  CudaAllocator(const Stream& stream, MemoryTracker* tracker, CudaAllocatorOptions options = {});

  const Stream& stream() const { return stream_; }
  // Bytes the device's default pool currently holds from the driver (in use + cached).
  uint64_t reserved_bytes() const;
  // Returns cached memory beyond `keep_bytes` to the driver (cudaMemPoolTrimTo).
  void trim(size_t keep_bytes = 0);
  // Expires when this allocator is destroyed: lets per-thread caches keyed by allocator (the
  // cuBLAS handles of ops/cuda/context.h) drop entries of allocators that are gone, even if a
  // new one reuses the address.
  std::weak_ptr<const void> lifetime_token() const { return lifetime_; }

 protected:
  void* raw_allocate(size_t nbytes) override;
  void raw_deallocate(void* ptr, size_t nbytes) override;

 private:
  const Stream& stream_;
  cudaMemPool_t pool_ = nullptr;
  std::shared_ptr<const void> lifetime_ = std::make_shared<int>(0);
};

// The CudaAllocator of a tensor on cuda:N, for code that needs its stream. Throws
// InvalidArgument naming `what` and the tensor if the tensor is not on a CUDA device or its
// allocator is not a CudaAllocator (e.g. host memory labelled cuda:N).
const CudaAllocator& cuda_allocator_of(const Tensor& t, const char* what);

class PinnedHostAllocator : public Allocator {
 public:
  explicit PinnedHostAllocator(MemoryTracker* tracker) : Allocator(Device::cpu(), tracker) {}

 protected:
  void* raw_allocate(size_t nbytes) override;
  void raw_deallocate(void* ptr, size_t nbytes) override;
};

}  // namespace zs::cuda
