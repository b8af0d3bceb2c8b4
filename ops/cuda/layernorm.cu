// Layernorm kernels (see kernels.h): one warp per row for the row statistics, the output and
// dx, built from the per-element pieces of ops/math/layernorm.h; the parameter gradients summed
// in the CPU op's order, in parallel (ops/cuda/column_blocks.cuh).
#include "ops/cuda/column_blocks.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/tensor_kernels.h"
#include "ops/math/layernorm.h"
#include "runtime/cuda/check.h"

namespace zs::ops::cuda {
namespace {

using detail::load;
using detail::store;
using detail::warp_sum;

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 4;  // 128 threads: 4 warps, one row each

__device__ __forceinline__ int64_t warp_row() {
  return static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
}

template <typename T>
__global__ void layernorm_forward_kernel(const T* x, const T* gamma, const T* beta, T* y,
                                         float* mean, float* rstd, int64_t rows, int64_t cols,
                                         float eps) {
  const int64_t row = warp_row();
  if (row >= rows) return;  // the whole warp leaves together: shuffles stay complete
  const int lane = threadIdx.x % kWarp;
  const T* xr = x + row * cols;
  T* yr = y + row * cols;
  // The mean is summed around the row's first element, as layernorm_row_stats does, so a large
  // common offset does not cost the low bits; then the centred sum of squares (two passes).
  const float shift = load(xr, 0);
  float shifted_sum = 0.0f;
  for (int64_t j = lane; j < cols; j += kWarp) shifted_sum += load(xr, j) - shift;
  const float row_mean = shift + warp_sum(shifted_sum) / static_cast<float>(cols);
  float centred_squares = 0.0f;
  for (int64_t j = lane; j < cols; j += kWarp) {
    const float d = load(xr, j) - row_mean;
    centred_squares += d * d;
  }
  const float row_rstd =
      math::layernorm_rstd(warp_sum(centred_squares) / static_cast<float>(cols), eps);
  for (int64_t j = lane; j < cols; j += kWarp) {
    const float x_hat = math::layernorm_normalize(load(xr, j), row_mean, row_rstd);
    store(yr, j, math::layernorm_affine(x_hat, load(gamma, j), load(beta, j)));
  }
  if (lane == 0) {
    mean[row] = row_mean;
    rstd[row] = row_rstd;
  }
}

template <typename T, typename S>
__global__ void layernorm_dx_kernel(const T* x, const float* dy, const T* gamma, const float* mean,
                                    const float* rstd, S* dx, int64_t rows, int64_t cols,
                                    bool accumulate) {
  const int64_t row = warp_row();
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarp;
  const T* xr = x + row * cols;
  const float* dyr = dy + row * cols;
  S* dxr = dx + row * cols;
  const float row_mean = mean[row];
  const float row_rstd = rstd[row];
  float sum_g = 0.0f;
  float sum_g_xhat = 0.0f;
  for (int64_t j = lane; j < cols; j += kWarp) {
    const float g = dyr[j] * load(gamma, j);
    sum_g += g;
    sum_g_xhat += g * math::layernorm_normalize(load(xr, j), row_mean, row_rstd);
  }
  const float mean_g = warp_sum(sum_g) / static_cast<float>(cols);
  const float mean_g_xhat = warp_sum(sum_g_xhat) / static_cast<float>(cols);
  for (int64_t j = lane; j < cols; j += kWarp) {
    const float g = dyr[j] * load(gamma, j);
    const float x_hat = math::layernorm_normalize(load(xr, j), row_mean, row_rstd);
    const float value = math::layernorm_dx(g, x_hat, row_rstd, mean_g, mean_g_xhat);
    store(dxr, j, accumulate ? load(dxr, j) + value : value);
  }
}

// Pass 1 of dgamma/dbeta: one thread per column and block of 64 rows, the rows in order from
// zero into partials [block][0: dgamma, 1: dbeta][cols] — exactly ops/layernorm.cc's blocks, with
// the product and the sum rounded separately (__fmul_rn/__fadd_rn: no contraction into an FMA,
// as GCC does not contract in ISO mode).
template <typename T>
__global__ void layernorm_param_partials_kernel(const T* x, const float* dy, const float* mean,
                                                const float* rstd, float* partials, int64_t rows,
                                                int64_t cols) {
  detail::for_each_column_block(
      rows, cols, [&](int64_t j, int64_t begin, int64_t end, int64_t block) {
        float dg = 0.0f;
        float db = 0.0f;
        for (int64_t r = begin; r < end; ++r) {
          const float d = dy[r * cols + j];
          const float x_hat = math::layernorm_normalize(load(x, r * cols + j), mean[r], rstd[r]);
          dg = __fadd_rn(dg, __fmul_rn(d, x_hat));
          db = __fadd_rn(db, d);
        }
        partials[block * 2 * cols + j] = dg;
        partials[block * 2 * cols + cols + j] = db;
      });
}

unsigned int row_blocks(int64_t rows) {
  return static_cast<unsigned int>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

void layernorm_forward(const void* x, const void* gamma, const void* beta, void* y, float* mean,
                       float* rstd, int64_t rows, int64_t cols, float eps, DType dtype,
                       cudaStream_t stream) {
  if (rows == 0) return;
  ZS_CHECK(cols >= 1, "cuda layernorm_forward: rows of ", cols, " features; need at least 1");
  ZS_CHECK(rows <= int64_t{2147483647} * kRowsPerBlock, "cuda layernorm_forward: ", rows,
           " rows exceed one grid");
  ZS_DISPATCH_FLOAT(dtype, "cuda layernorm_forward", T, {
    layernorm_forward_kernel<T><<<row_blocks(rows), kRowsPerBlock * kWarp, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(gamma), static_cast<const T*>(beta),
        static_cast<T*>(y), mean, rstd, rows, cols, eps);
    ZS_CUDA_CHECK(cudaGetLastError());
  });
}

void layernorm_backward(const void* x, const float* dy, const void* gamma, const float* mean,
                        const float* rstd, void* dx, float* dgamma, float* dbeta, float* partials,
                        int64_t rows, int64_t cols, DType dtype, DType dx_dtype, bool accumulate,
                        cudaStream_t stream) {
  if (rows == 0) return;
  ZS_CHECK(cols >= 1, "cuda layernorm_backward: rows of ", cols, " features; need at least 1");
  ZS_CHECK(dx == nullptr || dx_dtype == dtype || dx_dtype == DType::kF32,
           "cuda layernorm_backward: dx is ", dtype_name(dx_dtype), " but must be x's dtype (",
           dtype_name(dtype), ") or fp32");
  ZS_DISPATCH_FLOAT(dtype, "cuda layernorm_backward", T, {
    if (dx != nullptr && dx_dtype == DType::kF32) {
      layernorm_dx_kernel<T, float><<<row_blocks(rows), kRowsPerBlock * kWarp, 0, stream>>>(
          static_cast<const T*>(x), dy, static_cast<const T*>(gamma), mean, rstd,
          static_cast<float*>(dx), rows, cols, accumulate);
      ZS_CUDA_CHECK(cudaGetLastError());
    } else if (dx != nullptr) {
      layernorm_dx_kernel<T, T><<<row_blocks(rows), kRowsPerBlock * kWarp, 0, stream>>>(
          static_cast<const T*>(x), dy, static_cast<const T*>(gamma), mean, rstd,
          static_cast<T*>(dx), rows, cols, accumulate);
      ZS_CUDA_CHECK(cudaGetLastError());
    }
    if (dgamma != nullptr || dbeta != nullptr) {
      ZS_CHECK(partials != nullptr,
               "cuda layernorm_backward: no workspace for the dgamma/dbeta "
               "partials (2 * column_sum_partials(rows, cols) floats)");
      layernorm_param_partials_kernel<T>
          <<<detail::column_block_grid(rows, cols), detail::kThreadsPerBlock, 0, stream>>>(
              static_cast<const T*>(x), dy, mean, rstd, partials, rows, cols);
      ZS_CUDA_CHECK(cudaGetLastError());
    }
  });
  // Pass 2: each column's blocks in order, added into the sinks (as the old kernel added).
  const int64_t blocks = detail::column_blocks(rows);
  if (dgamma != nullptr) {
    detail::sum_column_blocks(partials, blocks, 2 * cols, cols, dgamma, true, stream);
  }
  if (dbeta != nullptr) {
    detail::sum_column_blocks(partials + cols, blocks, 2 * cols, cols, dbeta, true, stream);
  }
}

}  // namespace zs::ops::cuda
