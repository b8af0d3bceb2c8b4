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
// Ownership and thread-safety as runtime/allocator.h: allocate/deallocate are thread-safe; the
// tracker and the stream must outlive the allocator, the allocator every Storage it made.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/allocator.h"
#include "runtime/cuda/stream.h"

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

 protected:
  void* raw_allocate(size_t nbytes) override;
  void raw_deallocate(void* ptr, size_t nbytes) override;

 private:
  const Stream& stream_;
  cudaMemPool_t pool_ = nullptr;
};

class PinnedHostAllocator : public Allocator {
 public:
  explicit PinnedHostAllocator(MemoryTracker* tracker) : Allocator(Device::cpu(), tracker) {}

 protected:
  void* raw_allocate(size_t nbytes) override;
  void raw_deallocate(void* ptr, size_t nbytes) override;
};

}  // namespace zs::cuda
