// The ops' per-device kernel table: what an op does with tensors that are not on the CPU.
//
// The shape of ggml-backend's per-backend op table and of the runtime's own hook table
// (runtime/device_kernels.h): one DeviceOps entry per Device::Kind in DeviceTables<DeviceOps>,
// filled by the device's library when a program links it — on CUDA, ops/cuda/register.cc in
// zs_ops_cuda (its INTERFACE link option pulls that file in; see runtime/device_kernels.h,
// "Registration"). The CPU kernels are the ops' own code: CPU tensors never go through the table,
// as with the runtime's hooks. Shared op code asks device_ops() and never has an `#if` on a
// backend; without an entry (a build without CUDA) an op on such a tensor fails by name.
//
// Entries enqueue on the tensors' stream and return (ops/cuda/context.h); each checks that its
// tensors are on one device and stream, naming `op`.
//
// Internal to ops/ (namespace zs::ops::detail). Thread-safety: entries are immutable, static
// storage; the functions are as thread-safe as the ops that call them.
#pragma once

#include "runtime/tensor.h"

namespace zs::ops::detail {

struct DeviceOps {
  const char* name = "";  // "cuda", for messages
  // dst = src converted to dst's dtype (fp32/fp16/bf16, round to nearest even), src.numel()
  // elements: the device form of op_utils' fp32 staging (as_f32, store_f32).
  void (*convert)(const char* op, const Tensor& src, const Tensor& dst) = nullptr;
};

// The entry of `t`'s device kind (t not on the CPU); throws InvalidArgument naming `op`, the
// tensor and its device when this program has none.
const DeviceOps& device_ops(const Tensor& t, const char* op);

}  // namespace zs::ops::detail
