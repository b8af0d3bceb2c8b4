// cross_entropy: a thin OpenMP launcher around the row math in ops/math/cross_entropy.h.
//
// Forward: validate every target (serially, so the first bad row is the one reported), then one
// row per iteration: max, log-sum-exp and the row loss; the mean is summed in row order in double
// so the loss is the same for any thread count. Backward: one row per iteration, written into the
// sink in its own dtype. The row loops are detail functions (ops/cross_entropy_impl.h) that the
// fused head (ops/linear_cross_entropy.h) runs on its chunks of logits.
//
// On a device (cuda:N): its kernels around the same row math (ops/device_ops.h; on CUDA
// ops/cuda/nn_kernels.h), on the stream of the tensors' allocator, saving the same tensors in the
// same categories under the same autograd record. The
// targets cannot be checked on the host without a copy, so the forward kernel checks them: it
// flags the first out-of-range row, and the op reads that flag back once (one 16-byte download on
// the op's stream, a host sync: the host waits for the forward) and throws the CPU's message
// (the offending value is then read with one more 4-byte download, on that error path only). The
// mean's divisor (the valid count) stays on the device, next to the flag, and backward reads it
// and the upstream gradient there: backward adds no host sync. count_valid_targets on device
// targets downloads them (synchronously) and counts on the host.
#include "ops/cross_entropy.h"

#include <string>
#include <vector>

#include "ops/cross_entropy_impl.h"
#include "ops/device_ops.h"
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
  detail::check_supported_device(op, targets);
  ZS_CHECK(targets.dtype() == DType::kI32, op, ": targets ", targets.describe(),
           " must be int32 class indices");
}

// The CPU's message for targets[row] = target out of range.
void check_target(const Tensor& logits, int64_t row, int32_t target, int32_t ignore_index) {
  detail::check_cross_entropy_target(kOp, logits.describe(), logits.size(1), row, target,
                                     ignore_index);
}

struct Saved {
  Tensor logits;
  Tensor targets;
  Tensor row_max;  // fp32 [N]; 0 for ignored rows
  Tensor log_sum;  // fp32 [N], log Σ exp(logit − max); 0 for ignored rows
  // On a device only: int32 [4], elements 0-1 the valid count as int64 (the device-side divisor),
  // element 2 the forward's bad-row flag (see forward_on_device).
  Tensor device_counts;
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

// What both devices save for backward: the inputs and the row statistics.
Saved saved_rows(const Tensor& logits, const Tensor& targets, const Tensor& row_max,
                 const Tensor& log_sum, int32_t ignore_index) {
  Saved saved;
  saved.logits = logits;
  saved.targets = targets;
  saved.row_max = row_max;
  saved.log_sum = log_sum;
  saved.ignore_index = ignore_index;
  return saved;
}

void backward(const Saved& saved, BackwardContext& ctx) {
  Tensor dloss = ctx.grad_output(0);
  GradSink sink = ctx.grad_input(0);
  if (!dloss.defined() || !sink) return;
  // count == 0 means every row is ignored: all-zero gradient, never 0/0.
  const float scale = saved.count > 0 ? dloss.item() / static_cast<float>(saved.count) : 0.0f;
  detail::cross_entropy_rows_backward(
      saved.logits, saved.targets.data<int32_t>(), saved.ignore_index, saved.row_max.data<float>(),
      saved.log_sum.data<float>(), scale, sink.buffer, sink.accumulate);
}

// The backward on a device (ops/device_ops.h): the scale dloss / count is formed on the device
// (count == 0: a zero gradient, never 0/0), so backward adds no host sync.
void backward_on_device(const Saved& saved, BackwardContext& ctx) {
  Tensor dloss = ctx.grad_output(0);
  GradSink sink = ctx.grad_input(0);
  if (!dloss.defined() || !sink) return;
  const detail::DeviceOps& device = detail::device_ops(saved.logits, kOp);
  device.check_tensors(kOp,
                       {&saved.logits, &saved.targets, &saved.device_counts, &dloss, &sink.buffer});
  Tensor dloss32 = detail::as_f32(dloss);
  device.cross_entropy_backward(saved.logits, saved.targets, saved.row_max, saved.log_sum, dloss32,
                                saved.device_counts, saved.ignore_index, sink.buffer,
                                sink.accumulate);
}

// The forward on a device: the kernel checks the targets and flags the first bad row, which the
// op reads back once (with the valid count) and reports with the CPU's message.
Tensor forward_on_device(const Tensor& logits, const Tensor& targets, int32_t ignore_index,
                         bool record, RowBuffers& buffers, Tensor& counts) {
  const detail::DeviceOps& device = detail::device_ops(logits, kOp);
  // Refused before the count's fill, for what the kernels need.
  device.check_tensors(kOp, {&logits, &targets});
  const int64_t rows = logits.size(0);
  const int64_t vocab = logits.size(1);
  buffers = row_buffers(logits, rows, record);
  Tensor loss = detail::new_output({1}, DType::kF32, logits, kOp);
  // The valid count (int64, elements 0-1: the allocation is aligned) and the bad-row flag
  // (element 2) share one tensor, so that one download reads both. Saved with the row statistics
  // when recording (backward divides by the count on the device).
  counts = Tensor::empty({4}, DType::kI32, logits.allocator(),
                         record ? detail::output_category() : MemoryCategory::kWorkspace,
                         "cross_entropy valid count");
  ZS_CHECK(rows <= detail::kNoBadIndex, kOp, ": ", rows, " rows, but at most ", detail::kNoBadIndex,
           " can be checked on the device; split the batch");
  counts.fill(static_cast<float>(detail::kNoBadIndex));
  device.cross_entropy_forward(logits, targets, ignore_index, buffers.row_max, buffers.log_sum,
                               buffers.row_loss, loss, counts);
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
  return loss;
}

// The CPU forward: every target checked first (the first bad row is reported), then the rows;
// the mean over the valid rows summed in row order in double. Returns the valid count in `count`.
Tensor forward(const Tensor& logits, const Tensor& targets, int32_t ignore_index, bool record,
               RowBuffers& buffers, int64_t& count) {
  const int64_t rows = logits.size(0);
  const int64_t vocab = logits.size(1);
  const int32_t* target = targets.data<int32_t>();
  count = detail::count_checked_targets(kOp, logits.describe(), vocab, target, rows, ignore_index);
  buffers = row_buffers(logits, rows, record);
  float* row_loss = buffers.row_loss.data<float>();
  detail::cross_entropy_rows_forward(logits, target, ignore_index, buffers.row_max.data<float>(),
                                     buffers.log_sum.data<float>(), row_loss);
  const float loss_value = detail::cross_entropy_mean(row_loss, rows, count);

  Tensor loss = detail::new_output({1}, DType::kF32, logits, kOp);
  loss.data<float>()[0] = loss_value;
  return loss;
}

}  // namespace

