// cross_entropy: a thin OpenMP launcher around the row math in ops/math/cross_entropy.h.
//
// Forward: validate every target (serially, so the first bad row is the one reported), then one
// row per iteration: max, log-sum-exp and the row loss; the mean is summed in row order in double
// so the loss is the same for any thread count. Backward: one row per iteration, written into the
// sink in its own dtype.
//
// On cuda:N: ops/cuda/nn_kernels.h's launchers around the same row math, on the stream of the
// tensors' allocator (ops/cuda/context.h), saving the same tensors in the same categories. The
// targets cannot be checked on the host without a copy, so the forward kernel checks them: it
// flags the first out-of-range row, and the op reads that flag back once (one 16-byte download on
// the op's stream, a host sync: the host waits for the forward) and throws the CPU's message
// (the offending value is then read with one more 4-byte download, on that error path only). The
// mean's divisor (the valid count) stays on the device, next to the flag, and backward reads it
// and the upstream gradient there: backward adds no host sync. count_valid_targets on device
// targets downloads them (synchronously) and counts on the host.
#include "ops/cross_entropy.h"

#include <vector>

#include "ops/math/cross_entropy.h"
#include "ops/op_utils.h"
#include "runtime/half.h"

#if ZS_HAVE_CUDA
#include "ops/cuda/context.h"
#include "ops/cuda/nn_kernels.h"
#endif

