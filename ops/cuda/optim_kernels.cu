// Kernels of ops/cuda/optim_kernels.h: grid-stride loops around ops/math, and the block-parallel
// sum of squares in ops/math/norm.h's order.
#include "ops/cuda/optim_kernels.h"

#include "ops/cuda/launch.cuh"
#include "ops/math/elementwise.h"
#include "ops/math/norm.h"
#include "ops/math/sgd.h"
#include "runtime/cuda/check.h"
#include "runtime/half.h"

namespace zs::ops::cuda {
namespace {

using detail::blocks_for;
using detail::grid_index;
using detail::grid_stride;
using detail::kThreadsPerBlock;

template <bool kDecay>
__global__ void sgd_kernel(float* param, const float* grad, int64_t n, math::SgdStep step) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    float p = param[i];
    math::sgd_update(p, grad[i], step, kDecay);
    param[i] = p;
  }
}

template <bool kDecay, bool kNesterov>
__global__ void sgd_momentum_kernel(float* param, const float* grad, float* buffer, int64_t n,
                                    math::SgdStep step) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    float p = param[i];
    float b = buffer[i];
    math::sgd_momentum_update(p, grad[i], b, step, kDecay, kNesterov);
    param[i] = p;
    buffer[i] = b;
  }
}

__global__ void unscale_kernel(float* grad, int64_t n, float inv_scale, int32_t* found_nonfinite) {
  bool all_finite = true;
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    const float g = math::scale(grad[i], inv_scale);
    grad[i] = g;
    all_finite = all_finite && math::is_finite_f32_bits(::zs::detail::float_to_bits(g));
  }
  // Every writer writes the same value: plain stores, no atomics.
  if (!all_finite) *found_nonfinite = 1;
}

// Up to kMaxRanges covered ranges by value in a kernel argument (well under the 4 KiB limit).
constexpr int kMaxRanges = 32;
struct RangeChunk {
  int64_t begin[kMaxRanges];
  int64_t end[kMaxRanges];
  int count;
};

// One thread per lane of a norm block (eight per block): lane l of block b adds the squares of the
// chunk's covered elements i ≡ l (mod 8) of its block, in increasing i, to its running value in
// the workspace (zeroed by the first chunk) — math::add_squares_to_lane, add_squares_to_lanes'
// order exactly. Chunks run in order on one stream. The eight
// threads of a block read 32 consecutive bytes per step; one thread per block (the first version)
// walked 16 KiB alone and ran at ~36 GB/s on an H100.
__global__ void lanes_kernel(const float* grad, int64_t numel, int64_t blocks, RangeChunk chunk,
                             bool first_chunk, double* lanes_ws) {
  for (int64_t t = grid_index(); t < blocks * math::kNormLanes; t += grid_stride()) {
    const int64_t b = t / math::kNormLanes;
    const int64_t lane = t % math::kNormLanes;
    const int64_t block_begin = b * math::kNormBlock;
    const int64_t block_end =
        block_begin + math::kNormBlock < numel ? block_begin + math::kNormBlock : numel;
    double sum = first_chunk ? 0.0 : lanes_ws[t];
    for (int k = 0; k < chunk.count; ++k) {
      const int64_t begin = chunk.begin[k] > block_begin ? chunk.begin[k] : block_begin;
      const int64_t end = chunk.end[k] < block_end ? chunk.end[k] : block_end;
      if (begin < end) sum = math::add_squares_to_lane(grad, begin, end, lane, sum);
    }
    lanes_ws[t] = sum;
  }
}

