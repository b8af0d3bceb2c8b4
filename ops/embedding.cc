// embedding: row gather in forward, deterministic scatter-add in backward.
//
// Backward buckets positions by id with a stable counting sort (serial, O(N + V)), so each table
// row's gradient is a sum over its positions in increasing position order, computed and written
// by one thread: no atomics, no per-thread copies of the [V, C] gradient, and the same bits for
// any thread count.
#include "ops/embedding.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "ops/op_utils.h"
#include "runtime/half.h"

namespace zs::ops {
namespace {

constexpr const char* kOp = "embedding";
// Below this many elements the loops run on the calling thread (same results either way).
constexpr int64_t kParallelMinElements = 1 << 14;

// "[1, 3]" for flat position 7 of shape [2, 4].
std::string index_str(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] > 0 ? flat % shape[d] : 0;
    flat = shape[d] > 0 ? flat / shape[d] : 0;
  }
  return shape_str(index);
}

void backward(const Tensor& ids, int64_t vocab, int64_t cols, BackwardContext& ctx) {
  Tensor dy_any = ctx.grad_output(0);
  GradSink sink = ctx.grad_input(0);
  if (!dy_any.defined() || !sink) return;
  Tensor dy32 = detail::as_f32(dy_any);  // a converted workspace copy when 16-bit
  const float* dy = dy32.data<float>();
  const int32_t* id = ids.data<int32_t>();
  const int64_t positions = ids.numel();

  // Stable counting sort: positions_by_row[row_begin[v] .. row_begin[v + 1]) are the positions
  // whose id is v, in increasing order.
  std::vector<int64_t> row_begin(static_cast<size_t>(vocab) + 1, 0);
  for (int64_t p = 0; p < positions; ++p) {
    ZS_CHECK(id[p] >= 0 && id[p] < vocab, kOp, " backward: ids", index_str(p, ids.shape()), " = ",
             id[p], " is out of range [0, ", vocab,
             "); the ids were valid in forward, so they "
             "were overwritten before backward: keep them unchanged until backward has run");
    ++row_begin[static_cast<size_t>(id[p]) + 1];
  }
  for (int64_t v = 0; v < vocab; ++v) {
    row_begin[static_cast<size_t>(v) + 1] += row_begin[static_cast<size_t>(v)];
  }
  std::vector<int64_t> positions_by_row(static_cast<size_t>(positions));
  {
    std::vector<int64_t> next(row_begin.begin(), row_begin.end() - 1);
    for (int64_t p = 0; p < positions; ++p) {
      positions_by_row[static_cast<size_t>(next[static_cast<size_t>(id[p])]++)] = p;
    }
  }

  const bool accumulate = sink.accumulate;
  const bool parallel = (positions + vocab) * cols >= kParallelMinElements;
  detail::visit_float_dtype(sink.buffer.dtype(), kOp, [&](auto sink_tag) {
    using S = decltype(sink_tag);
    S* dtable = sink.buffer.data<S>();
#pragma omp parallel if (parallel)
    {
      std::vector<float> row_sum(static_cast<size_t>(cols));
#pragma omp for schedule(static)
      for (int64_t v = 0; v < vocab; ++v) {
        S* out = dtable + v * cols;
        const int64_t begin = row_begin[static_cast<size_t>(v)];
        const int64_t end = row_begin[static_cast<size_t>(v) + 1];
        if (begin == end) {
          if (!accumulate) {
            for (int64_t j = 0; j < cols; ++j) out[j] = S(0.0f);
          }
          continue;
        }
        std::fill(row_sum.begin(), row_sum.end(), 0.0f);
        for (int64_t k = begin; k < end; ++k) {
          const float* dy_row = dy + positions_by_row[static_cast<size_t>(k)] * cols;
          for (int64_t j = 0; j < cols; ++j) row_sum[static_cast<size_t>(j)] += dy_row[j];
        }
        for (int64_t j = 0; j < cols; ++j) {
          const float value = row_sum[static_cast<size_t>(j)];
          out[j] = accumulate ? S(static_cast<float>(out[j]) + value) : S(value);
        }
      }
    }
  });
}

}  // namespace

Tensor embedding(const Tensor& table, const Tensor& ids) {
  // No CUDA path yet (its kernels are being written in ops/cuda): refuse device tensors by name.
  detail::refuse_unwired_device(kOp, table);
  detail::refuse_unwired_device(kOp, ids);
  detail::check_float_input(kOp, "table", table);
  ZS_CHECK(table.dim() == 2, kOp, ": table ", table.describe(), " must be 2-D [V, C]");
  ZS_CHECK(ids.defined(), kOp, ": argument 'ids' is undefined");
  detail::check_cpu(kOp, ids);
  ZS_CHECK(ids.dtype() == DType::kI32, kOp, ": ids ", ids.describe(),
           " must be int32 row indices into table ", table.describe());
  const int64_t vocab = table.size(0);
  const int64_t cols = table.size(1);
  const int64_t positions = ids.numel();
  const int32_t* id = ids.data<int32_t>();
  for (int64_t p = 0; p < positions; ++p) {
    ZS_CHECK(id[p] >= 0 && id[p] < vocab, kOp, ": ids", index_str(p, ids.shape()), " = ", id[p],
             " (flat position ", p, " of ids ", ids.describe(),
             ") is out of range [0, V) with V = ", vocab, " rows in table ", table.describe(),
             "; check the tokenizer's vocabulary size (or the sequence length, for positions) "
             "against the model's");
  }

  Shape out_shape = ids.shape();
  out_shape.push_back(cols);
  Tensor out = detail::new_output(out_shape, table.dtype(), table, kOp);
  const size_t row_bytes = static_cast<size_t>(cols) * dtype_size(table.dtype());
  const char* src = static_cast<const char*>(table.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  const bool parallel = positions * cols >= kParallelMinElements;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t p = 0; p < (row_bytes > 0 ? positions : 0); ++p) {
    std::memcpy(dst + static_cast<size_t>(p) * row_bytes,
                src + static_cast<size_t>(id[p]) * row_bytes, row_bytes);
  }

  if (needs_grad({&table})) {
    record_op(kOp, {&table}, {&out},
              [ids, vocab, cols](BackwardContext& ctx) { backward(ids, vocab, cols, ctx); });
  }
  return out;
}

}  // namespace zs::ops
