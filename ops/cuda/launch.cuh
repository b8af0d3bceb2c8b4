// Shared launch helpers of the ops/cuda kernels (nvcc only): grid sizes for grid-stride loops,
// fp32 loads and stores of the storage types, a warp sum, and the dispatch from DType to the
// storage type. Internal to ops/cuda.
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/half.h"

namespace zs::ops::cuda::detail {

constexpr int kThreadsPerBlock = 256;
// Grid-stride loops cover any n; more blocks than this only add scheduling overhead.
constexpr int64_t kMaxBlocks = 65535;

inline unsigned int blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<unsigned int>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

// The first index and the stride of a grid-stride loop.
__device__ __forceinline__ int64_t grid_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

template <typename T>
__device__ __forceinline__ float load(const T* p, int64_t i) {
  return static_cast<float>(p[i]);
}
template <typename T>
__device__ __forceinline__ void store(T* p, int64_t i, float value) {
  p[i] = T(value);
}

// Σ over the 32 lanes of a warp (every lane gets the sum; all lanes must take part).
__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

}  // namespace zs::ops::cuda::detail

// ZS_DISPATCH_FLOAT(dtype, "op", T, body): runs `body` with T = float, zs::Half or zs::BFloat16
// as `dtype` says; any other dtype throws InvalidArgument naming the op.
#define ZS_DISPATCH_FLOAT(dtype, op_name, T, ...)                               \
  do {                                                                          \
    switch (dtype) {                                                            \
      case ::zs::DType::kF32: {                                                 \
        using T = float;                                                        \
        __VA_ARGS__;                                                            \
        break;                                                                  \
      }                                                                         \
      case ::zs::DType::kF16: {                                                 \
        using T = ::zs::Half;                                                   \
        __VA_ARGS__;                                                            \
        break;                                                                  \
      }                                                                         \
      case ::zs::DType::kBF16: {                                                \
        using T = ::zs::BFloat16;                                               \
        __VA_ARGS__;                                                            \
        break;                                                                  \
      }                                                                         \
      default:                                                                  \
        ZS_THROW(InvalidArgument, op_name, ": dtype ", ::zs::dtype_name(dtype), \
                 " is not supported (expected fp32, fp16 or bf16)");            \
    }                                                                           \
  } while (0)
