// The device hook table (see device_kernels.h): one atomic pointer per Device::Kind.
#include "runtime/device_kernels.h"

#include <atomic>

#include "runtime/error.h"

namespace zs {
namespace {

constexpr int kKinds = 2;  // Device::Kind::kCPU, kCUDA

// Set once per process by the device library (CudaAllocator's constructor), read by every
// helper call: acquire/release so a reader sees the table's contents.
std::atomic<const DeviceKernels*> g_tables[kKinds] = {};

int slot(Device::Kind kind) { return static_cast<int>(kind); }

}  // namespace

void install_device_kernels(Device::Kind kind, const DeviceKernels* kernels) {
  ZS_CHECK(kind != Device::Kind::kCPU,
           "install_device_kernels: CPU tensors use the runtime's own loops, not a hook table");
  g_tables[slot(kind)].store(kernels, std::memory_order_release);
}

bool has_device_kernels(Device::Kind kind) {
  return g_tables[slot(kind)].load(std::memory_order_acquire) != nullptr;
}

const DeviceKernels& device_kernels(Device device, const char* what) {
  const DeviceKernels* table =
      device.is_cpu() ? nullptr : g_tables[slot(device.kind)].load(std::memory_order_acquire);
  ZS_CHECK(table != nullptr, what, " on ", device.str(), ": no ", device.str(),
           " kernels are installed in this process. Device tensors must come from that device's "
           "allocator (for CUDA: zs::cuda::CudaAllocator, which installs them), in a build with "
           "the device enabled (-DZS_CUDA=ON); an allocator that only labels host memory as ",
           device.str(), " cannot be read or written by the runtime's helpers");
  return *table;
}

}  // namespace zs
