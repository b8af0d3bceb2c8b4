// linear_cross_entropy: the LM head's GEMMs (linear's, on row chunks) around cross_entropy's row
// loops (ops/cross_entropy_impl.h), so that the [N, V] logits exist one chunk at a time.
//
// A chunk's logits and, in backward, their gradient are allocated in category activations: they
// are what the unfused head kept there (the logits and their gradient), one chunk's worth. The
// fp32 staging of 16-bit operands is workspace, as in linear.
//
// Backward recomputes the logits with the forward's GEMM on the same operands, so the saved row
// statistics match them bit for bit. The chunks' dh rows are disjoint; dweight is accumulated
// chunk after chunk into one fp32 buffer (the sink itself when fp32), the first chunk overwriting
// it unless the sink accumulates.
#include "ops/linear_cross_entropy.h"

#include <algorithm>
#include <string>

#include "ops/cpu/gemm.h"
#include "ops/cross_entropy_impl.h"
#include "ops/linear.h"
#include "ops/op_utils.h"

namespace zs::ops {
namespace {

constexpr const char* kOp = "linear_cross_entropy";

struct Head {
  Tensor h;        // [rows, width]
  Tensor weight;   // [vocab, width]
  Tensor targets;  // int32 [rows]
  Tensor row_max;  // fp32 [rows]; 0 for ignored rows
  Tensor log_sum;  // fp32 [rows]; 0 for ignored rows
  int64_t rows = 0;
  int64_t vocab = 0;
  int64_t width = 0;
  int64_t chunk_rows = 0;  // >= 1
  int64_t count = 0;       // valid targets: the mean's divisor
  int32_t ignore_index = kDefaultIgnoreIndex;
};

// A chunk's buffers: its logits (or their gradient) in h's dtype, category activations, and for
// logits the fp32 GEMM output a 16-bit chunk is rounded from (workspace; undefined for fp32).
// Sized for a full chunk; rows_of() views the first rows of the last, shorter one.
struct ChunkBuffer {
  Tensor values;
  Tensor staging;

