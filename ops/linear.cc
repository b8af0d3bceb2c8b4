// linear and matmul: forward and backward as GEMMs on fp32 data.
//
// Backward of y = x·W^T + b: dx = dy·W (M×K), dW = dy^T·x (N×K), db = Σ_rows dy. Each GEMM
// writes straight into the gradient sink with beta = 1 when accumulating (no temporary) when
// the sink is fp32.
//
// On a device (cuda:N) the same GEMMs run through its table (ops/device_ops.h; on CUDA cuBLAS,
// ops/cuda/gemm.h, fp32 accumulation, TF32 off) on the stream of the inputs' allocator, under the
// same autograd record. fp16/bf16 operands go to cuBLAS as they are (products of 16-bit values
// are exact in fp32, so this is the CPU's math up to summation order) and the result is written
// as fp32 and rounded once, as on the CPU. The bias is broadcast into the fp32 output before a
// beta = 1 GEMM, and its gradient is summed in fp32 in a fixed order (blocks of 64 rows, then the
// blocks: deterministic, and bias_grad's sum up to fp32 rounding, like the weight gradient).
#include "ops/linear.h"

#include <algorithm>

#include "ops/cpu/gemm.h"
#include "ops/device_ops.h"
#include "ops/op_utils.h"

namespace zs::ops {

using detail::as_f32;
using detail::f32_grad_buffer;
using detail::F32GradBuffer;
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

// A gradient GEMM's operands must share a dtype on a device, whose GEMM reads 16-bit operands as
// they are: the output gradient has the output's dtype, which is the inputs' (a gradient of
// another dtype would be a bug upstream; say so).
void check_grad_dtype(const char* op, const Tensor& dy, const Tensor& like) {
  ZS_CHECK(dy.dtype() == like.dtype(), op, ": output gradient ", dy.describe(),
           " does not have the inputs' dtype ", dtype_name(like.dtype()));
}

// ---- The CPU: fp32 staging of 16-bit operands (as_f32) and cpu::sgemm.

void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                    int64_t m, int64_t n, int64_t k) {
  const Shape& out_shape = y.shape();
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
}

void linear_backward(const Tensor& x, const Tensor& weight, int64_t m, int64_t n, int64_t k,
                     BackwardContext& ctx) {
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
}

void matmul_forward(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, const Tensor& c,
                    int64_t m, int64_t n, int64_t k) {
  Tensor a32 = as_f32(a);
  Tensor b32 = as_f32(b);
  Tensor c32 = a.dtype() == DType::kF32 ? c : detail::new_workspace({m, n}, a, "matmul fp32 out");
  cpu::sgemm(trans_a, trans_b, m, n, k, 1.0f, a32.data<float>(), a.size(1), b32.data<float>(),
             b.size(1), 0.0f, c32.data<float>(), n);
  if (a.dtype() != DType::kF32) detail::store_f32(c, c32.data<float>());
}

void matmul_backward(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, int64_t m,
                     int64_t n, int64_t k, BackwardContext& ctx) {
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
}

// ---- On a device (ops/device_ops.h): the CPU's GEMMs operand for operand, with 16-bit operands
// read as they are (no fp32 staging), and results written straight into 16-bit outputs and
// gradient sinks: the device GEMM adds in fp32 (the products, the bias broadcast into the output,
// an accumulating sink's value) and rounds once, which is what the CPU's fp32 result, then
// store_f32 or write_grad, computes — without an fp32 copy of the output and a pass to round it.

// The buffer a device GEMM writes a gradient into: the sink itself when it has the operands'
// dtype (or is fp32), else fp32 staging that finish_grad writes out.
F32GradBuffer device_grad_buffer(GradSink& sink, const Tensor& like) {
  if (sink.buffer.dtype() == like.dtype())
    return F32GradBuffer{sink.buffer, sink.accumulate, false};
  return f32_grad_buffer(sink, like);
}

void linear_forward_on_device(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const Tensor& y, int64_t m, int64_t n, int64_t k) {
  const detail::DeviceOps& device = detail::device_ops(x, "linear");
  float beta = 0.0f;
  if (bias.defined()) {
    device.broadcast_rows(bias, y, m, n);
    beta = 1.0f;
  }
  device.gemm("linear", false, true, m, n, k, x, k, weight, k, beta, y, n);
}

