// layernorm: a thin OpenMP launcher around the row math in ops/math/layernorm.h.
//
// Forward runs one row per iteration and saves mean/rstd for backward. Backward walks fixed
// blocks of kParamGradBlockRows rows: each block writes dx for its rows and sums its rows'
// dgamma/dbeta contributions into its own fp32 partial (a workspace [blocks, 2, C]); the
// partials are then added block by block in order, column-parallel. Block boundaries do not
// depend on the thread count, so neither do the sums.
//
// On a device (cuda:N): its layernorm kernels (ops/device_ops.h; on CUDA one warp per row, dgamma/
// dbeta summed over rows in row order, so they agree with the CPU's block sums within rounding,
// not bit for bit), with the same saved state and the same autograd record.
#include "ops/layernorm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/device_ops.h"
#include "ops/math/layernorm.h"
#include "ops/op_utils.h"
#include "runtime/half.h"

namespace zs::ops {
namespace {

constexpr const char* kOp = "layernorm";
// Rows per block of the dgamma/dbeta reduction; fixed so the sum order is fixed.
constexpr int64_t kParamGradBlockRows = 64;
// Below this many elements the loops run on the calling thread (same results either way).
constexpr int64_t kParallelMinElements = 1 << 14;

struct Saved {
  Tensor x;
  Tensor gamma;
  Tensor mean;  // fp32 [rows]
  Tensor rstd;  // fp32 [rows]
  int64_t rows = 0;
  int64_t cols = 0;
};

// The state a forward call saves for backward when it is recorded (x, gamma, the shape, and the
// row statistics as fp32 [rows] outputs); with `record` false, only the shape.
Saved new_saved(const Tensor& x, const Tensor& gamma, int64_t rows, int64_t cols, bool record) {
  Saved saved;
  saved.rows = rows;
  saved.cols = cols;
  if (record) {
    saved.x = x;
    saved.gamma = gamma;
    saved.mean = detail::new_output({rows}, DType::kF32, x, "layernorm mean");
    saved.rstd = detail::new_output({rows}, DType::kF32, x, "layernorm rstd");
  }
  return saved;
}

// A backward on one device: from dy (y's gradient, any float dtype) into the sinks of x, gamma
// and beta (each undefined when that input needs no gradient).
using LayernormBackward = void (*)(const Saved& saved, const Tensor& dy_any, GradSink& dx_sink,
                                   GradSink& dgamma_sink, GradSink& dbeta_sink);

// Records y = layernorm(x, gamma, beta) on the tape with `run` as its backward. The sinks are
// asked for (allocated) only when a gradient reached y.
void record_layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                      const Saved& saved, LayernormBackward run) {
  record_op(kOp, {&x, &gamma, &beta}, {&y}, [saved, run](BackwardContext& ctx) {
    const Tensor dy_any = ctx.grad_output(0);
    if (!dy_any.defined()) return;
    GradSink dx_sink = ctx.grad_input(0);
    GradSink dgamma_sink = ctx.grad_input(1);
    GradSink dbeta_sink = ctx.grad_input(2);
    run(saved, dy_any, dx_sink, dgamma_sink, dbeta_sink);
  });
}

void backward(const Saved& saved, const Tensor& dy_any, GradSink& dx_sink, GradSink& dgamma_sink,
              GradSink& dbeta_sink) {
  const int64_t rows = saved.rows;
  const int64_t cols = saved.cols;
  Tensor dy32 = detail::as_f32(dy_any);  // a converted workspace copy when 16-bit
  const float* dy = dy32.data<float>();
  const float* mean = saved.mean.data<float>();
  const float* rstd = saved.rstd.data<float>();
  const bool want_params = dgamma_sink || dbeta_sink;
  const int64_t blocks = (rows + kParamGradBlockRows - 1) / kParamGradBlockRows;
  // Per-block partial sums: [block][0] = dgamma, [block][1] = dbeta.
  Tensor partials;
  float* partial = nullptr;
  if (want_params && blocks > 0) {
    partials = detail::new_workspace({blocks, 2, cols}, saved.x, "layernorm dgamma/dbeta partials");
    partial = partials.data<float>();
  }
  const bool parallel = rows * cols >= kParallelMinElements;

  detail::visit_float_dtype(saved.x.dtype(), kOp, [&](auto x_tag) {
    using T = decltype(x_tag);
    const T* x = saved.x.data<T>();
    const T* gamma = saved.gamma.data<T>();
    auto run_blocks = [&](auto* dx, bool accumulate) {
#pragma omp parallel for schedule(static) if (parallel)
      for (int64_t block = 0; block < blocks; ++block) {
        const int64_t begin = block * kParamGradBlockRows;
        const int64_t end = std::min(rows, begin + kParamGradBlockRows);
        float* block_dgamma = nullptr;
        float* block_dbeta = nullptr;
        if (partial != nullptr) {
          float* base = partial + block * 2 * cols;
          std::memset(base, 0, sizeof(float) * 2 * cols);
          if (dgamma_sink) block_dgamma = base;
          if (dbeta_sink) block_dbeta = base + cols;
        }
        for (int64_t r = begin; r < end; ++r) {
          const T* x_row = x + r * cols;
          const float* dy_row = dy + r * cols;
          if (dx != nullptr) {
            math::layernorm_row_backward(x_row, dy_row, gamma, cols, mean[r], rstd[r],
                                         dx + r * cols, accumulate);
          }
          if (partial != nullptr) {
            math::layernorm_row_param_grads(x_row, dy_row, cols, mean[r], rstd[r], block_dgamma,
                                            block_dbeta);
          }
        }
      }
    };
    if (dx_sink) {
      detail::visit_float_dtype(dx_sink.buffer.dtype(), kOp, [&](auto sink_tag) {
        using S = decltype(sink_tag);
        run_blocks(dx_sink.buffer.data<S>(), dx_sink.accumulate);
      });
    } else {
      run_blocks(static_cast<float*>(nullptr), false);
    }
  });

  if (!want_params) return;
  // Sum the block partials in block order, one column per iteration.
  std::vector<float> dgamma(static_cast<size_t>(cols));
  std::vector<float> dbeta(static_cast<size_t>(cols));
  const bool parallel_columns = blocks * cols >= kParallelMinElements;
#pragma omp parallel for schedule(static) if (parallel_columns)
  for (int64_t j = 0; j < cols; ++j) {
    float sum_gamma = 0.0f;
    float sum_beta = 0.0f;
    for (int64_t block = 0; block < blocks; ++block) {
      sum_gamma += partial[block * 2 * cols + j];
      sum_beta += partial[block * 2 * cols + cols + j];
    }
    dgamma[static_cast<size_t>(j)] = sum_gamma;
    dbeta[static_cast<size_t>(j)] = sum_beta;
  }
  if (dgamma_sink) detail::write_grad(dgamma_sink, dgamma.data());
  if (dbeta_sink) detail::write_grad(dbeta_sink, dbeta.data());
}

// The CPU forward: y, and the row statistics into `saved` when it holds them (recording).
void forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
             const Saved& saved) {
  const int64_t rows = saved.rows;
  const int64_t cols = saved.cols;
  const bool record = saved.mean.defined();
  float* mean_out = record ? saved.mean.data<float>() : nullptr;
  float* rstd_out = record ? saved.rstd.data<float>() : nullptr;
  const bool parallel = x.numel() >= kParallelMinElements;

  detail::visit_float_dtype(x.dtype(), kOp, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    const T* gp = gamma.data<T>();
    const T* bp = beta.data<T>();
    T* yp = y.data<T>();
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t r = 0; r < rows; ++r) {
      float mean = 0.0f;
      float rstd = 0.0f;
      math::layernorm_row_stats(xp + r * cols, cols, eps, &mean, &rstd);
      math::layernorm_row_forward(xp + r * cols, gp, bp, cols, mean, rstd, yp + r * cols);
      if (mean_out != nullptr) {
        mean_out[r] = mean;
        rstd_out[r] = rstd;
      }
    }
  });
}