namespace detail {

void check_cross_entropy_target(const char* op, const std::string& logits, int64_t vocab,
                                int64_t row, int32_t target, int32_t ignore_index) {
  ZS_CHECK(target == ignore_index || (target >= 0 && target < vocab), op, ": targets[", row,
           "] = ", target, " is out of range [0, ", vocab, ") for logits ", logits,
           " and is not ignore_index (", ignore_index,
           "); fix the labels or pass the ignore_index they use");
}

int64_t count_checked_targets(const char* op, const std::string& logits, int64_t vocab,
                              const int32_t* targets, int64_t rows, int32_t ignore_index) {
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t t = targets[r];
    if (t == ignore_index) continue;
    check_cross_entropy_target(op, logits, vocab, r, t, ignore_index);
    ++count;
  }
  return count;
}

void cross_entropy_rows_forward(const Tensor& logits, const int32_t* targets, int32_t ignore_index,
                                float* row_max, float* log_sum, float* row_loss) {
  const int64_t rows = logits.size(0);
  const int64_t vocab = logits.size(1);
  const bool parallel = rows * vocab >= kParallelMinElements;
  visit_float_dtype(logits.dtype(), kOp, [&](auto tag) {
    using T = decltype(tag);
    const T* lp = logits.data<T>();
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t r = 0; r < rows; ++r) {
      if (targets[r] == ignore_index) {
        row_max[r] = 0.0f;
        log_sum[r] = 0.0f;
        row_loss[r] = 0.0f;
        continue;
      }
      const T* row = lp + r * vocab;
      math::cross_entropy_row_stats(row, vocab, &row_max[r], &log_sum[r]);
      row_loss[r] =
          math::cross_entropy_loss(row_max[r], log_sum[r], static_cast<float>(row[targets[r]]));
    }
  });
}

float cross_entropy_mean(const float* row_loss, int64_t rows, int64_t count) {
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) total += static_cast<double>(row_loss[r]);
  return count > 0 ? static_cast<float>(total / static_cast<double>(count)) : 0.0f;
}

void cross_entropy_rows_backward(const Tensor& logits, const int32_t* targets, int32_t ignore_index,
                                 const float* row_max, const float* log_sum, float scale,
                                 const Tensor& dst, bool accumulate) {
  const int64_t rows = logits.size(0);
  const int64_t vocab = logits.size(1);
  const bool parallel = rows * vocab >= kParallelMinElements;
  visit_float_dtype(logits.dtype(), kOp, [&](auto logits_tag) {
    using T = decltype(logits_tag);
    const T* lp = logits.data<T>();
    visit_float_dtype(dst.dtype(), kOp, [&](auto dst_tag) {
      using S = decltype(dst_tag);
      S* dlogits = dst.data<S>();
#pragma omp parallel for schedule(static) if (parallel)
      for (int64_t r = 0; r < rows; ++r) {
        S* row_grad = dlogits + r * vocab;
        if (targets[r] == ignore_index) {
          if (!accumulate) {
            for (int64_t i = 0; i < vocab; ++i) row_grad[i] = S(0.0f);
          }
          continue;
        }
        math::cross_entropy_row_backward(lp + r * vocab, vocab, row_max[r], log_sum[r], targets[r],
                                         scale, row_grad, accumulate);
      }
    });
  });
}

}  // namespace detail

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
  const bool record = needs_grad({&logits});
  RowBuffers buffers;
  Tensor device_counts;
  int64_t count = 0;
  Tensor loss =
      detail::on_device(logits)
          ? forward_on_device(logits, targets, ignore_index, record, buffers, device_counts)
          : forward(logits, targets, ignore_index, record, buffers, count);

  if (record) {
    Saved saved = saved_rows(logits, targets, buffers.row_max, buffers.log_sum, ignore_index);
    saved.count = count;
    saved.device_counts = device_counts;
    const auto run = detail::on_device(logits) ? &backward_on_device : &backward;
    record_op(kOp, {&logits}, {&loss}, [saved, run](BackwardContext& ctx) { run(saved, ctx); });
  }
  return loss;
}

}  // namespace zs::ops
