// linear and matmul: forward and backward as GEMMs on fp32 data.
//
// Backward of y = x·W^T + b: dx = dy·W (M×K), dW = dy^T·x (N×K), db = Σ_rows dy. Each GEMM
// writes straight into the gradient sink with beta = 1 when accumulating (no temporary) when
// the sink is fp32.
//
// On cuda:N the same GEMMs run through cuBLAS (ops/cuda/gemm.h, fp32 accumulation, TF32 off) on
// the stream of the inputs' allocator, with the calling thread's handle for that stream
// (ops/cuda/context.h). fp16/bf16 operands go to cuBLAS as they are (products of 16-bit values
// are exact in fp32, so this is the CPU's math up to summation order) and the result is written
// as fp32 and rounded once, as on the CPU. The bias is broadcast into the fp32 output before a
// beta = 1 GEMM, and its gradient is summed in fp32 in row order exactly as bias_grad below.
#include "ops/linear.h"

#include <algorithm>

#include "ops/cpu/gemm.h"
#include "ops/op_utils.h"

#if ZS_HAVE_CUDA
#include "ops/cuda/context.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/tensor_kernels.h"
#endif

namespace zs::ops {

using detail::as_f32;
using detail::f32_grad_buffer;
using detail::finish_grad;

namespace {

// Rows of dy summed into db (fp32), adding when `accumulate`.
void bias_grad(const float* dy, int64_t rows, int64_t cols, float* db, bool accumulate) {
  if (!accumulate) {
    for (int64_t j = 0; j < cols; ++j) db[j] = 0.0f;
  }
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = dy + i * cols;
    for (int64_t j = 0; j < cols; ++j) db[j] += row[j];
  }
}

#if ZS_HAVE_CUDA
// A gradient GEMM's operands must share a dtype: the output gradient has the output's dtype, which
// is the inputs' (a gradient of another dtype would be a bug upstream; say so).
void check_grad_dtype(const char* op, const Tensor& dy, const Tensor& like) {
  ZS_CHECK(dy.dtype() == like.dtype(), op, ": output gradient ", dy.describe(),
           " does not have the inputs' dtype ", dtype_name(like.dtype()));
}

// A leading dimension for cuBLAS, which wants at least 1 even for an empty matrix (the CPU's
// sgemm takes the row length as is).
int64_t ld(int64_t row_length) { return std::max<int64_t>(row_length, 1); }

// out32 (fp32, when `out` is 16-bit) is rounded into out.
void finish_output(const Tensor& out, const Tensor& out32) {
  if (out.dtype() != DType::kF32) detail::store_f32(out, out32);
}

Tensor linear_cuda(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t m, int64_t n,
                   int64_t k, const Shape& out_shape) {
  cuda::OpContext ctx("linear", {&x, &weight, &bias});
  Tensor y = detail::new_output(out_shape, x.dtype(), x, "linear");
  Tensor y32 =
      x.dtype() == DType::kF32 ? y : detail::new_workspace(out_shape, x, "linear fp32 out");
  float beta = 0.0f;
  if (bias.defined()) {
    cuda::broadcast_rows(bias.raw_device_data(), y32.device_data<float>(), m, n, bias.dtype(),
                         ctx.stream());
    beta = 1.0f;
  }
  cuda::gemm(ctx.cublas(), false, true, m, n, k, 1.0f, x.raw_device_data(), ld(k),
             weight.raw_device_data(), ld(k), beta, y32.raw_device_data(), ld(n), x.dtype(),
             DType::kF32);
  finish_output(y, y32);

  if (needs_grad({&x, &weight, &bias})) {
    record_op("linear", {&x, &weight, &bias}, {&y}, [x, weight, m, n, k](BackwardContext& bctx) {
      Tensor dy = bctx.grad_output(0);
      if (!dy.defined()) return;
      cuda::OpContext ctx("linear", {&dy, &x, &weight});
      check_grad_dtype("linear", dy, x);
      const DType dtype = x.dtype();
      if (GradSink sink = bctx.grad_input(0)) {
        ctx.check(sink.buffer);
        auto dx = f32_grad_buffer(sink, dy);
        cuda::gemm(ctx.cublas(), false, false, m, k, n, 1.0f, dy.raw_device_data(), ld(n),
                   weight.raw_device_data(), ld(k), dx.accumulate ? 1.0f : 0.0f,
                   dx.buffer.raw_device_data(), ld(k), dtype, DType::kF32);
        finish_grad(sink, dx);
      }
      if (GradSink sink = bctx.grad_input(1)) {
        ctx.check(sink.buffer);
        auto dw = f32_grad_buffer(sink, dy);
        cuda::gemm(ctx.cublas(), true, false, n, k, m, 1.0f, dy.raw_device_data(), ld(n),
                   x.raw_device_data(), ld(k), dw.accumulate ? 1.0f : 0.0f,
                   dw.buffer.raw_device_data(), ld(k), dtype, DType::kF32);
        finish_grad(sink, dw);
      }
      if (GradSink sink = bctx.grad_input(2)) {
        ctx.check(sink.buffer);
        auto db = f32_grad_buffer(sink, dy);
        cuda::column_sums_f32(dy.raw_device_data(), db.buffer.device_data<float>(), m, n,
                              db.accumulate, dy.dtype(), ctx.stream());
        finish_grad(sink, db);
      }
    });
  }
  return y;
}

Tensor matmul_cuda(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, int64_t m,
                   int64_t n, int64_t k) {
  cuda::OpContext ctx("matmul", {&a, &b});
  Tensor c = detail::new_output({m, n}, a.dtype(), a, "matmul");
  Tensor c32 = a.dtype() == DType::kF32 ? c : detail::new_workspace({m, n}, a, "matmul fp32 out");
  cuda::gemm(ctx.cublas(), trans_a, trans_b, m, n, k, 1.0f, a.raw_device_data(), ld(a.size(1)),
             b.raw_device_data(), ld(b.size(1)), 0.0f, c32.raw_device_data(), ld(n), a.dtype(),
             DType::kF32);
  finish_output(c, c32);

  if (needs_grad({&a, &b})) {
    record_op("matmul", {&a, &b}, {&c}, [a, b, trans_a, trans_b, m, n, k](BackwardContext& bctx) {
      Tensor dc = bctx.grad_output(0);
      if (!dc.defined()) return;
      cuda::OpContext ctx("matmul", {&dc, &a, &b});
      check_grad_dtype("matmul", dc, a);
      const DType dtype = a.dtype();
      cuda::CublasHandle& handle = ctx.cublas();
      // The CPU backward's GEMMs (see matmul below), operand for operand.
      if (GradSink sink = bctx.grad_input(0)) {
        ctx.check(sink.buffer);
        auto da = f32_grad_buffer(sink, dc);
        const float beta = da.accumulate ? 1.0f : 0.0f;
        if (!trans_a) {
          cuda::gemm(handle, false, !trans_b, m, k, n, 1.0f, dc.raw_device_data(), ld(n),
                     b.raw_device_data(), ld(b.size(1)), beta, da.buffer.raw_device_data(), ld(k),
                     dtype, DType::kF32);
        } else {
          cuda::gemm(handle, trans_b, true, k, m, n, 1.0f, b.raw_device_data(), ld(b.size(1)),
                     dc.raw_device_data(), ld(n), beta, da.buffer.raw_device_data(), ld(m), dtype,
                     DType::kF32);
        }
        finish_grad(sink, da);
      }
      if (GradSink sink = bctx.grad_input(1)) {
        ctx.check(sink.buffer);
        auto db = f32_grad_buffer(sink, dc);
        const float beta = db.accumulate ? 1.0f : 0.0f;
        if (!trans_b) {
          cuda::gemm(handle, !trans_a, false, k, n, m, 1.0f, a.raw_device_data(), ld(a.size(1)),
                     dc.raw_device_data(), ld(n), beta, db.buffer.raw_device_data(), ld(n), dtype,
                     DType::kF32);
        } else {
          cuda::gemm(handle, true, trans_a, n, k, m, 1.0f, dc.raw_device_data(), ld(n),
                     a.raw_device_data(), ld(a.size(1)), beta, db.buffer.raw_device_data(), ld(k),
                     dtype, DType::kF32);
        }
        finish_grad(sink, db);
      }
    });
  }
  return c;
}
#endif

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  detail::check_float_input("linear", "x", x);
  detail::check_float_input("linear", "weight", weight);
  ZS_CHECK(x.dim() >= 1, "linear: x ", x.describe(), " needs at least one dimension");
  ZS_CHECK(weight.dim() == 2, "linear: weight ", weight.describe(),
           " must be 2-D [out_features, in_features]");
  const int64_t k = x.size(-1);
  const int64_t n = weight.size(0);
  ZS_CHECK(weight.size(1) == k, "linear: x ", x.describe(), " has ", k,
           " input features but weight ", weight.describe(), " expects ", weight.size(1));
  detail::check_same_dtype("linear", x, weight);
  if (bias.defined()) {
    detail::check_float_input("linear", "bias", bias);
    ZS_CHECK(bias.dim() == 1 && bias.size(0) == n, "linear: bias ", bias.describe(), " must be [",
             n, "] to match weight ", weight.describe());
    detail::check_same_dtype("linear", x, bias);
  }
  detail::check_same_device("linear", {&x, &weight, &bias});
  const int64_t m = x.numel() / std::max<int64_t>(k, 1);
  Shape out_shape = x.shape();
  out_shape.back() = n;
#if ZS_HAVE_CUDA
  if (detail::on_cuda(x)) return linear_cuda(x, weight, bias, m, n, k, out_shape);
#endif
  Tensor y = detail::new_output(out_shape, x.dtype(), x, "linear");

