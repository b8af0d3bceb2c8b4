// The CUDA entry of offload's HostMemoryBackend table (offload/host_pool.h): the host tier of a
// rank on a GPU is page-locked memory (runtime/cuda's PinnedHostAllocator), so the copies of
// gradient shards to the host and of updated compute shards back run at full PCIe/NVLink speed
// and may later be asynchronous. Built only with ZS_CUDA as zs_offload_cuda; its INTERFACE link
// option --undefined=zs_offload_cuda_anchor pulls this file into every program that links it
// (see runtime/device_kernels.h, "Registration").
//
// Thread-safety: the entry is immutable; the allocators it makes are as PinnedHostAllocator.
#include <memory>

#include "offload/host_pool.h"
#include "runtime/cuda/allocator.h"
#include "runtime/device_kernels.h"

// The symbol the linker is told to resolve (offload/cuda/CMakeLists.txt).
extern "C" const char zs_offload_cuda_anchor = 0;

namespace zs::offload {
namespace {

// Untracked: the host pool charges its own tier's tracker before it asks this allocator.
std::unique_ptr<Allocator> make_pinned() {
  return std::make_unique<cuda::PinnedHostAllocator>(nullptr);
}

const HostMemoryBackend kCudaHostMemory{"cuda", make_pinned};

const bool kRegistered = [] {
  DeviceTables<HostMemoryBackend>::install(Device::Kind::kCUDA, &kCudaHostMemory);
  return true;
}();

}  // namespace
}  // namespace zs::offload
