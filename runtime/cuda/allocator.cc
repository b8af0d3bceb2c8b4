// CudaAllocator and PinnedHostAllocator (see allocator.h).
#include "runtime/cuda/allocator.h"

#include "runtime/cuda/check.h"
#include "runtime/error.h"

namespace zs::cuda {

CudaAllocator::CudaAllocator(const Stream& stream, MemoryTracker* tracker,
                             CudaAllocatorOptions options)
    : Allocator(Device::cuda(stream.device()), tracker), stream_(stream) {
  int pools_supported = 0;
  ZS_CUDA_CHECK(
      cudaDeviceGetAttribute(&pools_supported, cudaDevAttrMemoryPoolsSupported, stream.device()));
  ZS_CHECK(pools_supported != 0, "cuda:", stream.device(),
           " does not support stream-ordered memory pools (cudaMallocAsync); zeroshard needs a "
           "driver and device that do (CUDA 11.2+, not under some virtualized setups)");
  ZS_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool_, stream.device()));
  uint64_t threshold = options.pool_release_threshold;
  ZS_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
}

uint64_t CudaAllocator::reserved_bytes() const {
  uint64_t bytes = 0;
  ZS_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &bytes));
  return bytes;
}

void CudaAllocator::trim(size_t keep_bytes) { ZS_CUDA_CHECK(cudaMemPoolTrimTo(pool_, keep_bytes)); }

// No DeviceGuard: cudaMallocAsync/cudaFreeAsync work on the stream's device and pool whatever the
// calling thread's current device is.
void* CudaAllocator::raw_allocate(size_t nbytes) {
  void* ptr = nullptr;
  const cudaError_t status =
      cudaMallocAsync(&ptr, nbytes, stream_.get());  // zs-unchecked: OOM gets its own message
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // zs-unchecked: clears the error being reported
    ZS_THROW(OutOfMemory, "cudaMallocAsync of ", format_bytes(nbytes), " on ", device().str(),
             " failed: the GPU is out of memory (the pool holds ",
             format_bytes(static_cast<size_t>(reserved_bytes())), ").",
             tracker() != nullptr ? "\n" + tracker()->breakdown() : std::string(),
             "\nLower the batch size, shard more (a higher ZeRO stage or more ranks), use "
             "activation checkpointing, or offload optimizer state.");
  }
  ZS_CUDA_CHECK(status);
  return ptr;
}

// Frees run in destructors (Storage): they log a failure instead of throwing.
void CudaAllocator::raw_deallocate(void* ptr, size_t) {
  ZS_CUDA_CHECK_WARN(cudaFreeAsync(ptr, stream_.get()));
}

void* PinnedHostAllocator::raw_allocate(size_t nbytes) {
  void* ptr = nullptr;
  ZS_CUDA_CHECK(cudaHostAlloc(&ptr, nbytes, cudaHostAllocPortable));
  return ptr;
}

void PinnedHostAllocator::raw_deallocate(void* ptr, size_t) {
  ZS_CUDA_CHECK_WARN(cudaFreeHost(ptr));
}

}  // namespace zs::cuda
