// Shared op helpers: checks, allocation, fp32 staging; device forms through the ops' device
// table (ops/device_ops.h).
#include "ops/op_utils.h"

#include <cstring>

#include "ops/device_ops.h"
#include "runtime/device_kernels.h"
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

const DeviceOps& device_ops(const Tensor& t, const char* op) {
  const DeviceOps* ops =
      t.device().is_cpu() ? nullptr : DeviceTables<DeviceOps>::find(t.device().kind);
  ZS_CHECK(ops != nullptr, op, ": tensor ", t.describe(), " is on ", t.device().str(),
           ", but this build has no ", t.device().str(),
           " backend for the ops; rebuild zeroshard with -DZS_CUDA=ON on a machine with the CUDA "
           "toolkit (the program then links zs_ops_cuda through zs_ops), or copy the tensor to "
           "the CPU");
  return *ops;
}

void check_supported_device(const char* op, const Tensor& t) {
  if (!t.device().is_cpu()) (void)device_ops(t, op);
}

void check_float_input(const char* op, const char* arg, const Tensor& t) {
  ZS_CHECK(t.defined(), op, ": argument '", arg, "' is undefined");
  check_supported_device(op, t);
  ZS_CHECK(is_floating(t.dtype()), op, ": argument '", arg, "' ", t.describe(),
           " must be fp32, fp16 or bf16");
  if (t.is_released()) (void)t.raw_data();  // throws ReleasedTensor naming the tensor
}

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  ZS_CHECK(a.dtype() == b.dtype(), op, ": dtypes differ: ", a.describe(), " vs ", b.describe(),
           "; cast one of them first");
}

void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (t == nullptr || !t->defined()) continue;
    if (first == nullptr) {
      first = t;
      continue;
    }
    ZS_CHECK(t->device() == first->device(), op, ": ", first->describe(), " is on ",
             first->device().str(), " but ", t->describe(), " is on ", t->device().str(),
             "; every tensor of an op must be on one device (copy one of them over first)");
  }
}

Tensor new_index_flag(const Tensor& like, int64_t entries, const char* what) {
  ZS_CHECK(entries <= kNoBadIndex, what, ": ", entries, " entries, but at most ", kNoBadIndex,
           " can be checked on the device (the flag's \"none\" value is ", kNoBadIndex, ")");
  Tensor flag = Tensor::empty({1}, DType::kI32, like.allocator(), MemoryCategory::kWorkspace, what);
  flag.fill(static_cast<float>(kNoBadIndex));  // exact: kNoBadIndex is a float
  return flag;
}

std::vector<int32_t> read_int32(const Tensor& t) {
  t.check_dtype(DType::kI32);
  // Not Tensor::to_vector: that converts to float, which is not exact above 2^24.
  std::vector<int32_t> values(static_cast<size_t>(t.numel()));
  t.copy_to_host(values.data());
  return values;
}

int32_t read_int32_at(const Tensor& t, int64_t flat_index) {
  t.check_dtype(DType::kI32);
  ZS_CHECK(flat_index >= 0 && flat_index < t.numel(), "read_int32_at: index ", flat_index,
           " is outside ", t.describe());
  // A one-element tensor on the same storage (no autograd: a plain read).
  const Tensor element =
      Tensor::from_storage(t.storage(), t.offset_bytes() + static_cast<size_t>(flat_index) * 4, {1},
                           DType::kI32, t.name());
  return read_int32(element)[0];
}

Tensor as_f32(const Tensor& t) {
  if (t.dtype() == DType::kF32) return t.detach();
  if (!t.device().is_cpu()) {
    ZS_CHECK(is_floating(t.dtype()), "as_f32: ", t.describe(), " on ", t.device().str(),
             " must be fp16 or bf16 to convert on the device");
    Tensor out = new_workspace(t.shape(), t, "fp32 staging");
    device_ops(t, "as_f32").convert("as_f32", t, out);
    return out;
  }
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
    case DType::kI64:
      ZS_THROW(InvalidArgument, "as_f32: ", t.describe(), " is int64, which no op computes in");
    case DType::kF32:
      break;
  }
  return out;
}

void store_f32(const Tensor& dst, const float* values) {
  check_cpu("store_f32", dst);
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
    case DType::kI64:
      ZS_THROW(InvalidArgument, "store_f32 into integer tensor ", dst.describe());
  }
}

void store_f32(const Tensor& dst, const Tensor& values) {
  ZS_CHECK(values.dtype() == DType::kF32 && values.numel() == dst.numel(),
           "store_f32: ", values.describe(), " must be fp32 with the ", dst.numel(),
           " elements of ", dst.describe());
  check_same_device("store_f32", {&dst, &values});
  if (!dst.device().is_cpu()) {
    ZS_CHECK(is_floating(dst.dtype()), "store_f32 into ", dst.describe());
    device_ops(dst, "store_f32").convert("store_f32", values, dst);
    return;
  }
  store_f32(dst, values.data<float>());
}

void write_grad(GradSink& sink, const Tensor& grad) {
  if (!sink) return;
  if (!sink.buffer.device().is_cpu()) {
    // Adds in fp32 and rounds once to the sink's dtype (accumulate_into's device hook), or
    // converts: the CPU path's arithmetic below, on the sink's stream.
    if (sink.accumulate) {
      accumulate_into(sink.buffer, grad);
    } else {
      store_f32(sink.buffer, grad);
    }
    return;
  }
  write_grad(sink, grad.data<float>());
}

void write_grad(GradSink& sink, const float* grad) {
  if (!sink) return;
  check_cpu("write_grad", sink.buffer);
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
  if (staged.staged) write_grad(sink, staged.buffer);
}

}  // namespace zs::ops::detail
