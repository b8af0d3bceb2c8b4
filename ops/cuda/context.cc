// OpContext: the device/stream checks of a CUDA op and the per-thread cuBLAS handle cache.
#include "ops/cuda/context.h"

#include <memory>
#include <vector>

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

struct CachedHandle {
  const zs::cuda::CudaAllocator* allocator = nullptr;
  std::weak_ptr<const void> alive;
  std::unique_ptr<CublasHandle> handle;
};

// Destroys a cached handle. If its allocator (and maybe its stream) is gone, the handle is first
// moved to the legacy default stream so that cublasDestroy never touches a destroyed stream.
void release(CachedHandle& entry) {
  if (entry.handle == nullptr) return;
  if (entry.alive.expired()) ZS_CUBLAS_CHECK_WARN(cublasSetStream(entry.handle->get(), nullptr));
  entry.handle.reset();
}

// Few allocators per thread (usually one compute stream): a vector beats a map here.
struct HandleCache {
  std::vector<CachedHandle> entries;
  HandleCache() = default;
  ZS_DISALLOW_COPY(HandleCache);
  ~HandleCache() {
    for (CachedHandle& entry : entries) release(entry);
  }
};
thread_local HandleCache t_handles;

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

CublasHandle& OpContext::cublas() const {
  // Drop handles of allocators that are gone (their stream may be gone too).
  std::vector<CachedHandle>& entries = t_handles.entries;
  for (size_t i = 0; i < entries.size();) {
    if (entries[i].alive.expired()) {
      release(entries[i]);
      entries[i] = std::move(entries.back());
      entries.pop_back();
    } else {
      ++i;
    }
  }
  for (CachedHandle& cached : entries) {
    if (cached.allocator == &allocator_) return *cached.handle;
  }
  CachedHandle entry;
  entry.allocator = &allocator_;
  entry.alive = allocator_.lifetime_token();
  entry.handle = std::make_unique<CublasHandle>(allocator_.stream());
  entries.push_back(std::move(entry));
  return *entries.back().handle;
}

}  // namespace zs::ops::cuda
