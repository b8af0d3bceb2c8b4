// The CUDA entry of the ops' device table (ops/device_ops.h), installed by a static initializer.
// zs_ops_cuda's INTERFACE link option --undefined=zs_ops_cuda_anchor pulls this file into every
// program that links the library (zs_ops links it in a CUDA build), see runtime/device_kernels.h,
// "Registration". The entries themselves live in the *_entries.cc files (device_entries.h).
//
// Thread-safety: the entry is immutable once built; each function runs on its tensors' stream
// (OpContext).
#include "ops/cuda/context.h"
#include "ops/cuda/device_entries.h"
#include "ops/cuda/kernels.h"
#include "ops/device_ops.h"
#include "runtime/device_kernels.h"

// The symbol the linker is told to resolve (ops/cuda/CMakeLists.txt).
extern "C" const char zs_ops_cuda_anchor = 0;

namespace zs::ops::cuda {
namespace {

void convert(const char* op, const Tensor& src, const Tensor& dst) {
  OpContext ctx(op, {&src, &dst});
  cast(src.raw_device_data(), src.dtype(), dst.raw_device_data(), dst.dtype(), src.numel(),
       ctx.stream());
}

detail::DeviceOps make_table() {
  detail::DeviceOps table;
  table.name = "cuda";
  table.convert = convert;
  fill_elementwise_entries(table);
  fill_nn_entries(table);
  fill_linear_entries(table);
  fill_attention_entries(table);
  return table;
}

const detail::DeviceOps kCudaOps = make_table();

const bool kRegistered = [] {
  DeviceTables<detail::DeviceOps>::install(Device::Kind::kCUDA, &kCudaOps);
  return true;
}();

}  // namespace
}  // namespace zs::ops::cuda
