// CudaAllocator and PinnedHostAllocator (see allocator.h).
#include "runtime/cuda/allocator.h"

#include "runtime/cuda/check.h"
#include "runtime/cuda/device_kernels.h"
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
  // Only now can CUDA tensors exist: give the runtime's helpers their CUDA kernels.
  install_cuda_device_kernels();
}

const CudaAllocator& cuda_allocator_of(const Tensor& t, const char* what) {
  ZS_CHECK(t.defined(), what, ": the tensor is undefined");
  const Device device = t.device();
  ZS_CHECK(device.is_cuda(), what, ": tensor ", t.describe(), " is on ", device.str(),
           ", not on a CUDA device");
  const auto* allocator = dynamic_cast<const CudaAllocator*>(&t.allocator());
  ZS_CHECK(allocator != nullptr, what, ": tensor ", t.describe(), " is labelled ", device.str(),
           " but its allocator is not a zs::cuda::CudaAllocator, so it has no stream to run on; "
           "allocate CUDA tensors with a CudaAllocator");
  return *allocator;
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
