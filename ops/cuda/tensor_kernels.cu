// Kernels of the tensor-level CUDA ops (see tensor_kernels.h): grid-stride loops around the
// ops/math functions, the CPU's block layout for the reductions and column sums, and a bit copy
// for select.
#include <cuda_runtime_api.h>

#include <algorithm>

#include "ops/cuda/column_blocks.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/tensor_kernels.h"
#include "ops/math/elementwise.h"
#include "ops/math/tanh.h"
#include "runtime/cuda/check.h"
#include "runtime/rng.h"

namespace zs::ops::cuda {
namespace {

using detail::blocks_for;
using detail::column_block_grid;
using detail::column_blocks;
using detail::for_each_column_block;
using detail::grid_index;
using detail::grid_stride;
using detail::kMaxBlocks;
using detail::kThreadsPerBlock;
using detail::load;
using detail::store;

// out[i] = value, or out[i] = T(float(out[i]) + value): the CPU's commit of a chunk. The add is
// __fadd_rn, which nvcc never merges with the multiply that produced `value` into an FMA (it
// would with a plain +): the CPU rounds the product first, so must we to match it bit for bit.
template <typename T>
__device__ __forceinline__ void commit(T* out, int64_t i, float value, bool accumulate) {
  store(out, i, accumulate ? __fadd_rn(load(out, i), value) : value);
}

// ---- per-element functors (device code calling the shared math)
struct ScaleFn {
  float alpha;
  __device__ float operator()(float x, int64_t) const { return math::scale(x, alpha); }
};
struct TanhFn {
  __device__ float operator()(float x, int64_t) const { return math::tanh_forward(x); }
};
struct DropoutFn {
  RngKey key;
  float keep_prob;
  float scale;
  __device__ float operator()(float x, int64_t i) const {
    return math::dropout(x, dropout_keep(key, static_cast<uint64_t>(i), keep_prob), scale);
  }
};
struct SumOfSquaresBackwardFn {
  const float* dy;
  __device__ float operator()(float x, int64_t) const {
    return math::sum_of_squares_backward(x, *dy);
  }
};
struct MulFn {
  __device__ float operator()(float a, float b) const { return math::mul(a, b); }
};
struct MulBackwardFn {
  __device__ float operator()(float other, float dy) const { return math::mul_backward(other, dy); }
};
struct TanhBackwardFn {
  __device__ float operator()(float y, float dy) const { return math::tanh_backward(y, dy); }
};

template <typename T, typename Fn>
__global__ void unary_kernel(const T* x, T* y, int64_t n, bool accumulate, Fn fn) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    commit(y, i, fn(load(x, i), i), accumulate);
  }
}

template <typename T, typename Fn>
__global__ void binary_kernel(const T* a, const T* b, T* y, int64_t n, bool accumulate, Fn fn) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    commit(y, i, fn(load(a, i), load(b, i)), accumulate);
  }
}

template <typename T>
__global__ void fill_kernel(T* y, float value, int64_t n, bool accumulate) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) commit(y, i, value, accumulate);
}

template <typename T>
__global__ void fill_from_scalar_kernel(T* y, const float* scalar, double divisor, int64_t n,
                                        bool accumulate) {
  // The CPU's scalar gradient: float(double(g) / divisor), computed once per thread.
  const float value = static_cast<float>(static_cast<double>(*scalar) / divisor);
  for (int64_t i = grid_index(); i < n; i += grid_stride()) commit(y, i, value, accumulate);
}

template <typename T>
__global__ void add_bias_kernel(const T* x, const T* bias, T* y, int64_t n, int64_t cols) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    store(y, i, math::add(load(x, i), load(bias, i % cols)));
  }
}

template <typename T, typename D>
__global__ void broadcast_rows_kernel(const T* bias, D* y, int64_t rows, int64_t cols) {
  // x: the columns, one per thread (its bias value loaded once); y: the rows, grid-strided. No
  // 64-bit division per element (an `i % cols` made this kernel 4x slower than a store pass).
  for (int64_t j = grid_index(); j < cols; j += grid_stride()) {
    const float value = load(bias, j);
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) store(y, r * cols + j, value);
  }
}

// The grid of broadcast_rows_kernel: about 8192 blocks in all (enough to fill any GPU), at most
// one per row.
dim3 broadcast_grid(int64_t rows, int64_t cols) {
  const int64_t x = std::min<int64_t>((cols + kThreadsPerBlock - 1) / kThreadsPerBlock, kMaxBlocks);
  const int64_t y = std::min<int64_t>({rows, std::max<int64_t>(1, 8192 / x), kMaxBlocks});
  return dim3(static_cast<unsigned int>(x), static_cast<unsigned int>(y));
}

