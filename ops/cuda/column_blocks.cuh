// Deterministic column sums over many rows, in parallel (nvcc only; internal to ops/cuda): the
// rows are cut into blocks of kColumnBlockRows; pass 1 gives each (column, block) pair one thread
// that sums the block's rows in row order from zero into a partial, and pass 2 gives each column
// one thread that adds its partials in block order. The order is fixed by the shape alone, so
// the result is the same bits on every run — and, where the CPU sums the same way (layernorm's
// dgamma/dbeta, ops/layernorm.cc), the CPU's bits.
//
// One thread per column over all rows (the first version) ran 16384 rows x 768 columns in ~1.8
// ms on an H100 (3 blocks of threads for the whole GPU); the blocked form spreads the same work
// over rows/64 times as many threads.
#pragma once

#include <cstdint>

#include "ops/cuda/launch.cuh"

namespace zs::ops::cuda::detail {

// Rows per block of the partial sums (ops/layernorm.cc's kParamGradBlockRows: the same order).
constexpr int64_t kColumnBlockRows = 64;

__host__ __device__ inline int64_t column_blocks(int64_t rows) {
  return (rows + kColumnBlockRows - 1) / kColumnBlockRows;
}

// The grid of pass 1: x over columns (kThreadsPerBlock each), y over row blocks (grid-stride
// beyond the limit of gridDim.y).
inline dim3 column_block_grid(int64_t rows, int64_t cols) {
  const int64_t x = (cols + kThreadsPerBlock - 1) / kThreadsPerBlock;
  const int64_t y = column_blocks(rows);
  return dim3(static_cast<unsigned int>(x < kMaxBlocks ? x : kMaxBlocks),
              static_cast<unsigned int>(y < kMaxBlocks ? y : kMaxBlocks));
}

// Pass 1's loop: calls body(column, row_begin, row_end, block) for every (column, block) of this
// thread.
template <typename Body>
__device__ __forceinline__ void for_each_column_block(int64_t rows, int64_t cols, Body body) {
  const int64_t blocks = column_blocks(rows);
  for (int64_t j = grid_index(); j < cols; j += grid_stride()) {
    for (int64_t b = blockIdx.y; b < blocks; b += gridDim.y) {
      const int64_t begin = b * kColumnBlockRows;
      const int64_t end = begin + kColumnBlockRows < rows ? begin + kColumnBlockRows : rows;
      body(j, begin, end, b);
    }
  }
}

// Pass 2 (tensor_kernels.cu): out[j] = (accumulate ? out[j] : 0) + Σ_b partials[b * stride + j],
// blocks in order (the block sum itself starts from zero, as the CPU's). `partials` may hold
// several interleaved sets (stride > cols).
void sum_column_blocks(const float* partials, int64_t blocks, int64_t stride, int64_t cols,
                       float* out, bool accumulate, cudaStream_t stream);

}  // namespace zs::ops::cuda::detail