// dgamma/dbeta on a device: its kernel adds into fp32 buffers, so a fresh buffer is zeroed first.
detail::F32GradBuffer param_grad_buffer(GradSink& sink, const Tensor& like) {
  detail::F32GradBuffer buffer;
  if (!sink) return buffer;
  buffer = detail::f32_grad_buffer(sink, like);
  if (!buffer.accumulate) zero_bytes(buffer.buffer);
  return buffer;
}

// The backward on a device (ops/device_ops.h): dy staged to fp32 as on the CPU; dgamma and dbeta
// summed by the kernel over rows in row order.
void backward_on_device(const Saved& saved, const Tensor& dy_any, GradSink& dx_sink,
                        GradSink& dgamma_sink, GradSink& dbeta_sink) {
  Tensor dy32 = detail::as_f32(dy_any);
  detail::F32GradBuffer dgamma = param_grad_buffer(dgamma_sink, saved.x);
  detail::F32GradBuffer dbeta = param_grad_buffer(dbeta_sink, saved.x);
  detail::device_ops(saved.x, kOp)
      .layernorm_backward(saved.x, dy32, saved.gamma, saved.mean, saved.rstd,
                          dx_sink ? dx_sink.buffer : Tensor(), dx_sink.accumulate,
                          dgamma_sink ? dgamma.buffer : Tensor(),
                          dbeta_sink ? dbeta.buffer : Tensor(), saved.rows, saved.cols);
  if (dgamma_sink) detail::finish_grad(dgamma_sink, dgamma);
  if (dbeta_sink) detail::finish_grad(dbeta_sink, dbeta);
}

}  // namespace

