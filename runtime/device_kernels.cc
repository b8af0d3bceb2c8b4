// The device hook table (see device_kernels.h): DeviceTables<DeviceKernels>, set once per process
// by the device library (CudaAllocator's constructor) and read by every helper call.
#include "runtime/device_kernels.h"

#include "runtime/error.h"

namespace zs {

void install_device_kernels(Device::Kind kind, const DeviceKernels* kernels) {
  ZS_CHECK(kind != Device::Kind::kCPU,
           "install_device_kernels: CPU tensors use the runtime's own loops, not a hook table");
  DeviceTables<DeviceKernels>::install(kind, kernels);
}

bool has_device_kernels(Device::Kind kind) {
  return DeviceTables<DeviceKernels>::find(kind) != nullptr;
}

const DeviceKernels& device_kernels(Device device, const char* what) {
  const DeviceKernels* table =
      device.is_cpu() ? nullptr : DeviceTables<DeviceKernels>::find(device.kind);
  ZS_CHECK(table != nullptr, what, " on ", device.str(), ": no ", device.str(),
           " kernels are installed in this process. Device tensors must come from that device's "
           "allocator (for CUDA: zs::cuda::CudaAllocator, which installs them), in a build with "
           "the device enabled (-DZS_CUDA=ON); an allocator that only labels host memory as ",
           device.str(), " cannot be read or written by the runtime's helpers");
  return *table;
}

}  // namespace zs
