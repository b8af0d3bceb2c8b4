// Embedding kernels (see nn_kernels.h): a row gather of bit copies in forward; in backward the
// CPU's deterministic scatter-add rebuilt from a stable sort, so the gradient is bitwise the CPU's.
//
// Backward pipeline, all on the caller's stream in the caller's workspace:
//   1. pairs (key = id, value = position), with out-of-range ids mapped to the key `vocab`, which
//      sorts after every real row and is never summed (and is flagged);
//   2. cub::DeviceRadixSort::SortPairs on the key bits [0, bit width of vocab): an LSD radix sort,
//      stable, so the positions of one id stay in increasing order — the CPU's counting sort;
//   3. run bounds: row_begin[v], row_end[v] of each id's run in the sorted order (both zeroed
//      first, so rows no id hits have an empty run);
//   4. one thread per (row, column): the run's dout values summed in order in fp32 from 0, written
//      once (added once when accumulating) — the CPU's loop, operation for operation.
#include <cub/device/device_radix_sort.cuh>

#include <climits>

#include "ops/cuda/launch.cuh"
#include "ops/cuda/nn_kernels.h"
#include "runtime/cuda/check.h"

namespace zs::ops::cuda {
namespace {

using detail::blocks_for;
using detail::grid_index;
using detail::grid_stride;
using detail::kThreadsPerBlock;
using detail::load;
using detail::store;

constexpr int kRowThreads = 128;  // one block per output/table row, threads across the columns
// Workspace pieces start at this alignment (CUB's temporary storage wants 256 bytes).
constexpr size_t kWorkspaceAlign = 256;

__device__ __forceinline__ bool id_in_range(int32_t id, int64_t vocab) {
  return id >= 0 && static_cast<int64_t>(id) < vocab;
}

// Word = the storage type's width; the copy moves bits, never converts.
template <typename Word>
__global__ void embedding_gather_kernel(const Word* table, const int32_t* ids, Word* out,
                                        int64_t vocab, int64_t cols, int32_t* first_bad_position) {
  const int64_t position = blockIdx.x;
  const int32_t id = ids[position];
  Word* out_row = out + position * cols;
  if (!id_in_range(id, vocab)) {
    for (int64_t j = threadIdx.x; j < cols; j += kRowThreads) out_row[j] = Word(0);
    if (threadIdx.x == 0) atomicMin(first_bad_position, static_cast<int32_t>(position));
    return;
  }
  const Word* table_row = table + static_cast<int64_t>(id) * cols;
  for (int64_t j = threadIdx.x; j < cols; j += kRowThreads) out_row[j] = table_row[j];
}

__global__ void embedding_pairs_kernel(const int32_t* ids, int64_t positions, int64_t vocab,
                                       uint32_t* keys, int32_t* values,
                                       int32_t* first_bad_position) {
  for (int64_t p = grid_index(); p < positions; p += grid_stride()) {
    const int32_t id = ids[p];
    const bool valid = id_in_range(id, vocab);
    if (!valid) atomicMin(first_bad_position, static_cast<int32_t>(p));
    keys[p] = valid ? static_cast<uint32_t>(id) : static_cast<uint32_t>(vocab);
    values[p] = static_cast<int32_t>(p);
  }
}

__global__ void embedding_run_bounds_kernel(const uint32_t* sorted_keys, int64_t positions,
                                            int64_t vocab, int32_t* row_begin, int32_t* row_end) {
  for (int64_t k = grid_index(); k < positions; k += grid_stride()) {
    const uint32_t key = sorted_keys[k];
    if (static_cast<int64_t>(key) >= vocab) continue;  // a flagged id: summed into no row
    if (k == 0 || sorted_keys[k - 1] != key) row_begin[key] = static_cast<int32_t>(k);
    if (k + 1 == positions || sorted_keys[k + 1] != key) row_end[key] = static_cast<int32_t>(k + 1);
  }
}

template <typename D, typename S>
__global__ void embedding_row_grad_kernel(const D* dout, const int32_t* sorted_positions,
                                          const int32_t* row_begin, const int32_t* row_end,
                                          int64_t cols, S* dtable, bool accumulate) {
  const int64_t row = blockIdx.x;
  const int32_t begin = row_begin[row];
  const int32_t end = row_end[row];
  S* out = dtable + row * cols;
  if (begin == end) {
    if (!accumulate) {
      for (int64_t j = threadIdx.x; j < cols; j += kRowThreads) store(out, j, 0.0f);
    }
    return;
  }
  for (int64_t j = threadIdx.x; j < cols; j += kRowThreads) {
    float sum = 0.0f;
    for (int32_t k = begin; k < end; ++k) {
      sum += load(dout, static_cast<int64_t>(sorted_positions[k]) * cols + j);
    }
    store(out, j, accumulate ? load(out, j) + sum : sum);
  }
}

// The key bits the sort looks at: enough for 0..vocab (vocab itself marks a bad id).
int key_bits(int64_t vocab) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) <= vocab) ++bits;
  return bits;
}

