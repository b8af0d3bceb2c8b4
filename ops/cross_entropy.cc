// cross_entropy: a thin OpenMP launcher around the row math in ops/math/cross_entropy.h.
//
// Forward: validate every target (serially, so the first bad row is the one reported), then one
// row per iteration: max, log-sum-exp and the row loss; the mean is summed in row order in double
// so the loss is the same for any thread count. Backward: one row per iteration, written into the
// sink in its own dtype.
#include "ops/cross_entropy.h"

#include <vector>

#include "ops/math/cross_entropy.h"
#include "ops/op_utils.h"
#include "runtime/half.h"

namespace zs::ops {
namespace {

constexpr const char* kOp = "cross_entropy";
// Below this many logits the loops run on the calling thread (same results either way).
constexpr int64_t kParallelMinElements = 1 << 14;

void check_targets_tensor(const char* op, const Tensor& targets) {
  ZS_CHECK(targets.defined(), op, ": argument 'targets' is undefined");
  detail::check_cpu(op, targets);
  ZS_CHECK(targets.dtype() == DType::kI32, op, ": targets ", targets.describe(),
           " must be int32 class indices");
}

struct Saved {
  Tensor logits;
  Tensor targets;
  Tensor row_max;  // fp32 [N]; 0 for ignored rows
  Tensor log_sum;  // fp32 [N], log Σ exp(logit − max); 0 for ignored rows
  int64_t rows = 0;
  int64_t vocab = 0;
  int64_t count = 0;
  int32_t ignore_index = kDefaultIgnoreIndex;
};

void backward(const Saved& saved, BackwardContext& ctx) {
  Tensor dloss = ctx.grad_output(0);
  GradSink sink = ctx.grad_input(0);
  if (!dloss.defined() || !sink) return;
  const int64_t rows = saved.rows;
  const int64_t vocab = saved.vocab;
  // count == 0 means every row is ignored: all-zero gradient, never 0/0.
  const float scale = saved.count > 0 ? dloss.item() / static_cast<float>(saved.count) : 0.0f;
  const int32_t* targets = saved.targets.data<int32_t>();
  const float* row_max = saved.row_max.data<float>();
  const float* log_sum = saved.log_sum.data<float>();
  const int32_t ignore_index = saved.ignore_index;
  const bool accumulate = sink.accumulate;
  const bool parallel = rows * vocab >= kParallelMinElements;
  detail::visit_float_dtype(saved.logits.dtype(), kOp, [&](auto logits_tag) {
    using T = decltype(logits_tag);
    const T* logits = saved.logits.data<T>();
    detail::visit_float_dtype(sink.buffer.dtype(), kOp, [&](auto sink_tag) {
      using S = decltype(sink_tag);
      S* dlogits = sink.buffer.data<S>();
#pragma omp parallel for schedule(static) if (parallel)
      for (int64_t r = 0; r < rows; ++r) {
        S* row_grad = dlogits + r * vocab;
        if (targets[r] == ignore_index) {
          if (!accumulate) {
            for (int64_t i = 0; i < vocab; ++i) row_grad[i] = S(0.0f);
          }
          continue;
        }
        math::cross_entropy_row_backward(logits + r * vocab, vocab, row_max[r], log_sum[r],
                                         targets[r], scale, row_grad, accumulate);
      }
    });
  });
}

}  // namespace

int64_t count_valid_targets(const Tensor& targets, int32_t ignore_index) {
  check_targets_tensor("count_valid_targets", targets);
  const int32_t* t = targets.data<int32_t>();
  int64_t count = 0;
  for (int64_t i = 0; i < targets.numel(); ++i) count += t[i] != ignore_index ? 1 : 0;
  return count;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int32_t ignore_index) {
  // No CUDA path yet (its kernels are being written in ops/cuda): refuse device tensors by name.
  detail::refuse_unwired_device(kOp, logits);
  detail::refuse_unwired_device(kOp, targets);
  detail::check_float_input(kOp, "logits", logits);
  check_targets_tensor(kOp, targets);
  ZS_CHECK(logits.dim() == 2, kOp, ": logits ", logits.describe(),
           " must be 2-D [N, V]; view [B, T, V] logits as [B*T, V] (and targets as [B*T])");
  const int64_t rows = logits.size(0);
  const int64_t vocab = logits.size(1);
  ZS_CHECK(vocab >= 1, kOp, ": logits ", logits.describe(), " have no classes (V = 0)");
  ZS_CHECK(targets.dim() == 1 && targets.size(0) == rows, kOp, ": targets ", targets.describe(),
           " must be [", rows, "], one class index per row of logits ", logits.describe());

  // Validate all targets before any work, reporting the first bad row.
  const int32_t* target = targets.data<int32_t>();
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t t = target[r];
    if (t == ignore_index) continue;
    ZS_CHECK(t >= 0 && t < vocab, kOp, ": targets[", r, "] = ", t, " is out of range [0, ", vocab,
             ") for logits ", logits.describe(), " and is not ignore_index (", ignore_index,
             "); fix the labels or pass the ignore_index they use");
    ++count;
  }

  const bool record = needs_grad({&logits});
  // Saved for backward (activations) when recording, scratch otherwise.
  auto per_row = [&](const char* what) {
    return record ? detail::new_output({rows}, DType::kF32, logits, what)
                  : detail::new_workspace({rows}, logits, what);
  };
  Tensor row_maxes = per_row("cross_entropy row max");
  Tensor log_sums = per_row("cross_entropy log-sum-exp");
  Tensor row_losses = detail::new_workspace({rows}, logits, "cross_entropy row losses");
  float* row_max = row_maxes.data<float>();
  float* log_sum = log_sums.data<float>();
  float* row_loss = row_losses.data<float>();
  const bool parallel = rows * vocab >= kParallelMinElements;
  detail::visit_float_dtype(logits.dtype(), kOp, [&](auto tag) {
    using T = decltype(tag);
    const T* lp = logits.data<T>();
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t r = 0; r < rows; ++r) {
      if (target[r] == ignore_index) {
        row_max[r] = 0.0f;
        log_sum[r] = 0.0f;
        row_loss[r] = 0.0f;
        continue;
      }
      const T* row = lp + r * vocab;
      math::cross_entropy_row_stats(row, vocab, &row_max[r], &log_sum[r]);
      row_loss[r] =
          math::cross_entropy_loss(row_max[r], log_sum[r], static_cast<float>(row[target[r]]));
    }
  });
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) total += static_cast<double>(row_loss[r]);
  const float loss_value =
      count > 0 ? static_cast<float>(total / static_cast<double>(count)) : 0.0f;

  Tensor loss = detail::new_output({1}, DType::kF32, logits, kOp);
  loss.data<float>()[0] = loss_value;

  if (record) {
    Saved saved;
    saved.logits = logits;
    saved.targets = targets;
    saved.row_max = row_maxes;
    saved.log_sum = log_sums;
    saved.rows = rows;
    saved.vocab = vocab;
    saved.count = count;
    saved.ignore_index = ignore_index;
    record_op(kOp, {&logits}, {&loss}, [saved](BackwardContext& ctx) { backward(saved, ctx); });
  }
  return loss;
}

}  // namespace zs::ops
