// Helpers shared by the op implementations: argument checks with clear messages, output
// allocation, and fp32 staging for fp16/bf16 tensors (compute is fp32; storage may be 16-bit).
//
// Devices: an op on tensors that are not on the CPU (cuda:N, built with ZS_CUDA) calls its
// device's kernels from the ops' device table (ops/device_ops.h) in place of its CPU loops, with
// the same checks, outputs and autograd record; no op file has an `#if` on a backend. The helpers
// that take Tensors (new_output, new_workspace, as_f32, the Tensor forms of store_f32 and
// write_grad, f32_grad_buffer, finish_grad) work on either device: on a device they run on the
// tensors' allocator stream (ops/cuda/context.h), enqueue and return. The raw-pointer forms are
// CPU only.
//
// Internal to ops/ (namespace zs::ops::detail); users call the op headers.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "runtime/autograd.h"
#include "runtime/half.h"
#include "runtime/tensor.h"

namespace zs::ops::detail {

// Outputs go to the thread's current memory category, or to activations outside any scope.
MemoryCategory output_category();

// A new output tensor on the allocator of `like`.
Tensor new_output(const Shape& shape, DType dtype, const Tensor& like, const char* op);

// A fp32 workspace tensor (category workspace) on the allocator of `like`.
Tensor new_workspace(const Shape& shape, const Tensor& like, const char* what);

// Checks that `t` is defined, on a device the ops support (the CPU; CUDA too in a CUDA build),
// floating, and not released; names the op and argument.
void check_float_input(const char* op, const char* arg, const Tensor& t);
void check_same_dtype(const char* op, const Tensor& a, const Tensor& b);
void check_cpu(const char* op, const Tensor& t);
// Checks that every defined tensor is on the device of the first defined one (a CPU tensor
// mixed with a CUDA one, or two GPUs, is refused naming the op and both tensors).
void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors);
// Checks that `t` is on a device the ops support (the CPU; CUDA too in a CUDA build), naming the
// op: for the integer arguments (targets, ids, lengths), whose dtype each op checks itself.
void check_supported_device(const char* op, const Tensor& t);
// True for a tensor that is not on the CPU: the op calls its device's kernels
// (device_ops(), ops/device_ops.h) in place of its CPU loops. check_float_input and
// check_supported_device made sure this program has them.
inline bool on_device(const Tensor& t) { return t.defined() && !t.device().is_cpu(); }

// Data errors found on a device (ops/cuda/nn_kernels.h: a launcher records the first offending
// row / position / sequence in a device int32 flag with atomicMin). kNoBadIndex is the flag's
// "nothing found" value: the largest float below 2^31 (the device fill takes a float), above any
// index an op flags (the launchers take at most 2^31 - 1 entries; new_index_flag checks that).
inline constexpr int32_t kNoBadIndex = 2147483520;
// An int32 [1] workspace on `like`'s allocator holding kNoBadIndex (enqueued, on a device, on the
// allocator's stream), for a launcher that flags one of `entries` entries.
Tensor new_index_flag(const Tensor& like, int64_t entries, const char* what);
// The int32 elements of `t` (any device), exactly. On a device this is a synchronous download on
// the tensor's allocator stream: the host waits for the work enqueued there (a host sync).
std::vector<int32_t> read_int32(const Tensor& t);
// Element `flat_index` of the int32 tensor `t`, the same way (one 4-byte download on a device):
// for naming an offending value in an error message.
int32_t read_int32_at(const Tensor& t, int64_t flat_index);

// The elements of `t` as fp32: `t` itself when it is fp32 (no copy), otherwise a converted
// workspace copy. The result does not require grad.
Tensor as_f32(const Tensor& t);

// Copies fp32 values into `dst` (any floating dtype), converting with round-to-nearest-even.
// The pointer form is for CPU tensors; the Tensor form (`values` fp32, dst's element count, on
// dst's device) for either device.
void store_f32(const Tensor& dst, const float* values);
void store_f32(const Tensor& dst, const Tensor& values);

// For a backward that computed `grad` in fp32: writes it into the sink (copy or add),
// converting to the sink's dtype. Pointer form: CPU sinks; Tensor form: either device.
void write_grad(GradSink& sink, const float* grad);
void write_grad(GradSink& sink, const Tensor& grad);

// A fp32 buffer for the backward of an input whose sink may be 16-bit or accumulating:
// if the sink is fp32 it is used in place (accumulate tells the kernel to add), otherwise
// an uninitialized fp32 workspace is returned (accumulate = false: the kernel overwrites it) and
// finish_grad() must be called to write it out.
struct F32GradBuffer {
  Tensor buffer;            // fp32
  bool accumulate = false;  // kernel adds into buffer (true) or overwrites (false)
  bool staged = false;      // buffer is a workspace that finish_grad() writes to the sink
};
F32GradBuffer f32_grad_buffer(GradSink& sink, const Tensor& like);
void finish_grad(GradSink& sink, F32GradBuffer& staged);

// Calls fn(T{}) with T the storage type (float, Half, BFloat16) of a floating dtype; throws
// InvalidArgument naming `op` for int32.
template <typename Fn>
void visit_float_dtype(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      fn(float{});
      return;
    case DType::kF16:
      fn(Half{});
      return;
    case DType::kBF16:
      fn(BFloat16{});
      return;
    case DType::kI32:
    case DType::kI64:
      break;
  }
  ZS_THROW(InvalidArgument, op, ": expected a floating dtype, got ", dtype_name(dtype));
}

}  // namespace zs::ops::detail
