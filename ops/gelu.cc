// gelu: a thin OpenMP launcher around ops/math/gelu.h, forward and backward element-wise; on a
// device (cuda:N) its kernels around the same functions (ops/device_ops.h), with the same
// autograd record and the same fp32 staging of the upstream gradient.
#include "ops/gelu.h"

#include "ops/device_ops.h"
#include "ops/math/gelu.h"
#include "ops/op_utils.h"
#include "runtime/half.h"

namespace zs::ops {
namespace {

constexpr const char* kOp = "gelu";
// Below this many elements the loops run on the calling thread (same results either way).
constexpr int64_t kParallelMinElements = 1 << 15;

void backward(const Tensor& x, BackwardContext& ctx) {
  Tensor dy_any = ctx.grad_output(0);
  GradSink sink = ctx.grad_input(0);
  if (!dy_any.defined() || !sink) return;
  Tensor dy32 = detail::as_f32(dy_any);  // a converted workspace copy when 16-bit
  if (detail::on_device(x)) {
    return detail::device_ops(x, kOp).gelu_backward(x, dy32, sink.buffer, sink.accumulate);
  }
  const float* dy = dy32.data<float>();
  const int64_t n = x.numel();
  const bool parallel = n >= kParallelMinElements;
  const bool accumulate = sink.accumulate;
  detail::visit_float_dtype(x.dtype(), kOp, [&](auto x_tag) {
    using T = decltype(x_tag);
    const T* xp = x.data<T>();
    detail::visit_float_dtype(sink.buffer.dtype(), kOp, [&](auto sink_tag) {
      using S = decltype(sink_tag);
      S* dx = sink.buffer.data<S>();
#pragma omp parallel for schedule(static) if (parallel)
      for (int64_t i = 0; i < n; ++i) {
        const float value = math::gelu_backward(static_cast<float>(xp[i]), dy[i]);
        dx[i] = accumulate ? S(static_cast<float>(dx[i]) + value) : S(value);
      }
    });
  });
}

}  // namespace

Tensor gelu(const Tensor& x) {
  detail::check_float_input(kOp, "x", x);
  Tensor y = detail::new_output(x.shape(), x.dtype(), x, kOp);
  if (detail::on_device(x)) {
    detail::device_ops(x, kOp).gelu_forward(x, y);
  } else {
    const int64_t n = x.numel();
    const bool parallel = n >= kParallelMinElements;
    detail::visit_float_dtype(x.dtype(), kOp, [&](auto tag) {
      using T = decltype(tag);
      const T* xp = x.data<T>();
      T* yp = y.data<T>();
#pragma omp parallel for schedule(static) if (parallel)
      for (int64_t i = 0; i < n; ++i) yp[i] = T(math::gelu_forward(static_cast<float>(xp[i])));
    });
  }
  if (needs_grad({&x})) {
    record_op(kOp, {&x}, {&y}, [x](BackwardContext& ctx) { backward(x, ctx); });
  }
  return y;
}

}  // namespace zs::ops