// Pass 1 of column_sums_f32 (column_blocks.cuh): one thread per column and block of rows
// (coalesced across the threads of a warp).
template <typename T>
__global__ void column_block_sums_kernel(const T* dy, float* partials, int64_t rows, int64_t cols) {
  for_each_column_block(rows, cols, [&](int64_t j, int64_t begin, int64_t end, int64_t block) {
    float sum = 0.0f;
    for (int64_t r = begin; r < end; ++r) sum += load(dy, r * cols + j);
    partials[block * cols + j] = sum;
  });
}

__global__ void sum_column_blocks_kernel(const float* partials, int64_t blocks, int64_t stride,
                                         int64_t cols, float* out, bool accumulate) {
  for (int64_t j = grid_index(); j < cols; j += grid_stride()) {
    float sum = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) sum += partials[b * stride + j];
    out[j] = accumulate ? out[j] + sum : sum;
  }
}

template <typename T>
__global__ void column_sums_f64_kernel(const T* dy, T* dst, int64_t rows, int64_t cols,
                                       bool accumulate) {
  for (int64_t j = grid_index(); j < cols; j += grid_stride()) {
    double total = 0.0;
    for (int64_t r = 0; r < rows; ++r) total += math::sum_term(load(dy, r * cols + j));
    commit(dst, j, static_cast<float>(total), accumulate);
  }
}

// Each block reduces kChunksPerBlock chunks: thread t serves chunk t / kReduceLanes and lane
// t % kReduceLanes, adding elements lane, lane + kReduceLanes, … of its chunk in order, in
// double; lane 0 then adds its chunk's lanes in lane order. Exactly the CPU's sums.
constexpr int kChunksPerBlock = kThreadsPerBlock / static_cast<int>(kReduceLanes);

template <typename T, bool kSquares>
__global__ void chunk_sums_kernel(const T* x, int64_t n, int64_t chunks, double* chunk_sums) {
  __shared__ double lane_sums[kThreadsPerBlock];
  const int64_t chunk =
      static_cast<int64_t>(blockIdx.x) * kChunksPerBlock + threadIdx.x / kReduceLanes;
  const int64_t lane = threadIdx.x % kReduceLanes;
  double sum = 0.0;
  if (chunk < chunks) {
    const int64_t begin = chunk * kReduceChunk;
    const int64_t count = n - begin < kReduceChunk ? n - begin : kReduceChunk;
    for (int64_t i = lane; i < count; i += kReduceLanes) {
      const float value = load(x, begin + i);
      sum += kSquares ? math::sum_of_squares_term(value) : math::sum_term(value);
    }
  }
  lane_sums[threadIdx.x] = sum;
  __syncthreads();
  if (lane == 0 && chunk < chunks) {
    double chunk_sum = 0.0;
    for (int l = 0; l < kReduceLanes; ++l) chunk_sum += lane_sums[threadIdx.x + l];
    chunk_sums[chunk] = chunk_sum;
  }
}

__global__ void reduce_total_kernel(const double* chunk_sums, int64_t chunks, double divisor,
                                    float* out) {
  double total = 0.0;
  for (int64_t c = 0; c < chunks; ++c) total += chunk_sums[c];
  out[0] = static_cast<float>(total / divisor);
}

// Bits of select's runs: U is an unsigned integer of the element size.
template <typename U>
__global__ void select_forward_kernel(const U* x, U* y, int64_t outer, int64_t size, int64_t inner,
                                      int64_t index) {
  const int64_t n = outer * inner;
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    const int64_t o = i / inner;
    y[i] = x[(o * size + index) * inner + i % inner];
  }
}

template <typename T>
__global__ void select_backward_kernel(const T* dy, T* dx, int64_t outer, int64_t size,
                                       int64_t inner, int64_t index, bool accumulate) {
  const int64_t n = outer * inner;
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    const int64_t o = i / inner;
    commit(dx, (o * size + index) * inner + i % inner, load(dy, i), accumulate);
  }
}

template <typename Fn>
void launch_unary(const char* op, const void* x, void* y, bool accumulate, int64_t n, DType dtype,
                  Fn fn, cudaStream_t stream) {
  if (n == 0) return;
  ZS_DISPATCH_FLOAT(dtype, op, T, {
    unary_kernel<T, Fn><<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), n, accumulate, fn);
    ZS_CUDA_CHECK(cudaGetLastError());
  });
}

template <typename Fn>
void launch_binary(const char* op, const void* a, const void* b, void* y, bool accumulate,
                   int64_t n, DType dtype, Fn fn, cudaStream_t stream) {
  if (n == 0) return;
  ZS_DISPATCH_FLOAT(dtype, op, T, {
    binary_kernel<T, Fn><<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), n, accumulate, fn);
    ZS_CUDA_CHECK(cudaGetLastError());
  });
}

int64_t reduce_chunk_count(int64_t n) { return (n + kReduceChunk - 1) / kReduceChunk; }

}  // namespace

