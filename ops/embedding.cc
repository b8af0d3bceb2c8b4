// embedding: row gather in forward, deterministic scatter-add in backward.
//
// Backward buckets positions by id with a stable counting sort (serial, O(N + V)), so each table
// row's gradient is a sum over its positions in increasing position order, computed and written
// by one thread: no atomics, no per-thread copies of the [V, C] gradient, and the same bits for
// any thread count.
//
// On a device (cuda:N): its gather and sort-based scatter-add kernels (ops/device_ops.h; on CUDA
// ops/cuda/nn_kernels.h, bitwise equal to this file's loops: same grouping, same fp32 sums in
// position order), on the stream of the tensors' allocator, with the same autograd record, saved
// ids handle and output category. The ids are
// checked by the kernels, which flag the first out-of-range position; forward and backward each
// read that flag back once (one 4-byte download on the op's stream: a host sync, the host waits
// for the kernels) and throw the CPU's message, naming the position and (one more 4-byte
// download, on that error path only) the value. The backward's workspace (sort keys and values,
// run bounds, CUB's temporaries) is a workspace-category tensor on the same allocator.
#include "ops/embedding.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "ops/device_ops.h"
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

// The forward's message for ids at flat position p = id outside [0, vocab).
void check_id(const Tensor& table, const Tensor& ids, int64_t p, int32_t id) {
  const int64_t vocab = table.size(0);
  ZS_CHECK(id >= 0 && id < vocab, kOp, ": ids", index_str(p, ids.shape()), " = ", id,
           " (flat position ", p, " of ids ", ids.describe(),
           ") is out of range [0, V) with V = ", vocab, " rows in table ", table.describe(),
           "; check the tokenizer's vocabulary size (or the sequence length, for positions) "
           "against the model's");
}

// The backward's message: the ids were valid in forward.
void check_id_unchanged(const Tensor& ids, int64_t vocab, int64_t p, int32_t id) {
  ZS_CHECK(id >= 0 && id < vocab, kOp, " backward: ids", index_str(p, ids.shape()), " = ", id,
           " is out of range [0, ", vocab,
           "); the ids were valid in forward, so they "
           "were overwritten before backward: keep them unchanged until backward has run");
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
    check_id_unchanged(ids, vocab, p, id[p]);
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

// Reads a kernel's bad-position flag back (the host sync) and returns the flagged flat
// position, or -1 when none was flagged.
int64_t flagged_position(const Tensor& flag, int64_t positions) {
  const int64_t bad = detail::read_int32(flag)[0];
  return bad < positions ? bad : -1;
}

// The backward on a device (ops/device_ops.h): the kernel reads dy as it is and writes the sink in
// its own dtype (no staging), and flags the first id out of range.
void backward_on_device(const Tensor& ids, int64_t vocab, int64_t cols, BackwardContext& ctx) {
  Tensor dy_any = ctx.grad_output(0);
  GradSink sink = ctx.grad_input(0);
  if (!dy_any.defined() || !sink) return;
  const detail::DeviceOps& device = detail::device_ops(ids, kOp);
  device.check_tensors(kOp, {&ids, &dy_any, &sink.buffer});
  const int64_t positions = ids.numel();
  const size_t workspace_bytes = device.embedding_backward_workspace_bytes(ids, vocab);
  Tensor workspace;
  if (workspace_bytes > 0) {
    const auto floats = static_cast<int64_t>((workspace_bytes + sizeof(float) - 1) / sizeof(float));
    workspace = detail::new_workspace({floats}, dy_any, "embedding backward sort workspace");
  }
  // The kernel checks the ids only when it has rows to write (positions, vocab, cols > 0).
  const bool checks_ids = positions > 0 && vocab > 0 && cols > 0;
  Tensor flag;
  if (checks_ids) flag = detail::new_index_flag(ids, positions, "embedding backward bad id flag");
  device.embedding_backward(ids, dy_any, vocab, cols, sink.buffer, sink.accumulate, workspace,
                            workspace_bytes, flag);
  if (!checks_ids) return;
  const int64_t bad = flagged_position(flag, positions);
  if (bad < 0) return;
  check_id_unchanged(ids, vocab, bad, detail::read_int32_at(ids, bad));
  ZS_THROW(InvalidArgument, kOp, " backward: the device flagged ids", index_str(bad, ids.shape()),
           " as out of range [0, ", vocab,
           ") but it reads back in range: the ids are being overwritten while backward runs");
}

// The forward on a device: the kernel gathers and flags the first id out of range, read back once.
Tensor forward_on_device(const Tensor& table, const Tensor& ids, const Shape& out_shape) {
  const detail::DeviceOps& device = detail::device_ops(table, kOp);
  // Refused before the flag's fill or any download, for what the kernels need.
  device.check_tensors(kOp, {&table, &ids});
  const int64_t vocab = table.size(0);
  const int64_t cols = table.size(1);
  const int64_t positions = ids.numel();
  Tensor out = detail::new_output(out_shape, table.dtype(), table, kOp);
  if (positions > 0 && cols == 0) {
    // Nothing to gather, so the kernel checks nothing: check the ids on the host, as the CPU.
    const std::vector<int32_t> id = detail::read_int32(ids);
    for (int64_t p = 0; p < positions; ++p) check_id(table, ids, p, id[static_cast<size_t>(p)]);
  } else if (positions > 0) {
    Tensor flag = detail::new_index_flag(ids, positions, "embedding bad id flag");
    device.embedding_forward(table, ids, out, flag);
    const int64_t bad = flagged_position(flag, positions);
    if (bad >= 0) {
      check_id(table, ids, bad, detail::read_int32_at(ids, bad));
      ZS_THROW(InvalidArgument, kOp, ": the device flagged ids", index_str(bad, ids.shape()),
               " (flat position ", bad, " of ids ", ids.describe(), ") as out of range [0, ", vocab,
               ") but it reads back in range: were the ids overwritten while the op ran?");
    }
  }
  return out;
}

// The CPU forward: every id checked first (the first bad one is reported), then the row copies.
Tensor forward(const Tensor& table, const Tensor& ids, const Shape& out_shape) {
  const int64_t cols = table.size(1);
  const int64_t positions = ids.numel();
  const int32_t* id = ids.data<int32_t>();
  for (int64_t p = 0; p < positions; ++p) check_id(table, ids, p, id[p]);

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
  return out;
}

}  // namespace

Tensor embedding(const Tensor& table, const Tensor& ids) {
  detail::check_float_input(kOp, "table", table);
  ZS_CHECK(table.dim() == 2, kOp, ": table ", table.describe(), " must be 2-D [V, C]");
  ZS_CHECK(ids.defined(), kOp, ": argument 'ids' is undefined");
  detail::check_supported_device(kOp, ids);
  ZS_CHECK(ids.dtype() == DType::kI32, kOp, ": ids ", ids.describe(),
           " must be int32 row indices into table ", table.describe());
  detail::check_same_device(kOp, {&table, &ids});
  const int64_t vocab = table.size(0);
  const int64_t cols = table.size(1);
  Shape out_shape = ids.shape();
  out_shape.push_back(cols);
  Tensor out = detail::on_device(table) ? forward_on_device(table, ids, out_shape)
                                        : forward(table, ids, out_shape);
  if (needs_grad({&table})) {
    const auto run = detail::on_device(table) ? &backward_on_device : &backward;
    record_op(kOp, {&table}, {&out},
              [ids, vocab, cols, run](BackwardContext& ctx) { run(ids, vocab, cols, ctx); });
  }
  return out;
}

}  // namespace zs::ops
