// The pieces of the CUDA entry of the ops' device table (ops/device_ops.h): each file of
// ops/cuda/*_entries.cc fills the entries of one group of ops, and register.cc assembles the
// table from them once, at static initialization.
//
// Each entry is a thin adapter: it checks its tensors' device and stream (OpContext, naming the
// op), takes their device pointers and dtypes, and calls the launchers of ops/cuda/kernels.h,
// tensor_kernels.h, nn_kernels.h and gemm.h. The shared op has already allocated every output,
// workspace and gradient buffer and records the autograd node: an entry only computes.
//
// Internal to zs_ops_cuda. Thread-safety: the fill functions write the table they are given.
#pragma once

#include "ops/device_ops.h"

namespace zs::ops::cuda {

void fill_elementwise_entries(detail::DeviceOps& table);
void fill_nn_entries(detail::DeviceOps& table);  // also the shared check_tensors and copy_bytes
void fill_linear_entries(detail::DeviceOps& table);
void fill_attention_entries(detail::DeviceOps& table);

}  // namespace zs::ops::cuda