  Tensor x32 = as_f32(x);
  Tensor w32 = as_f32(weight);
  Tensor y32 =
      x.dtype() == DType::kF32 ? y : detail::new_workspace(out_shape, x, "linear fp32 out");
  float* yp = y32.data<float>();
  float beta = 0.0f;
  if (bias.defined()) {
    Tensor b32 = as_f32(bias);
    const float* bp = b32.data<float>();
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) yp[i * n + j] = bp[j];
    }
    beta = 1.0f;
  }
  cpu::sgemm(false, true, m, n, k, 1.0f, x32.data<float>(), k, w32.data<float>(), k, beta, yp, n);
  if (x.dtype() != DType::kF32) detail::store_f32(y, yp);

  if (needs_grad({&x, &weight, &bias})) {
    // Save the inputs (handles share storage: no copy).
    record_op("linear", {&x, &weight, &bias}, {&y}, [x, weight, m, n, k](BackwardContext& ctx) {
      Tensor dy = ctx.grad_output(0);
      Tensor dy32 = as_f32(dy);
      const float* dyp = dy32.data<float>();
      if (GradSink sink = ctx.grad_input(0)) {
        auto dx = f32_grad_buffer(sink, dy);
        Tensor w32 = as_f32(weight);
        cpu::sgemm(false, false, m, k, n, 1.0f, dyp, n, w32.data<float>(), k,
                   dx.accumulate ? 1.0f : 0.0f, dx.buffer.data<float>(), k);
        finish_grad(sink, dx);
      }
      if (GradSink sink = ctx.grad_input(1)) {
        auto dw = f32_grad_buffer(sink, dy);
        Tensor x32 = as_f32(x);
        cpu::sgemm(true, false, n, k, m, 1.0f, dyp, n, x32.data<float>(), k,
                   dw.accumulate ? 1.0f : 0.0f, dw.buffer.data<float>(), k);
        finish_grad(sink, dw);
      }
      if (GradSink sink = ctx.grad_input(2)) {
        auto db = f32_grad_buffer(sink, dy);
        bias_grad(dyp, m, n, db.buffer.data<float>(), db.accumulate);
        finish_grad(sink, db);
      }
    });
  }
  return y;
}

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  detail::check_float_input("matmul", "a", a);
  detail::check_float_input("matmul", "b", b);
  ZS_CHECK(a.dim() == 2 && b.dim() == 2, "matmul: needs 2-D tensors, got ", a.describe(), " and ",
           b.describe());
  detail::check_same_dtype("matmul", a, b);
  const int64_t m = trans_a ? a.size(1) : a.size(0);
  const int64_t k = trans_a ? a.size(0) : a.size(1);
  const int64_t kb = trans_b ? b.size(1) : b.size(0);
  const int64_t n = trans_b ? b.size(0) : b.size(1);
  ZS_CHECK(k == kb, "matmul: inner dimensions differ: op(a) is [", m, ", ", k, "] and op(b) is [",
           kb, ", ", n, "] (a ", a.describe(), ", b ", b.describe(), ")");
  detail::check_same_device("matmul", {&a, &b});
