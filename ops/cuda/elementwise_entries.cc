// The CUDA entries of ops/elementwise.cc (ops/device_ops.h): the ops/cuda/kernels.h and
// tensor_kernels.h launchers on the stream of the tensors' allocator (ops/cuda/context.h). Each
// kernel reads one storage dtype, so every floating operand of a call has the same dtype: the
// forward inputs are checked by the op, an output gradient has its output's dtype and a gradient
// sink its input's (Tensor::set_grad checks that); check_kernel_dtypes says so by name if that
// ever does not hold.
//
// Thread-safety: no state; each call runs on its tensors' stream.
#include <initializer_list>

#include "ops/cuda/context.h"
#include "ops/cuda/device_entries.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/tensor_kernels.h"
#include "ops/math/elementwise.h"

namespace zs::ops::cuda {
namespace {

// The reductions reproduce the CPU's block layout (ops/elementwise.cc reduce_sum).
static_assert(kReduceChunk == math::kReduceChunk && kReduceLanes == math::kReduceLanes,
              "the CUDA reductions must use the CPU's block layout to match it bit for bit");

void check_kernel_dtypes(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = *tensors.begin();
  for (const Tensor* t : tensors) {
    ZS_CHECK(t->dtype() == first->dtype(), op, " on ", first->device().str(), ": ", t->describe(),
             " and ", first->describe(),
             " must share a dtype (the CUDA kernels read one storage type)");
  }
}

void add_entry(const Tensor& a, const Tensor& b, const Tensor& y) {
  OpContext ctx("add", {&a, &b, &y});
  add(a.raw_device_data(), b.raw_device_data(), y.raw_device_data(), a.numel(), a.dtype(),
      ctx.stream());
}

void add_bias_entry(const Tensor& x, const Tensor& bias, const Tensor& y, int64_t rows,
                    int64_t cols) {
  OpContext ctx("add_bias", {&x, &bias, &y});
  add_bias(x.raw_device_data(), bias.raw_device_data(), y.raw_device_data(), rows, cols, x.dtype(),
           ctx.stream());
}

void bias_column_sums_entry(const Tensor& dy, const Tensor& dst, int64_t rows, int64_t cols,
                            bool accumulate) {
  OpContext ctx("add_bias", {&dy, &dst});
  check_kernel_dtypes("add_bias", {&dy, &dst});
  column_sums_f64(dy.raw_device_data(), dst.raw_device_data(), rows, cols, accumulate, dy.dtype(),
                  ctx.stream());
}

void scale_entry(const Tensor& x, const Tensor& dst, float alpha, bool accumulate) {
  OpContext ctx("scale", {&x, &dst});
  check_kernel_dtypes("scale", {&x, &dst});
  scale(x.raw_device_data(), dst.raw_device_data(), alpha, accumulate, x.numel(), x.dtype(),
        ctx.stream());
}

void scale_inplace_entry(const Tensor& x, float alpha) {
  OpContext ctx("scale_", {&x});
  scale_inplace(x.raw_device_data(), alpha, x.numel(), x.dtype(), ctx.stream());
}

void mul_entry(const Tensor& a, const Tensor& b, const Tensor& y) {
  OpContext ctx("mul", {&a, &b, &y});
  mul(a.raw_device_data(), b.raw_device_data(), y.raw_device_data(), a.numel(), a.dtype(),
      ctx.stream());
}

void mul_backward_entry(const Tensor& other, const Tensor& dy, const Tensor& dst, bool accumulate) {
  OpContext ctx("mul", {&dy, &other, &dst});
  check_kernel_dtypes("mul", {&other, &dy, &dst});
  mul_backward(other.raw_device_data(), dy.raw_device_data(), dst.raw_device_data(), accumulate,
               dy.numel(), dy.dtype(), ctx.stream());
}

void tanh_forward_entry(const Tensor& x, const Tensor& y) {
  OpContext ctx("tanh", {&x, &y});
  tanh_forward(x.raw_device_data(), y.raw_device_data(), x.numel(), x.dtype(), ctx.stream());
}

void tanh_backward_entry(const Tensor& y, const Tensor& dy, const Tensor& dst, bool accumulate) {
  OpContext ctx("tanh", {&y, &dy, &dst});
  check_kernel_dtypes("tanh", {&y, &dy, &dst});
  tanh_backward(y.raw_device_data(), dy.raw_device_data(), dst.raw_device_data(), accumulate,
                dy.numel(), dy.dtype(), ctx.stream());
}

void dropout_entry(const Tensor& src, const Tensor& dst, bool accumulate, const RngKey& key,
                   float keep_prob) {
  OpContext ctx("dropout", {&src, &dst});
  check_kernel_dtypes("dropout", {&src, &dst});
  dropout(src.raw_device_data(), dst.raw_device_data(), accumulate, src.numel(), key, keep_prob,
          math::dropout_scale(keep_prob), src.dtype(), ctx.stream());
}

void reduce_sum_entry(const char* op, const Tensor& x, detail::SumTerm term, double divisor,
                      const Tensor& y) {
  OpContext ctx(op, {&x, &y});
  // Doubles in a fp32 workspace (2 floats each); the allocation is 256-byte aligned.
  const int64_t doubles = reduce_workspace_doubles(x.numel());
  Tensor chunk_sums = Tensor::empty({2 * doubles}, DType::kF32, x.allocator(),
                                    MemoryCategory::kWorkspace, "reduction chunk sums");
  reduce_sum(x.raw_device_data(), x.numel(), x.dtype(),
             term == detail::SumTerm::kSquare ? ReduceTerm::kSumOfSquares : ReduceTerm::kSum,
             divisor, static_cast<double*>(chunk_sums.raw_device_data()), y.device_data<float>(),
             ctx.stream());
}

void fill_from_scalar_entry(const char* op, const Tensor& scalar, double divisor, const Tensor& dst,
                            bool accumulate) {
  OpContext ctx(op, {&scalar, &dst});
  fill_from_scalar(dst.raw_device_data(), scalar.device_data<float>(), divisor, accumulate,
                   dst.numel(), dst.dtype(), ctx.stream());
}

void sum_of_squares_backward_entry(const Tensor& x, const Tensor& dy, const Tensor& dst,
                                   bool accumulate) {
  OpContext ctx("sum_of_squares", {&x, &dy, &dst});
  check_kernel_dtypes("sum_of_squares", {&x, &dst});
  sum_of_squares_backward(x.raw_device_data(), dy.device_data<float>(), dst.raw_device_data(),
                          accumulate, x.numel(), x.dtype(), ctx.stream());
}

void fill_entry(const Tensor& x, float value) {
  OpContext ctx("fill_", {&x});
  fill(x.raw_device_data(), value, false, x.numel(), x.dtype(), ctx.stream());
}

bool all_finite_entry(const Tensor& x) {
  OpContext ctx("all_finite", {&x});
  if (x.numel() == 0) return true;
  Tensor flag =
      Tensor::empty({1}, DType::kI32, x.allocator(), MemoryCategory::kWorkspace, "all_finite flag");
  return all_finite(x.raw_device_data(), x.numel(), x.dtype(), flag.device_data<int32_t>(),
                    ctx.stream());
}

}  // namespace

void fill_elementwise_entries(detail::DeviceOps& table) {
  table.add = add_entry;
  table.add_bias = add_bias_entry;
  table.bias_column_sums = bias_column_sums_entry;
  table.scale = scale_entry;
  table.scale_inplace = scale_inplace_entry;
  table.mul = mul_entry;
  table.mul_backward = mul_backward_entry;
  table.tanh_forward = tanh_forward_entry;
  table.tanh_backward = tanh_backward_entry;
  table.dropout = dropout_entry;
  table.reduce_sum = reduce_sum_entry;
  table.fill_from_scalar = fill_from_scalar_entry;
  table.sum_of_squares_backward = sum_of_squares_backward_entry;
  table.fill = fill_entry;
  table.all_finite = all_finite_entry;
}

}  // namespace zs::ops::cuda