// Folds each block's lanes and adds the blocks in order (optim/clip.cc's order): the threads of
// one block fold kThreadsPerBlock blocks at a time into shared memory, then thread 0 adds them in
// order — the order is the result, and the sequential part reads only shared memory.
__global__ void fold_blocks_kernel(const double* lanes_ws, int64_t blocks, double* result) {
  __shared__ double folded[kThreadsPerBlock];
  double total = 0.0;
  for (int64_t first = 0; first < blocks; first += kThreadsPerBlock) {
    const int64_t b = first + threadIdx.x;
    if (b < blocks) folded[threadIdx.x] = math::fold_lanes(lanes_ws + b * math::kNormLanes);
    __syncthreads();
    if (threadIdx.x == 0) {
      const int64_t n = blocks - first < kThreadsPerBlock ? blocks - first : kThreadsPerBlock;
      for (int64_t i = 0; i < n; ++i) total += folded[i];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *result = total;
}

int64_t norm_blocks(int64_t numel) { return (numel + math::kNormBlock - 1) / math::kNormBlock; }

}  // namespace

void sgd_step(float* param, const float* grad, float* momentum_buffer, int64_t n,
              const math::SgdStep& step, bool decay, bool nesterov, cudaStream_t stream) {
  if (n == 0) return;
  ZS_CHECK(param != nullptr && grad != nullptr, "cuda sgd_step: null parameter or gradient");
  const unsigned int grid = blocks_for(n);
  if (momentum_buffer == nullptr) {
    if (decay) {
      sgd_kernel<true><<<grid, kThreadsPerBlock, 0, stream>>>(param, grad, n, step);
      ZS_CUDA_CHECK(cudaGetLastError());
    } else {
      sgd_kernel<false><<<grid, kThreadsPerBlock, 0, stream>>>(param, grad, n, step);
      ZS_CUDA_CHECK(cudaGetLastError());
    }
    return;
  }
  // The two flags as template arguments: the loop body has no branches.
  if (decay && nesterov) {
    sgd_momentum_kernel<true, true>
        <<<grid, kThreadsPerBlock, 0, stream>>>(param, grad, momentum_buffer, n, step);
    ZS_CUDA_CHECK(cudaGetLastError());
  } else if (decay) {
    sgd_momentum_kernel<true, false>
        <<<grid, kThreadsPerBlock, 0, stream>>>(param, grad, momentum_buffer, n, step);
    ZS_CUDA_CHECK(cudaGetLastError());
  } else if (nesterov) {
    sgd_momentum_kernel<false, true>
        <<<grid, kThreadsPerBlock, 0, stream>>>(param, grad, momentum_buffer, n, step);
    ZS_CUDA_CHECK(cudaGetLastError());
  } else {
    sgd_momentum_kernel<false, false>
        <<<grid, kThreadsPerBlock, 0, stream>>>(param, grad, momentum_buffer, n, step);
    ZS_CUDA_CHECK(cudaGetLastError());
  }
}

void unscale_and_mark(float* grad, int64_t n, float inv_scale, int32_t* found_nonfinite,
                      cudaStream_t stream) {
  if (n == 0) return;
  ZS_CHECK(grad != nullptr && found_nonfinite != nullptr,
           "cuda unscale_and_mark: null gradient or flag pointer");
  unscale_kernel<<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(grad, n, inv_scale,
                                                                 found_nonfinite);
  ZS_CUDA_CHECK(cudaGetLastError());
}

size_t sum_of_squares_workspace_bytes(int64_t numel) {
  return static_cast<size_t>(norm_blocks(numel) * math::kNormLanes) * sizeof(double);
}

void sum_of_squares(const float* grad, int64_t numel, const int64_t* begins, const int64_t* ends,
                    int64_t count, void* workspace, double* result, cudaStream_t stream) {
  ZS_CHECK(result != nullptr, "cuda sum_of_squares: null result pointer");
  ZS_CHECK(numel >= 0 && count >= 0, "cuda sum_of_squares: negative size (numel ", numel,
           ", count ", count, ")");
  const int64_t blocks = norm_blocks(numel);
  auto* lanes_ws = static_cast<double*>(workspace);
  ZS_CHECK(blocks == 0 || (grad != nullptr && lanes_ws != nullptr),
           "cuda sum_of_squares: null gradient or workspace");
  // An empty view (or no covered range) still writes 0 to *result: run the chunk kernel at least
  // once so the lanes are zeroed, then fold.
  for (int64_t first = 0; first < count || first == 0; first += kMaxRanges) {
    RangeChunk chunk{};
    chunk.count = static_cast<int>(count - first < kMaxRanges ? count - first : kMaxRanges);
    for (int k = 0; k < chunk.count; ++k) {
      chunk.begin[k] = begins[first + k];
      chunk.end[k] = ends[first + k];
      ZS_CHECK(0 <= chunk.begin[k] && chunk.begin[k] <= chunk.end[k] && chunk.end[k] <= numel,
               "cuda sum_of_squares: range ", first + k, " [", chunk.begin[k], ", ", chunk.end[k],
               ") is not within [0, ", numel, ")");
    }
    if (blocks > 0) {
      lanes_kernel<<<blocks_for(blocks * math::kNormLanes), kThreadsPerBlock, 0, stream>>>(
          grad, numel, blocks, chunk, first == 0, lanes_ws);
      ZS_CUDA_CHECK(cudaGetLastError());
    }
    if (count == 0) break;
  }
  fold_blocks_kernel<<<1, kThreadsPerBlock, 0, stream>>>(lanes_ws, blocks, result);
  ZS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace zs::ops::cuda
