// Where a tensor-level CUDA op runs: the stream of its tensors' CudaAllocator, with their device
// current, and the calling thread's cuBLAS handle for that stream.
//
// The rule (docs/cuda.md): an op on CUDA tensors runs on the stream of their allocator
// (zs::cuda::CudaAllocator::stream()). Allocation is stream-ordered on that stream, so the op's
// outputs and workspaces may be used at once and freed (cudaFreeAsync, when their Tensor handles
// die) right after the kernels that use them were enqueued: the frees run after those kernels.
// Every tensor an op touches must therefore be on one device with a CudaAllocator on one stream;
// OpContext checks that and refuses mixed devices, host tensors and different streams with
// InvalidArgument naming the op and the tensors — it never adds cross-stream ordering itself.
//
// cuBLAS handles: one per (thread, allocator), created on first use and cached thread-locally
// (a handle is used by one thread at a time, cuBLAS's rule; creating one per call would cost
// milliseconds). An entry whose CudaAllocator is gone (CudaAllocator::lifetime_token expired)
// is destroyed at the thread's next lookup, so handles do not pile up across allocators.
//
// Thread-safety: OpContext is a stack object of one thread; the handle cache is thread-local.
#pragma once

#include <cuda_runtime_api.h>

#include <initializer_list>

#include "ops/cuda/gemm.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/stream.h"
#include "runtime/tensor.h"

namespace zs::ops::cuda {

class OpContext {
 public:
  // Checks that every defined tensor of `tensors` (at least the first must be defined) is on one
  // CUDA device with a CudaAllocator on one stream, and makes that device current for the scope.
  OpContext(const char* op, std::initializer_list<const Tensor*> tensors);
  ZS_DISALLOW_COPY(OpContext);

  // Also checks `t` (e.g. a gradient sink from set_grad) against the op's device and stream.
  void check(const Tensor& t) const;

  cudaStream_t stream() const { return allocator_.stream().get(); }
  int device() const { return allocator_.stream().device(); }
  // The calling thread's cuBLAS handle on this stream.
  CublasHandle& cublas() const;

 private:
  const char* op_;
  const zs::cuda::CudaAllocator& allocator_;
  zs::cuda::DeviceGuard guard_;
};

}  // namespace zs::ops::cuda