void scale(const void* x, void* y, float alpha, bool accumulate, int64_t n, DType dtype,
           cudaStream_t stream) {
  launch_unary("cuda scale", x, y, accumulate, n, dtype, ScaleFn{alpha}, stream);
}

void mul(const void* a, const void* b, void* y, int64_t n, DType dtype, cudaStream_t stream) {
  launch_binary("cuda mul", a, b, y, false, n, dtype, MulFn{}, stream);
}

void mul_backward(const void* other, const void* dy, void* dx, bool accumulate, int64_t n,
                  DType dtype, cudaStream_t stream) {
  launch_binary("cuda mul backward", other, dy, dx, accumulate, n, dtype, MulBackwardFn{}, stream);
}

void tanh_forward(const void* x, void* y, int64_t n, DType dtype, cudaStream_t stream) {
  launch_unary("cuda tanh", x, y, false, n, dtype, TanhFn{}, stream);
}

void tanh_backward(const void* y, const void* dy, void* dx, bool accumulate, int64_t n, DType dtype,
                   cudaStream_t stream) {
  launch_binary("cuda tanh backward", y, dy, dx, accumulate, n, dtype, TanhBackwardFn{}, stream);
}

void dropout(const void* x, void* y, bool accumulate, int64_t n, const RngKey& key, float keep_prob,
             float scale, DType dtype, cudaStream_t stream) {
  launch_unary("cuda dropout", x, y, accumulate, n, dtype, DropoutFn{key, keep_prob, scale},
               stream);
}

void fill(void* y, float value, bool accumulate, int64_t n, DType dtype, cudaStream_t stream) {
  if (n == 0) return;
  ZS_DISPATCH_FLOAT(dtype, "cuda fill", T, {
    fill_kernel<T>
        <<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(static_cast<T*>(y), value, n, accumulate);
    ZS_CUDA_CHECK(cudaGetLastError());
  });
}

void fill_from_scalar(void* y, const float* scalar, double divisor, bool accumulate, int64_t n,
                      DType dtype, cudaStream_t stream) {
  if (n == 0) return;
  ZS_DISPATCH_FLOAT(dtype, "cuda fill_from_scalar", T, {
    fill_from_scalar_kernel<T><<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<T*>(y), scalar, divisor, n, accumulate);
    ZS_CUDA_CHECK(cudaGetLastError());
  });
}

void sum_of_squares_backward(const void* x, const float* dy, void* dx, bool accumulate, int64_t n,
                             DType dtype, cudaStream_t stream) {
  launch_unary("cuda sum_of_squares backward", x, dx, accumulate, n, dtype,
               SumOfSquaresBackwardFn{dy}, stream);
}

void add_bias(const void* x, const void* bias, void* y, int64_t rows, int64_t cols, DType dtype,
              cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  ZS_DISPATCH_FLOAT(dtype, "cuda add_bias", T, {
    add_bias_kernel<T><<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(bias), static_cast<T*>(y), n, cols);
    ZS_CUDA_CHECK(cudaGetLastError());
  });
}

void broadcast_rows(const void* bias, void* y, int64_t rows, int64_t cols, DType bias_dtype,
                    DType y_dtype, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  ZS_CHECK(y_dtype == DType::kF32 || y_dtype == bias_dtype, "cuda broadcast_rows: y is ",
           dtype_name(y_dtype), " but must be fp32 or the bias's dtype ", dtype_name(bias_dtype));
  ZS_DISPATCH_FLOAT(bias_dtype, "cuda broadcast_rows", T, {
    if (y_dtype == DType::kF32) {
      broadcast_rows_kernel<T, float><<<broadcast_grid(rows, cols), kThreadsPerBlock, 0, stream>>>(
          static_cast<const T*>(bias), static_cast<float*>(y), rows, cols);
      ZS_CUDA_CHECK(cudaGetLastError());
    } else {
      broadcast_rows_kernel<T, T><<<broadcast_grid(rows, cols), kThreadsPerBlock, 0, stream>>>(
          static_cast<const T*>(bias), static_cast<T*>(y), rows, cols);
      ZS_CUDA_CHECK(cudaGetLastError());
    }
  });
}

int64_t column_sum_partials(int64_t rows, int64_t cols) { return column_blocks(rows) * cols; }

void detail::sum_column_blocks(const float* partials, int64_t blocks, int64_t stride, int64_t cols,
                               float* out, bool accumulate, cudaStream_t stream) {
  if (cols == 0) return;
  sum_column_blocks_kernel<<<blocks_for(cols), kThreadsPerBlock, 0, stream>>>(
      partials, blocks, stride, cols, out, accumulate);
  ZS_CUDA_CHECK(cudaGetLastError());
}

