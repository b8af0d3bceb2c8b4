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

// One thread per norm block: adds the chunk's covered elements of its block to the block's eight
// lanes in the workspace (zeroed by the first chunk). Chunks run in order on one stream, so each
// lane still adds in increasing element order.
__global__ void lanes_kernel(const float* grad, int64_t numel, int64_t blocks, RangeChunk chunk,
                             bool first_chunk, double* lanes_ws) {
  for (int64_t b = grid_index(); b < blocks; b += grid_stride()) {
    const int64_t block_begin = b * math::kNormBlock;
    const int64_t block_end =
        block_begin + math::kNormBlock < numel ? block_begin + math::kNormBlock : numel;
    double lanes[math::kNormLanes];
    for (int64_t l = 0; l < math::kNormLanes; ++l) {
      lanes[l] = first_chunk ? 0.0 : lanes_ws[b * math::kNormLanes + l];
    }
    for (int k = 0; k < chunk.count; ++k) {
      const int64_t begin = chunk.begin[k] > block_begin ? chunk.begin[k] : block_begin;
      const int64_t end = chunk.end[k] < block_end ? chunk.end[k] : block_end;
      if (begin < end) math::add_squares_to_lanes(grad, begin, end, lanes);
    }
    for (int64_t l = 0; l < math::kNormLanes; ++l) lanes_ws[b * math::kNormLanes + l] = lanes[l];
  }
}

// One thread: folds each block's lanes and adds the blocks in order (optim/clip.cc's order).
// Sequential on purpose — the order is the result; it is one pass over numel / 4096 values.
__global__ void fold_blocks_kernel(const double* lanes_ws, int64_t blocks, double* result) {
  if (grid_index() != 0) return;
  double total = 0.0;
  for (int64_t b = 0; b < blocks; ++b) total += math::fold_lanes(lanes_ws + b * math::kNormLanes);
  *result = total;
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
      lanes_kernel<<<blocks_for(blocks), kThreadsPerBlock, 0, stream>>>(grad, numel, blocks, chunk,
                                                                        first == 0, lanes_ws);
      ZS_CUDA_CHECK(cudaGetLastError());
    }
    if (count == 0) break;
  }
  fold_blocks_kernel<<<1, 1, 0, stream>>>(lanes_ws, blocks, result);
  ZS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace zs::ops::cuda