size_t align_up(size_t bytes) {
  return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

// The workspace's pieces, each aligned, in one layout shared by the size query and the launcher.
struct BackwardWorkspace {
  size_t keys_in = 0, keys_out = 0, values_in = 0, values_out = 0;
  size_t row_begin = 0, row_end = 0, sort_temp = 0;
  size_t sort_temp_bytes = 0;
  size_t total = 0;  // including kWorkspaceAlign of slack for an unaligned base
};

BackwardWorkspace plan_workspace(int64_t positions, int64_t vocab) {
  BackwardWorkspace w;
  const size_t pairs = align_up(static_cast<size_t>(positions) * sizeof(int32_t));
  const size_t rows = align_up(static_cast<size_t>(vocab) * sizeof(int32_t));
  size_t offset = 0;
  // The offset of the next piece, `bytes` long (a multiple of kWorkspaceAlign): the pieces are
  // laid out one after the other.
  auto place = [&offset](size_t bytes) {
    const size_t at = offset;
    offset += bytes;
    return at;
  };
  w.keys_in = place(pairs);
  w.keys_out = place(pairs);
  w.values_in = place(pairs);
  w.values_out = place(pairs);
  w.row_begin = place(rows);
  w.row_end = place(rows);
  // The size query only (null storage): nothing is launched.
  ZS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, w.sort_temp_bytes, static_cast<const uint32_t*>(nullptr),
      static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
      static_cast<int32_t*>(nullptr), static_cast<int>(positions), 0, key_bits(vocab)));
  w.sort_temp = place(align_up(w.sort_temp_bytes));
  w.total = offset + kWorkspaceAlign;
  return w;
}

void check_sizes(const char* op, int64_t positions, int64_t vocab, int64_t cols) {
  ZS_CHECK(positions >= 0 && positions <= INT32_MAX, op, ": ", positions,
           " ids; expected 0..2^31-1 (int32 positions)");
  ZS_CHECK(vocab >= 0 && vocab < INT32_MAX, op, ": vocab = ", vocab, "; expected 0..2^31-2");
  ZS_CHECK(cols >= 0, op, ": cols = ", cols, " is negative");
}

}  // namespace

void embedding_forward(const void* table, const int32_t* ids, void* out, int64_t vocab,
                       int64_t cols, int64_t positions, DType dtype, int32_t* first_bad_position,
                       cudaStream_t stream) {
  constexpr const char* kOp = "cuda embedding_forward";
  check_sizes(kOp, positions, vocab, cols);
  ZS_CHECK(dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16, kOp, ": dtype ",
           dtype_name(dtype), " is not supported (expected fp32, fp16 or bf16)");
  if (positions == 0 || cols == 0) return;
  ZS_CHECK(first_bad_position != nullptr, kOp,
           ": first_bad_position must be a device int32 (set to INT32_MAX before the call)");
  const auto launch = [&](auto word_tag) {
    using Word = decltype(word_tag);
    embedding_gather_kernel<Word><<<static_cast<unsigned int>(positions), kRowThreads, 0, stream>>>(
        static_cast<const Word*>(table), ids, static_cast<Word*>(out), vocab, cols,
        first_bad_position);
    ZS_CUDA_CHECK(cudaGetLastError());
  };
  if (dtype == DType::kF32) {
    launch(uint32_t{});
  } else {
    launch(uint16_t{});
  }
}

