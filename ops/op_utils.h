// Helpers shared by the CPU op implementations: argument checks with clear messages, output
// allocation, and fp32 staging for fp16/bf16 tensors (compute is fp32; storage may be 16-bit).
//
// Internal to ops/ (namespace zs::ops::detail); users call the op headers.
#pragma once

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

// Checks that `t` is defined, on the CPU, floating, and not released; names the op and argument.
void check_float_input(const char* op, const char* arg, const Tensor& t);
void check_same_dtype(const char* op, const Tensor& a, const Tensor& b);
void check_cpu(const char* op, const Tensor& t);

// The elements of `t` as fp32: `t` itself when it is fp32 (no copy), otherwise a converted
// workspace copy. The result does not require grad.
Tensor as_f32(const Tensor& t);

// Copies fp32 values into `dst` (any floating dtype), converting with round-to-nearest-even.
void store_f32(const Tensor& dst, const float* values);

// For a backward that computed `grad` in fp32: writes it into the sink (copy or add),
// converting to the sink's dtype.
void write_grad(GradSink& sink, const float* grad);

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
      break;
  }
  ZS_THROW(InvalidArgument, op, ": expected a floating dtype, got ", dtype_name(dtype));
}

}  // namespace zs::ops::detail