void column_sums_f32(const void* dy, float* db, float* partials, int64_t rows, int64_t cols,
                     bool accumulate, DType dy_dtype, cudaStream_t stream) {
  if (cols == 0) return;
  if (rows == 0) {
    if (!accumulate) ZS_CUDA_CHECK(cudaMemsetAsync(db, 0, sizeof(float) * cols, stream));
    return;
  }
  ZS_DISPATCH_FLOAT(dy_dtype, "cuda column_sums_f32", T, {
    column_block_sums_kernel<T><<<column_block_grid(rows, cols), kThreadsPerBlock, 0, stream>>>(
        static_cast<const T*>(dy), partials, rows, cols);
    ZS_CUDA_CHECK(cudaGetLastError());
  });
  detail::sum_column_blocks(partials, column_blocks(rows), cols, cols, db, accumulate, stream);
}

void column_sums_f64(const void* dy, void* dst, int64_t rows, int64_t cols, bool accumulate,
                     DType dtype, cudaStream_t stream) {
  if (cols == 0) return;
  ZS_DISPATCH_FLOAT(dtype, "cuda column_sums_f64", T, {
    column_sums_f64_kernel<T><<<blocks_for(cols), kThreadsPerBlock, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<T*>(dst), rows, cols, accumulate);
    ZS_CUDA_CHECK(cudaGetLastError());
  });
}

int64_t reduce_workspace_doubles(int64_t n) {
  const int64_t chunks = reduce_chunk_count(n);
  return chunks > 0 ? chunks : 1;
}

void reduce_sum(const void* x, int64_t n, DType dtype, ReduceTerm term, double divisor,
                double* chunk_sums, float* out, cudaStream_t stream) {
  const int64_t chunks = reduce_chunk_count(n);
  if (chunks > 0) {
    const int64_t blocks = (chunks + kChunksPerBlock - 1) / kChunksPerBlock;
    ZS_CHECK(blocks <= int64_t{2147483647}, "cuda reduce_sum: ", n, " elements exceed one grid");
    const unsigned int grid = static_cast<unsigned int>(blocks);
    ZS_DISPATCH_FLOAT(dtype, "cuda reduce_sum", T, {
      if (term == ReduceTerm::kSumOfSquares) {
        chunk_sums_kernel<T, true><<<grid, kThreadsPerBlock, 0, stream>>>(static_cast<const T*>(x),
                                                                          n, chunks, chunk_sums);
        ZS_CUDA_CHECK(cudaGetLastError());
      } else {
        chunk_sums_kernel<T, false><<<grid, kThreadsPerBlock, 0, stream>>>(static_cast<const T*>(x),
                                                                           n, chunks, chunk_sums);
        ZS_CUDA_CHECK(cudaGetLastError());
      }
    });
  }
  // Runs for n == 0 too: the sum of nothing is 0.
  reduce_total_kernel<<<1, 1, 0, stream>>>(chunk_sums, chunks, divisor, out);
  ZS_CUDA_CHECK(cudaGetLastError());
}

void select_forward(const void* x, void* y, int64_t outer, int64_t size, int64_t inner,
                    int64_t index, size_t element_size, cudaStream_t stream) {
  const int64_t n = outer * inner;
  if (n == 0) return;
  if (element_size == 2) {
    select_forward_kernel<uint16_t><<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y), outer, size, inner, index);
    ZS_CUDA_CHECK(cudaGetLastError());
  } else {
    ZS_CHECK(element_size == 4, "cuda select_forward: element size ", element_size,
             " is not supported (2 or 4 bytes)");
    select_forward_kernel<uint32_t><<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const uint32_t*>(x), static_cast<uint32_t*>(y), outer, size, inner, index);
    ZS_CUDA_CHECK(cudaGetLastError());
  }
}

void select_backward(const void* dy, void* dx, int64_t outer, int64_t size, int64_t inner,
                     int64_t index, bool accumulate, DType dtype, cudaStream_t stream) {
  const int64_t n = outer * inner;
  if (n == 0) return;
  ZS_DISPATCH_FLOAT(dtype, "cuda select backward", T, {
    select_backward_kernel<T><<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<T*>(dx), outer, size, inner, index, accumulate);
    ZS_CUDA_CHECK(cudaGetLastError());
  });
}

bool all_finite(const void* x, int64_t n, DType dtype, int32_t* flag, cudaStream_t stream) {
  if (n == 0) return true;
  ZS_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int32_t), stream));
  mark_nonfinite(x, n, dtype, flag, stream);
  int32_t found_nonfinite = 0;
  ZS_CUDA_CHECK(
      cudaMemcpyAsync(&found_nonfinite, flag, sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  // The answer is a host bool: wait for the one readback.
  ZS_CUDA_CHECK(cudaStreamSynchronize(stream));
  return found_nonfinite == 0;
}

}  // namespace zs::ops::cuda
