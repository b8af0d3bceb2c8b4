// CopyStream, to_device, to_host (see copy.h).
#include "runtime/cuda/copy.h"

#include "runtime/cuda/check.h"
#include "runtime/error.h"

namespace zs::cuda {

CopyStream::CopyStream(int device) : stream_(device), done_(device) {}

void CopyStream::copy(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  ZS_CHECK(dst != nullptr && src != nullptr, "CopyStream::copy of ", nbytes,
           " bytes got a null pointer");
  DeviceGuard guard(stream_.device());
  ZS_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream_.get()));
}

void CopyStream::copy(const Tensor& dst, const Tensor& src) {
  ZS_CHECK(dst.dtype() == src.dtype() && dst.numel() == src.numel(),
           "CopyStream::copy: destination ", dst.describe(), " and source ", src.describe(),
           " must have the same dtype and number of elements");
  copy(dst.raw_device_data(), src.raw_device_data(), src.nbytes());
}

void CopyStream::order_before(Stream& consumer) {
  done_.record(stream_);
  consumer.wait(done_);
}

Tensor to_device(const Tensor& host, Allocator& device_allocator, CopyStream& copies,
                 const std::string& name) {
  ZS_CHECK(host.device().is_cpu(), "to_device: ", host.describe(), " is already on ",
           host.device().str());
  ZS_CHECK(device_allocator.device() == Device::cuda(copies.device()),
           "to_device: the allocator is for ", device_allocator.device().str(),
           " but the copy stream is on cuda:", copies.device());
  Tensor device = Tensor::empty(host.shape(), host.dtype(), device_allocator,
                                name.empty() ? host.name() : name);
  copies.copy(device, host);
  return device;
}

Tensor to_host(const Tensor& device, Allocator& host_allocator, CopyStream& copies,
               const std::string& name) {
  ZS_CHECK(device.device().is_cuda(), "to_host: ", device.describe(), " is not a CUDA tensor");
  ZS_CHECK(host_allocator.device().is_cpu(), "to_host: the allocator is for ",
           host_allocator.device().str(), ", not the host");
  Tensor host = Tensor::empty(device.shape(), device.dtype(), host_allocator,
                              name.empty() ? device.name() : name);
  copies.copy(host, device);
  copies.synchronize();
  return host;
}

}  // namespace zs::cuda
