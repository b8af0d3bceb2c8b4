// Shared CPU op helpers: checks, allocation, fp32 staging.
#include "ops/op_utils.h"

#include <cstring>

#include "runtime/half.h"

namespace zs::ops::detail {

MemoryCategory output_category() {
  MemoryCategory current = current_memory_category();
  return current == MemoryCategory::kOther ? MemoryCategory::kActivations : current;
}

Tensor new_output(const Shape& shape, DType dtype, const Tensor& like, const char* op) {
  return Tensor::empty(shape, dtype, like.allocator(), output_category(), op);
}

Tensor new_workspace(const Shape& shape, const Tensor& like, const char* what) {
  return Tensor::empty(shape, DType::kF32, like.allocator(), MemoryCategory::kWorkspace, what);
}

void check_cpu(const char* op, const Tensor& t) {
  ZS_CHECK(t.device().is_cpu(), op, ": tensor ", t.describe(), " is on ", t.device().str(),
           "; the CPU op needs CPU tensors");
}

void check_float_input(const char* op, const char* arg, const Tensor& t) {
  ZS_CHECK(t.defined(), op, ": argument '", arg, "' is undefined");
  check_cpu(op, t);
  ZS_CHECK(is_floating(t.dtype()), op, ": argument '", arg, "' ", t.describe(),
           " must be fp32, fp16 or bf16");
  if (t.is_released()) (void)t.raw_data();  // throws ReleasedTensor naming the tensor
}

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  ZS_CHECK(a.dtype() == b.dtype(), op, ": dtypes differ: ", a.describe(), " vs ", b.describe(),
           "; cast one of them first");
}

Tensor as_f32(const Tensor& t) {
  if (t.dtype() == DType::kF32) return t.detach();
  Tensor out = new_workspace(t.shape(), t, "fp32 staging");
  const size_t n = static_cast<size_t>(t.numel());
  switch (t.dtype()) {
    case DType::kF16:
      f16_to_f32(static_cast<const uint16_t*>(t.raw_data()), out.data<float>(), n);
      break;
    case DType::kBF16:
      bf16_to_f32(static_cast<const uint16_t*>(t.raw_data()), out.data<float>(), n);
      break;
    case DType::kI32: {
      const int32_t* src = t.data<int32_t>();
      float* dst = out.data<float>();
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
      break;
    }
    case DType::kF32:
      break;
  }
  return out;
}

void store_f32(const Tensor& dst, const float* values) {
  const size_t n = static_cast<size_t>(dst.numel());
  switch (dst.dtype()) {
    case DType::kF32:
      std::memcpy(dst.raw_data(), values, n * sizeof(float));
      break;
    case DType::kF16:
      f32_to_f16(values, static_cast<uint16_t*>(dst.raw_data()), n);
      break;
    case DType::kBF16:
      f32_to_bf16(values, static_cast<uint16_t*>(dst.raw_data()), n);
      break;
    case DType::kI32:
      ZS_THROW(InvalidArgument, "store_f32 into int32 tensor ", dst.describe());
  }
}

void write_grad(GradSink& sink, const float* grad) {
  if (!sink) return;
  const size_t n = static_cast<size_t>(sink.buffer.numel());
  if (sink.buffer.dtype() == DType::kF32) {
    float* dst = sink.buffer.data<float>();
    if (sink.accumulate) {
      for (size_t i = 0; i < n; ++i) dst[i] += grad[i];
    } else {
      std::memcpy(dst, grad, n * sizeof(float));
    }
    return;
  }
  if (!sink.accumulate) {
    store_f32(sink.buffer, grad);
    return;
  }
  std::vector<float> sum = sink.buffer.to_vector();
  for (size_t i = 0; i < n; ++i) sum[i] += grad[i];
  store_f32(sink.buffer, sum.data());
}

F32GradBuffer f32_grad_buffer(GradSink& sink, const Tensor& like) {
  F32GradBuffer out;
  if (sink.buffer.dtype() == DType::kF32) {
    out.buffer = sink.buffer;
    out.accumulate = sink.accumulate;
    return out;
  }
  out.buffer = new_workspace(sink.buffer.shape(), like, "fp32 gradient staging");
  out.accumulate = false;
  out.staged = true;
  return out;
}

void finish_grad(GradSink& sink, F32GradBuffer& staged) {
  if (staged.staged) write_grad(sink, staged.buffer.data<float>());
}

}  // namespace zs::ops::detail