  ChunkBuffer(const Head& head, const char* what, bool gemm_output) {
    const int64_t rows = std::min(head.chunk_rows, head.rows);
    values = Tensor::empty({rows, head.vocab}, head.h.dtype(), head.h.allocator(),
                           MemoryCategory::kActivations, what);
    if (gemm_output && head.h.dtype() != DType::kF32) {
      staging =
          detail::new_workspace({rows, head.vocab}, head.h, "linear_cross_entropy fp32 logits");
    }
  }
  static Tensor rows_of(const Tensor& t, int64_t rows) {
    return !t.defined() || t.size(0) == rows ? t : t.slice(0, {rows, t.size(1)});
  }
};

// logits = rows [begin, begin + logits.size(0)) of h · weightᵀ: linear's forward GEMM on them.
void chunk_logits(const Head& head, const float* h32, const float* w32, int64_t begin,
                  const Tensor& logits, const Tensor& staging) {
  const int64_t rows = logits.size(0);
  float* out = staging.defined() ? staging.data<float>() : logits.data<float>();
  cpu::sgemm(false, true, rows, head.vocab, head.width, 1.0f, h32 + begin * head.width, head.width,
             w32, head.width, 0.0f, out, head.vocab);
  if (staging.defined()) detail::store_f32(logits, out);
}

// The CPU forward: every target checked first (the first bad row is reported), then the chunks;
// the mean over the valid rows summed in row order in double. Fills head.row_max, .log_sum, .count.
Tensor forward(Head& head, bool record) {
  const int32_t* targets = head.targets.data<int32_t>();
  const std::string logits =
      zs::detail::concat("[", head.rows, ", ", head.vocab, "] (h ", head.h.describe(),
                         " times weight ", head.weight.describe(), " transposed)");
  head.count =
      detail::count_checked_targets(kOp, logits, head.vocab, targets, head.rows, head.ignore_index);
  auto per_row = [&](const char* what) {
    return record ? detail::new_output({head.rows}, DType::kF32, head.h, what)
                  : detail::new_workspace({head.rows}, head.h, what);
  };
  head.row_max = per_row("linear_cross_entropy row max");
  head.log_sum = per_row("linear_cross_entropy log-sum-exp");
  Tensor row_loss = detail::new_workspace({head.rows}, head.h, "linear_cross_entropy row losses");
  float* row_max = head.row_max.data<float>();
  float* log_sum = head.log_sum.data<float>();
  float* losses = row_loss.data<float>();
  if (head.rows > 0) {
    Tensor h32 = detail::as_f32(head.h);
    Tensor w32 = detail::as_f32(head.weight);
    ChunkBuffer chunk(head, "linear_cross_entropy chunk logits", /*gemm_output=*/true);
    for (int64_t begin = 0; begin < head.rows; begin += head.chunk_rows) {
      const int64_t rows = std::min(head.chunk_rows, head.rows - begin);
      const Tensor chunk_values = ChunkBuffer::rows_of(chunk.values, rows);
      chunk_logits(head, h32.data<float>(), w32.data<float>(), begin, chunk_values,
                   ChunkBuffer::rows_of(chunk.staging, rows));
      detail::cross_entropy_rows_forward(chunk_values, targets + begin, head.ignore_index,
                                         row_max + begin, log_sum + begin, losses + begin);
    }
  }
  Tensor loss = detail::new_output({1}, DType::kF32, head.h, kOp);
  loss.data<float>()[0] = detail::cross_entropy_mean(losses, head.rows, head.count);
  return loss;
}

void backward(const Head& head, BackwardContext& ctx) {
  Tensor dloss = ctx.grad_output(0);
  if (!dloss.defined()) return;
  GradSink h_sink = ctx.grad_input(0);
  GradSink weight_sink = ctx.grad_input(1);
  if (!h_sink && !weight_sink) return;
  // count == 0 means every row is ignored: all-zero gradient, never 0/0.
  const float scale = head.count > 0 ? dloss.item() / static_cast<float>(head.count) : 0.0f;
  Tensor h32 = detail::as_f32(head.h);
  Tensor w32 = detail::as_f32(head.weight);
  const float* hp = h32.data<float>();
  const float* wp = w32.data<float>();
  detail::F32GradBuffer dh;
  detail::F32GradBuffer dweight;
  if (h_sink) dh = detail::f32_grad_buffer(h_sink, head.h);
  if (weight_sink) dweight = detail::f32_grad_buffer(weight_sink, head.weight);
  const int64_t width = head.width;
  const int64_t vocab = head.vocab;
  bool dweight_written = dweight.accumulate;
  if (head.rows > 0) {
    ChunkBuffer logits(head, "linear_cross_entropy chunk logits", /*gemm_output=*/true);
    ChunkBuffer dlogits(head, "linear_cross_entropy chunk logits gradient",
                        /*gemm_output=*/false);
    for (int64_t begin = 0; begin < head.rows; begin += head.chunk_rows) {
      const int64_t rows = std::min(head.chunk_rows, head.rows - begin);
      const Tensor chunk_logits_values = ChunkBuffer::rows_of(logits.values, rows);
      chunk_logits(head, hp, wp, begin, chunk_logits_values,
                   ChunkBuffer::rows_of(logits.staging, rows));
      const Tensor chunk_dlogits = ChunkBuffer::rows_of(dlogits.values, rows);
      detail::cross_entropy_rows_backward(chunk_logits_values, head.targets.data<int32_t>() + begin,
                                          head.ignore_index, head.row_max.data<float>() + begin,
                                          head.log_sum.data<float>() + begin, scale, chunk_dlogits,
                                          /*accumulate=*/false);
      // linear's backward GEMMs on the chunk, from the gradient as linear would have received it
      // (in the logits' dtype, read as fp32).
      Tensor dy32 = detail::as_f32(chunk_dlogits);
      const float* dy = dy32.data<float>();
      if (h_sink) {
        cpu::sgemm(false, false, rows, width, vocab, 1.0f, dy, vocab, wp, width,
                   dh.accumulate ? 1.0f : 0.0f, dh.buffer.data<float>() + begin * width, width);
      }
      if (weight_sink) {
        cpu::sgemm(true, false, vocab, width, rows, 1.0f, dy, vocab, hp + begin * width, width,
                   dweight_written ? 1.0f : 0.0f, dweight.buffer.data<float>(), width);
        dweight_written = true;
      }
    }
  }
  if (h_sink) detail::finish_grad(h_sink, dh);
  if (weight_sink) {
    // No rows: linear's GEMM over zero rows gives a zero gradient; write it.
    if (!dweight_written) dweight.buffer.fill(0.0f);
    detail::finish_grad(weight_sink, dweight);
  }
}

}  // namespace

int64_t head_chunk_rows(int64_t vocab) {
  ZS_CHECK(vocab >= 1, kOp, ": the vocabulary must have at least one word, got ", vocab);
  return std::max<int64_t>(1, kHeadChunkLogitBytes / (4 * vocab));
}

Tensor linear_cross_entropy(const Tensor& h, const Tensor& weight, const Tensor& targets,
                            int32_t ignore_index, int64_t chunk_rows) {
  detail::check_float_input(kOp, "h", h);
  detail::check_float_input(kOp, "weight", weight);
  ZS_CHECK(h.dim() == 2, kOp, ": h ", h.describe(),
           " must be 2-D [N, K]; view [B, T, K] hidden states as [B*T, K]");
  ZS_CHECK(weight.dim() == 2 && weight.size(1) == h.size(1), kOp, ": weight ", weight.describe(),
           " must be [V, ", h.size(1), "] (out_features, in_features) for h ", h.describe());
  ZS_CHECK(weight.size(0) >= 1, kOp, ": weight ", weight.describe(), " has no classes (V = 0)");
  detail::check_same_dtype(kOp, h, weight);
  ZS_CHECK(targets.defined(), kOp, ": argument 'targets' is undefined");
  ZS_CHECK(targets.dtype() == DType::kI32 && targets.dim() == 1 && targets.size(0) == h.size(0),
           kOp, ": targets ", targets.describe(), " must be int32 [", h.size(0),
           "], one class index per row of h ", h.describe());
  detail::check_same_device(kOp, {&h, &weight, &targets});
  ZS_CHECK(chunk_rows >= 0, kOp, ": chunk_rows must be >= 0 (0 = head_chunk_rows), got ",
           chunk_rows);
  if (detail::on_device(h)) return cross_entropy(linear(h, weight), targets, ignore_index);

  Head head;
  head.h = h;
  head.weight = weight;
  head.targets = targets;
  head.rows = h.size(0);
  head.vocab = weight.size(0);
  head.width = h.size(1);
  head.chunk_rows = chunk_rows > 0 ? chunk_rows : head_chunk_rows(head.vocab);
  head.ignore_index = ignore_index;
  const bool record = needs_grad({&h, &weight});
  Tensor loss = forward(head, record);
  if (record) {
    record_op(kOp, {&h, &weight}, {&loss}, [head](BackwardContext& ctx) { backward(head, ctx); });
  }
  return loss;
}

}  // namespace zs::ops
