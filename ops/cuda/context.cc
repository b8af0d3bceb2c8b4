// OpContext: the device/stream checks of a CUDA op and the per-thread cuBLAS handle cache.
#include "ops/cuda/context.h"

#include "ops/cuda/handle_cache.h"
#include "runtime/cuda/cublas_check.h"
#include "runtime/error.h"

namespace zs::ops::cuda {
namespace {

const zs::cuda::CudaAllocator& first_allocator(const char* op,
                                               std::initializer_list<const Tensor*> tensors) {
  ZS_CHECK(tensors.size() > 0 && *tensors.begin() != nullptr && (*tensors.begin())->defined(), op,
           ": no defined tensor to run on");
  return zs::cuda::cuda_allocator_of(**tensors.begin(), op);
}

// Moves the handle of a gone allocator to the legacy default stream before it is destroyed.
void forget_cublas_stream(CublasHandle& handle) {
  ZS_CUBLAS_CHECK_WARN(cublasSetStream(handle.get(), nullptr));
}
thread_local ThreadHandleCache<CublasHandle> t_handles(&forget_cublas_stream);

}  // namespace

OpContext::OpContext(const char* op, std::initializer_list<const Tensor*> tensors)
    : op_(op), allocator_(first_allocator(op, tensors)), guard_(allocator_.stream().device()) {
  for (const Tensor* t : tensors) {
    if (t != nullptr && t->defined()) check(*t);
  }
}

void OpContext::check(const Tensor& t) const {
  const Device device = t.device();
  ZS_CHECK(device == allocator_.device(), op_, ": tensor ", t.describe(), " is on ", device.str(),
           " but the op runs on ", allocator_.device().str(),
           "; every tensor of an op must be on one device (move it with zs::cuda::to_device / "
           "to_host first)");
  const zs::cuda::CudaAllocator& other = zs::cuda::cuda_allocator_of(t, op_);
  ZS_CHECK(other.stream().get() == allocator_.stream().get(), op_, ": tensor ", t.describe(),
           " comes from a CudaAllocator on another stream than the op's other tensors; an op "
           "runs on its tensors' allocator stream and does not order two streams, so allocate "
           "them on one stream (or copy the tensor over after ordering the streams)");
}

CublasHandle& OpContext::cublas() const { return t_handles.get(allocator_); }

}  // namespace zs::ops::cuda