size_t embedding_backward_workspace_bytes(int64_t positions, int64_t vocab) {
  check_sizes("cuda embedding_backward_workspace_bytes", positions, vocab, 0);
  if (positions == 0) return 0;
  return plan_workspace(positions, vocab).total;
}

void embedding_backward(const int32_t* ids, const void* dout, DType dout_dtype, int64_t positions,
                        int64_t vocab, int64_t cols, void* dtable, DType dtable_dtype,
                        bool accumulate, void* workspace, size_t workspace_bytes,
                        int32_t* first_bad_position, cudaStream_t stream) {
  constexpr const char* kOp = "cuda embedding_backward";
  check_sizes(kOp, positions, vocab, cols);
  ZS_CHECK(
      dtable_dtype == DType::kF32 || dtable_dtype == DType::kF16 || dtable_dtype == DType::kBF16,
      kOp, ": the gradient sink's dtype ", dtype_name(dtable_dtype),
      " is not supported (expected fp32, fp16 or bf16)");
  if (vocab == 0 || cols == 0) return;
  if (positions == 0) {
    // No id: every row of a fresh sink is zero (all-zero bits are +0 in every float dtype).
    if (!accumulate) {
      ZS_CUDA_CHECK(cudaMemsetAsync(
          dtable, 0, static_cast<size_t>(vocab * cols) * dtype_size(dtable_dtype), stream));
    }
    return;
  }
  ZS_CHECK(first_bad_position != nullptr, kOp,
           ": first_bad_position must be a device int32 (set to INT32_MAX before the call)");
  const BackwardWorkspace plan = plan_workspace(positions, vocab);
  ZS_CHECK(workspace != nullptr && workspace_bytes >= plan.total, kOp, ": the workspace has ",
           workspace_bytes, " bytes, but ", plan.total, " are needed for ", positions, " ids into ",
           vocab, " rows; size it with embedding_backward_workspace_bytes(positions, vocab)");
  const uintptr_t raw = reinterpret_cast<uintptr_t>(workspace);
  char* base =
      reinterpret_cast<char*>((raw + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign);
  auto* keys_in = reinterpret_cast<uint32_t*>(base + plan.keys_in);
  auto* keys_out = reinterpret_cast<uint32_t*>(base + plan.keys_out);
  auto* values_in = reinterpret_cast<int32_t*>(base + plan.values_in);
  auto* values_out = reinterpret_cast<int32_t*>(base + plan.values_out);
  auto* row_begin = reinterpret_cast<int32_t*>(base + plan.row_begin);
  auto* row_end = reinterpret_cast<int32_t*>(base + plan.row_end);
  void* sort_temp = base + plan.sort_temp;
  size_t sort_temp_bytes = plan.sort_temp_bytes;

  embedding_pairs_kernel<<<blocks_for(positions), kThreadsPerBlock, 0, stream>>>(
      ids, positions, vocab, keys_in, values_in, first_bad_position);
  ZS_CUDA_CHECK(cudaGetLastError());
  ZS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_temp, sort_temp_bytes, keys_in, keys_out,
                                                values_in, values_out, static_cast<int>(positions),
                                                0, key_bits(vocab), stream));
  // Runs of rows no id hits stay [0, 0): empty.
  ZS_CUDA_CHECK(
      cudaMemsetAsync(row_begin, 0, static_cast<size_t>(vocab) * sizeof(int32_t), stream));
  ZS_CUDA_CHECK(cudaMemsetAsync(row_end, 0, static_cast<size_t>(vocab) * sizeof(int32_t), stream));
  embedding_run_bounds_kernel<<<blocks_for(positions), kThreadsPerBlock, 0, stream>>>(
      keys_out, positions, vocab, row_begin, row_end);
  ZS_CUDA_CHECK(cudaGetLastError());
  ZS_DISPATCH_FLOAT(dout_dtype, "cuda embedding_backward (dout)", D, {
    ZS_DISPATCH_FLOAT(dtable_dtype, kOp, S, {
      embedding_row_grad_kernel<D, S><<<static_cast<unsigned int>(vocab), kRowThreads, 0, stream>>>(
          static_cast<const D*>(dout), values_out, row_begin, row_end, cols,
          static_cast<S*>(dtable), accumulate);
      ZS_CUDA_CHECK(cudaGetLastError());
    });
  });
}

}  // namespace zs::ops::cuda