#if ZS_HAVE_CUDA
  if (detail::on_cuda(a)) return matmul_cuda(a, b, trans_a, trans_b, m, n, k);
#endif
  Tensor c = detail::new_output({m, n}, a.dtype(), a, "matmul");
  Tensor a32 = as_f32(a);
  Tensor b32 = as_f32(b);
  Tensor c32 = a.dtype() == DType::kF32 ? c : detail::new_workspace({m, n}, a, "matmul fp32 out");
  cpu::sgemm(trans_a, trans_b, m, n, k, 1.0f, a32.data<float>(), a.size(1), b32.data<float>(),
             b.size(1), 0.0f, c32.data<float>(), n);
  if (a.dtype() != DType::kF32) detail::store_f32(c, c32.data<float>());

  if (needs_grad({&a, &b})) {
    record_op("matmul", {&a, &b}, {&c}, [a, b, trans_a, trans_b, m, n, k](BackwardContext& ctx) {
      Tensor dc32 = as_f32(ctx.grad_output(0));
      const float* dc = dc32.data<float>();
      if (GradSink sink = ctx.grad_input(0)) {
        // op(a) = dc · op(b)^T; if trans_a, a = (dc · op(b)^T)^T = op(b) · dc^T.
        auto da = f32_grad_buffer(sink, dc32);
        Tensor b32 = as_f32(b);
        const float beta = da.accumulate ? 1.0f : 0.0f;
        if (!trans_a) {
          cpu::sgemm(false, !trans_b, m, k, n, 1.0f, dc, n, b32.data<float>(), b.size(1), beta,
                     da.buffer.data<float>(), k);
        } else {
          cpu::sgemm(trans_b, true, k, m, n, 1.0f, b32.data<float>(), b.size(1), dc, n, beta,
                     da.buffer.data<float>(), m);
        }
        finish_grad(sink, da);
      }
      if (GradSink sink = ctx.grad_input(1)) {
        // op(b) = op(a)^T · dc; if trans_b, b = dc^T · op(a).
        auto db = f32_grad_buffer(sink, dc32);
        Tensor a32 = as_f32(a);
        const float beta = db.accumulate ? 1.0f : 0.0f;
        if (!trans_b) {
          cpu::sgemm(!trans_a, false, k, n, m, 1.0f, a32.data<float>(), a.size(1), dc, n, beta,
                     db.buffer.data<float>(), n);
        } else {
          cpu::sgemm(true, trans_a, n, k, m, 1.0f, dc, n, a32.data<float>(), a.size(1), beta,
                     db.buffer.data<float>(), k);
        }
        finish_grad(sink, db);
      }
    });
  }
  return c;
}

}  // namespace zs::ops