void linear_backward_on_device(const Tensor& x, const Tensor& weight, int64_t m, int64_t n,
                               int64_t k, BackwardContext& ctx) {
  Tensor dy = ctx.grad_output(0);
  if (!dy.defined()) return;
  const detail::DeviceOps& device = detail::device_ops(x, "linear");
  device.check_tensors("linear", {&dy, &x, &weight});
  check_grad_dtype("linear", dy, x);
  if (GradSink sink = ctx.grad_input(0)) {
    device.check_tensors("linear", {&dy, &sink.buffer});
    auto dx = device_grad_buffer(sink, dy);
    device.gemm("linear", false, false, m, k, n, dy, n, weight, k, dx.accumulate ? 1.0f : 0.0f,
                dx.buffer, k);
    finish_grad(sink, dx);
  }
  if (GradSink sink = ctx.grad_input(1)) {
    device.check_tensors("linear", {&dy, &sink.buffer});
    auto dw = device_grad_buffer(sink, dy);
    device.gemm("linear", true, false, n, k, m, dy, n, x, k, dw.accumulate ? 1.0f : 0.0f, dw.buffer,
                k);
    finish_grad(sink, dw);
  }
  if (GradSink sink = ctx.grad_input(2)) {
    device.check_tensors("linear", {&dy, &sink.buffer});
    auto db = f32_grad_buffer(sink, dy);
    device.column_sums(dy, db.buffer, m, n, db.accumulate);
    finish_grad(sink, db);
  }
}

void matmul_forward_on_device(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                              const Tensor& c, int64_t m, int64_t n, int64_t k) {
  detail::device_ops(a, "matmul")
      .gemm("matmul", trans_a, trans_b, m, n, k, a, a.size(1), b, b.size(1), 0.0f, c, n);
}

void matmul_backward_on_device(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                               int64_t m, int64_t n, int64_t k, BackwardContext& ctx) {
  Tensor dc = ctx.grad_output(0);
  if (!dc.defined()) return;
  const detail::DeviceOps& device = detail::device_ops(a, "matmul");
  device.check_tensors("matmul", {&dc, &a, &b});
  check_grad_dtype("matmul", dc, a);
  // The CPU backward's GEMMs (see matmul below), operand for operand.
  if (GradSink sink = ctx.grad_input(0)) {
    device.check_tensors("matmul", {&dc, &sink.buffer});
    auto da = device_grad_buffer(sink, dc);
    const float beta = da.accumulate ? 1.0f : 0.0f;
    if (!trans_a) {
      device.gemm("matmul", false, !trans_b, m, k, n, dc, n, b, b.size(1), beta, da.buffer, k);
    } else {
      device.gemm("matmul", trans_b, true, k, m, n, b, b.size(1), dc, n, beta, da.buffer, m);
    }
    finish_grad(sink, da);
  }
  if (GradSink sink = ctx.grad_input(1)) {
    device.check_tensors("matmul", {&dc, &sink.buffer});
    auto db = device_grad_buffer(sink, dc);
    const float beta = db.accumulate ? 1.0f : 0.0f;
    if (!trans_b) {
      device.gemm("matmul", !trans_a, false, k, n, m, a, a.size(1), dc, n, beta, db.buffer, n);
    } else {
      device.gemm("matmul", true, trans_a, n, k, m, dc, n, a, a.size(1), beta, db.buffer, k);
    }
    finish_grad(sink, db);
  }
}

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
  Tensor y = detail::new_output(out_shape, x.dtype(), x, "linear");
  if (detail::on_device(x)) {
    linear_forward_on_device(x, weight, bias, y, m, n, k);
  } else {
    linear_forward(x, weight, bias, y, m, n, k);
  }

  if (needs_grad({&x, &weight, &bias})) {
    // Save the inputs (handles share storage: no copy).
    record_op("linear", {&x, &weight, &bias}, {&y}, [x, weight, m, n, k](BackwardContext& ctx) {
      if (detail::on_device(x)) return linear_backward_on_device(x, weight, m, n, k, ctx);
      linear_backward(x, weight, m, n, k, ctx);
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
  Tensor c = detail::new_output({m, n}, a.dtype(), a, "matmul");
  if (detail::on_device(a)) {
    matmul_forward_on_device(a, b, trans_a, trans_b, c, m, n, k);
  } else {
    matmul_forward(a, b, trans_a, trans_b, c, m, n, k);
  }

  if (needs_grad({&a, &b})) {
    record_op("matmul", {&a, &b}, {&c}, [a, b, trans_a, trans_b, m, n, k](BackwardContext& ctx) {
      if (detail::on_device(a)) {
        return matmul_backward_on_device(a, b, trans_a, trans_b, m, n, k, ctx);
      }
      matmul_backward(a, b, trans_a, trans_b, m, n, k, ctx);
    });
  }
  return c;
}

}  // namespace zs::ops
