// gelu: a thin OpenMP launcher around ops/math/gelu.h, forward and backward element-wise; on
// cuda:N the ops/cuda/kernels.h launchers around the same functions.
#include "ops/gelu.h"

#include "ops/math/gelu.h"
#include "ops/op_utils.h"
#include "runtime/half.h"

#if ZS_HAVE_CUDA
#include "ops/cuda/context.h"
#include "ops/cuda/kernels.h"
#endif

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

#if ZS_HAVE_CUDA
// On the stream of x's allocator; backward reads dy as fp32 (converted when 16-bit), as the CPU.
Tensor gelu_cuda(const Tensor& x) {
  cuda::OpContext ctx(kOp, {&x});
  Tensor y = detail::new_output(x.shape(), x.dtype(), x, kOp);
  cuda::gelu_forward(x.raw_device_data(), y.raw_device_data(), x.numel(), x.dtype(), ctx.stream());
  if (needs_grad({&x})) {
    record_op(kOp, {&x}, {&y}, [x](BackwardContext& bctx) {
      Tensor dy_any = bctx.grad_output(0);
      GradSink sink = bctx.grad_input(0);
      if (!dy_any.defined() || !sink) return;
      cuda::OpContext ctx(kOp, {&x, &dy_any, &sink.buffer});
      Tensor dy32 = detail::as_f32(dy_any);
      cuda::gelu_backward(x.raw_device_data(), dy32.device_data<float>(),
                          sink.buffer.raw_device_data(), x.numel(), x.dtype(), sink.buffer.dtype(),
                          sink.accumulate, ctx.stream());
    });
  }
  return y;
}
#endif

}  // namespace

Tensor gelu(const Tensor& x) {
  detail::check_float_input(kOp, "x", x);
#if ZS_HAVE_CUDA
  if (detail::on_cuda(x)) return gelu_cuda(x);
#endif
  Tensor y = detail::new_output(x.shape(), x.dtype(), x, kOp);
  const int64_t n = x.numel();
  const bool parallel = n >= kParallelMinElements;
  detail::visit_float_dtype(x.dtype(), kOp, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t i = 0; i < n; ++i) yp[i] = T(math::gelu_forward(static_cast<float>(xp[i])));
  });
  if (needs_grad({&x})) {
    record_op(kOp, {&x}, {&y}, [x](BackwardContext& ctx) { backward(x, ctx); });
  }
  return y;
}

}  // namespace zs::ops