namespace zs::ops {
namespace {

constexpr const char* kOp = "cross_entropy";
// Below this many logits the loops run on the calling thread (same results either way).
constexpr int64_t kParallelMinElements = 1 << 14;

void check_targets_tensor(const char* op, const Tensor& targets) {
  ZS_CHECK(targets.defined(), op, ": argument 'targets' is undefined");
  detail::check_supported_device(op, targets);
  ZS_CHECK(targets.dtype() == DType::kI32, op, ": targets ", targets.describe(),
           " must be int32 class indices");
}

// The CPU's message for targets[row] = target out of range.
void check_target(const Tensor& logits, int64_t row, int32_t target, int32_t ignore_index) {
  const int64_t vocab = logits.size(1);
  ZS_CHECK(target == ignore_index || (target >= 0 && target < vocab), kOp, ": targets[", row,
           "] = ", target, " is out of range [0, ", vocab, ") for logits ", logits.describe(),
           " and is not ignore_index (", ignore_index,
           "); fix the labels or pass the ignore_index they use");
}

struct Saved {
  Tensor logits;
  Tensor targets;
  Tensor row_max;  // fp32 [N]; 0 for ignored rows
  Tensor log_sum;  // fp32 [N], log Σ exp(logit − max); 0 for ignored rows
  // CUDA only: int32 [4], elements 0-1 the valid count as int64 (the device-side divisor),
  // element 2 the forward's bad-row flag (see cross_entropy_cuda).
  Tensor device_counts;
  int64_t rows = 0;
  int64_t vocab = 0;
  int64_t count = 0;
  int32_t ignore_index = kDefaultIgnoreIndex;
};

// The fp32 [rows] buffers of a forward on either device: the row max and log-sum-exp, saved for
// backward (activations) when recording and scratch otherwise, and the row losses (scratch).
struct RowBuffers {
  Tensor row_max;
  Tensor log_sum;
  Tensor row_loss;
};
RowBuffers row_buffers(const Tensor& logits, int64_t rows, bool record) {
  auto per_row = [&](const char* what) {
    return record ? detail::new_output({rows}, DType::kF32, logits, what)
                  : detail::new_workspace({rows}, logits, what);
  };
  return {per_row("cross_entropy row max"), per_row("cross_entropy log-sum-exp"),
          detail::new_workspace({rows}, logits, "cross_entropy row losses")};
}

// What both devices save for backward: the inputs, the row statistics and the shape.
Saved saved_rows(const Tensor& logits, const Tensor& targets, const Tensor& row_max,
                 const Tensor& log_sum, int32_t ignore_index) {
  Saved saved;
  saved.logits = logits;
  saved.targets = targets;
  saved.row_max = row_max;
  saved.log_sum = log_sum;
  saved.rows = logits.size(0);
  saved.vocab = logits.size(1);
  saved.ignore_index = ignore_index;
  return saved;
}

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

#if ZS_HAVE_CUDA
void backward_cuda(const Saved& saved, BackwardContext& bctx) {
  Tensor dloss = bctx.grad_output(0);
  GradSink sink = bctx.grad_input(0);
  if (!dloss.defined() || !sink) return;
  cuda::OpContext ctx(kOp,
                      {&saved.logits, &saved.targets, &saved.device_counts, &dloss, &sink.buffer});
  // The scale dloss / count is formed on the device (count == 0: a zero gradient, never 0/0).
  Tensor dloss32 = detail::as_f32(dloss);
  cuda::cross_entropy_backward(saved.logits.raw_device_data(), saved.targets.device_data<int32_t>(),
                               saved.row_max.device_data<float>(),
                               saved.log_sum.device_data<float>(), dloss32.device_data<float>(),
                               static_cast<const int64_t*>(saved.device_counts.raw_device_data()),
                               saved.rows, saved.vocab, saved.ignore_index, saved.logits.dtype(),
                               sink.buffer.raw_device_data(), sink.buffer.dtype(), sink.accumulate,
                               ctx.stream());
}

Tensor cross_entropy_cuda(const Tensor& logits, const Tensor& targets, int32_t ignore_index,
                          int64_t rows, int64_t vocab) {
  cuda::OpContext ctx(kOp, {&logits, &targets});
  const bool record = needs_grad({&logits});
  const RowBuffers buffers = row_buffers(logits, rows, record);
  const Tensor& row_maxes = buffers.row_max;
  const Tensor& log_sums = buffers.log_sum;
  const Tensor& row_losses = buffers.row_loss;
  Tensor loss = detail::new_output({1}, DType::kF32, logits, kOp);
  // The valid count (int64, elements 0-1: the allocation is aligned) and the bad-row flag
  // (element 2) share one tensor, so that one download reads both. Saved with the row statistics
  // when recording (backward divides by the count on the device).
  Tensor counts = Tensor::empty({4}, DType::kI32, logits.allocator(),
                                record ? detail::output_category() : MemoryCategory::kWorkspace,
                                "cross_entropy valid count");
  ZS_CHECK(rows <= detail::kNoBadIndex, kOp, ": ", rows, " rows, but at most ", detail::kNoBadIndex,
           " can be checked on the device; split the batch");
  counts.fill(static_cast<float>(detail::kNoBadIndex));
  int32_t* first_bad_row = counts.device_data<int32_t>() + 2;
  cuda::cross_entropy_forward(
      logits.raw_device_data(), targets.device_data<int32_t>(), rows, vocab, ignore_index,
      logits.dtype(), row_maxes.device_data<float>(), log_sums.device_data<float>(),
      row_losses.device_data<float>(), loss.device_data<float>(),
      static_cast<int64_t*>(counts.raw_device_data()), first_bad_row, ctx.stream());
  if (rows > 0) {
    // The op's one host sync: the forward's flag (with the count), after the kernels ran.
    const std::vector<int32_t> read = detail::read_int32(counts);
    const int64_t bad_row = read[2];
    if (bad_row < rows) {
      check_target(logits, bad_row, detail::read_int32_at(targets, bad_row), ignore_index);
      // The flag names a row whose target the host reads as valid: the targets changed between
      // the kernel and this read (another stream or thread wrote them).
      ZS_THROW(InvalidArgument, kOp, ": the device flagged targets[", bad_row,
               "] as out of range [0, ", vocab, ") for logits ", logits.describe(),
               ", but it reads back in range: were the targets overwritten while the op ran?");
    }
  }

  if (record) {
    Saved saved = saved_rows(logits, targets, row_maxes, log_sums, ignore_index);
    saved.device_counts = counts;
    record_op(kOp, {&logits}, {&loss},
              [saved](BackwardContext& bctx) { backward_cuda(saved, bctx); });
  }
  return loss;
}
#endif

}  // namespace

int64_t count_valid_targets(const Tensor& targets, int32_t ignore_index) {
  check_targets_tensor("count_valid_targets", targets);
  if (!targets.device().is_cpu()) {
    // Device targets: one synchronous download (the host waits for the work enqueued on their
    // allocator's stream), then the CPU's count.
    int64_t count = 0;
    for (int32_t t : detail::read_int32(targets)) count += t != ignore_index ? 1 : 0;
    return count;
  }
  const int32_t* t = targets.data<int32_t>();
  int64_t count = 0;
  for (int64_t i = 0; i < targets.numel(); ++i) count += t[i] != ignore_index ? 1 : 0;
  return count;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int32_t ignore_index) {
  detail::check_float_input(kOp, "logits", logits);
  check_targets_tensor(kOp, targets);
  detail::check_same_device(kOp, {&logits, &targets});
  ZS_CHECK(logits.dim() == 2, kOp, ": logits ", logits.describe(),
           " must be 2-D [N, V]; view [B, T, V] logits as [B*T, V] (and targets as [B*T])");
  const int64_t rows = logits.size(0);
  const int64_t vocab = logits.size(1);
  ZS_CHECK(vocab >= 1, kOp, ": logits ", logits.describe(), " have no classes (V = 0)");
  ZS_CHECK(targets.dim() == 1 && targets.size(0) == rows, kOp, ": targets ", targets.describe(),
           " must be [", rows, "], one class index per row of logits ", logits.describe());
#if ZS_HAVE_CUDA
  if (detail::on_cuda(logits))
    return cross_entropy_cuda(logits, targets, ignore_index, rows, vocab);
#endif

  // Validate all targets before any work, reporting the first bad row.
  const int32_t* target = targets.data<int32_t>();
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t t = target[r];
    if (t == ignore_index) continue;
    check_target(logits, r, t, ignore_index);
    ++count;
  }

  const bool record = needs_grad({&logits});
  const RowBuffers buffers = row_buffers(logits, rows, record);
  const Tensor& row_maxes = buffers.row_max;
  const Tensor& log_sums = buffers.log_sum;
  const Tensor& row_losses = buffers.row_loss;
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
    Saved saved = saved_rows(logits, targets, row_maxes, log_sums, ignore_index);
    saved.count = count;
    record_op(kOp, {&logits}, {&loss}, [saved](BackwardContext& ctx) { backward(saved, ctx); });
  }
  return loss;
}

}  // namespace zs::ops