Tensor layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps) {
  detail::check_float_input(kOp, "x", x);
  detail::check_float_input(kOp, "gamma", gamma);
  detail::check_float_input(kOp, "beta", beta);
  ZS_CHECK(x.dim() >= 1 && x.size(-1) >= 1, kOp, ": x ", x.describe(),
           " needs a last dimension of at least 1 feature to normalize over");
  const int64_t cols = x.size(-1);
  const int64_t rows = x.numel() / cols;
  ZS_CHECK(gamma.dim() == 1 && gamma.size(0) == cols, kOp, ": gamma ", gamma.describe(),
           " must be [", cols, "] to match the last dimension of x ", x.describe());
  ZS_CHECK(beta.dim() == 1 && beta.size(0) == cols, kOp, ": beta ", beta.describe(), " must be [",
           cols, "] to match the last dimension of x ", x.describe());
  detail::check_same_dtype(kOp, x, gamma);
  detail::check_same_dtype(kOp, x, beta);
  ZS_CHECK(std::isfinite(eps) && eps >= 0.0f, kOp, ": eps must be finite and >= 0, got ", eps,
           " (the usual value is 1e-5)");
  detail::check_same_device(kOp, {&x, &gamma, &beta});

  Tensor y = detail::new_output(x.shape(), x.dtype(), x, kOp);
  const bool record = needs_grad({&x, &gamma, &beta});
  Saved saved = new_saved(x, gamma, rows, cols, record);
  if (detail::on_device(x)) {
    // The kernel always writes the row statistics: saved outputs when recording, else workspace.
    if (!record) {
      saved.mean = detail::new_workspace({rows}, x, "layernorm mean");
      saved.rstd = detail::new_workspace({rows}, x, "layernorm rstd");
    }
    detail::device_ops(x, kOp).layernorm_forward(x, gamma, beta, y, saved.mean, saved.rstd, rows,
                                                 cols, eps);
  } else {
    forward(x, gamma, beta, eps, y, saved);
  }
  if (record) {
    record_layernorm(x, gamma, beta, y, saved,
                     detail::on_device(x) ? &backward_on_device : &backward);
  }
  return y;
}

}  // namespace zs::ops
