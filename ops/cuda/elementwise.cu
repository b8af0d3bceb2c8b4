// Element-wise kernels: GELU, casts, scale, add, the finiteness check and fused AdamW (see
// kernels.h). Each kernel is a grid-stride loop around one ops/math function per element.
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.cuh"
#include "ops/math/adamw.h"
#include "ops/math/elementwise.h"
#include "ops/math/gelu.h"
#include "runtime/cuda/check.h"

namespace zs::ops::cuda {
namespace {

using detail::blocks_for;
using detail::grid_index;
using detail::grid_stride;
using detail::kThreadsPerBlock;
using detail::load;
using detail::store;

template <typename T>
__global__ void gelu_forward_kernel(const T* x, T* y, int64_t n) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    store(y, i, math::gelu_forward(load(x, i)));
  }
}

template <typename T, typename S>
__global__ void gelu_backward_kernel(const T* x, const float* dy, S* dx, int64_t n,
                                     bool accumulate) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    const float value = math::gelu_backward(load(x, i), dy[i]);
    store(dx, i, accumulate ? load(dx, i) + value : value);
  }
}

template <typename From, typename To>
__global__ void cast_kernel(const From* src, To* dst, int64_t n) {
  // fp16 → bf16 goes through the exact fp32 value, so it rounds once (as ops::cast does).
  for (int64_t i = grid_index(); i < n; i += grid_stride()) store(dst, i, load(src, i));
}

template <typename T>
__global__ void scale_kernel(T* x, float alpha, int64_t n) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    store(x, i, math::scale(load(x, i), alpha));
  }
}

template <typename T>
__global__ void add_kernel(const T* a, const T* b, T* y, int64_t n) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    store(y, i, math::add(load(a, i), load(b, i)));
  }
}

// The finiteness tests look at the stored bits (no conversion, immune to fast-math).
__device__ __forceinline__ bool element_is_finite(const float* x, int64_t i) {
  return math::is_finite_f32_bits(::zs::detail::float_to_bits(x[i]));
}
__device__ __forceinline__ bool element_is_finite(const Half* x, int64_t i) {
  return math::is_finite_f16_bits(x[i].bits);
}
__device__ __forceinline__ bool element_is_finite(const BFloat16* x, int64_t i) {
  return math::is_finite_bf16_bits(x[i].bits);
}

template <typename T>
__global__ void mark_nonfinite_kernel(const T* x, int64_t n, int32_t* found_nonfinite) {
  bool all_finite = true;
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    all_finite = all_finite && element_is_finite(x, i);
  }
  // Every writer writes the same value, so plain stores need no atomics; most threads write
  // nothing.
  if (!all_finite) *found_nonfinite = 1;
}

template <bool kDecay>
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n,
                             math::AdamWStep step) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    float p = param[i];
    float mi = m[i];
    float vi = v[i];
    math::adamw_update(p, grad[i], mi, vi, step, kDecay);
    param[i] = p;
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

void gelu_forward(const void* x, void* y, int64_t n, DType dtype, cudaStream_t stream) {
  if (n == 0) return;
  ZS_DISPATCH_FLOAT(dtype, "cuda gelu_forward", T, {
    gelu_forward_kernel<T><<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(static_cast<const T*>(x),
                                                                           static_cast<T*>(y), n);
    ZS_CUDA_CHECK(cudaGetLastError());
  });
}

void gelu_backward(const void* x, const float* dy, void* dx, int64_t n, DType dtype, DType dx_dtype,
                   bool accumulate, cudaStream_t stream) {
  if (n == 0) return;
  ZS_CHECK(dx_dtype == dtype || dx_dtype == DType::kF32, "cuda gelu_backward: dx is ",
           dtype_name(dx_dtype), " but must be x's dtype (", dtype_name(dtype), ") or fp32");
  ZS_DISPATCH_FLOAT(dtype, "cuda gelu_backward", T, {
    if (dx_dtype == DType::kF32) {
      gelu_backward_kernel<T, float><<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(
          static_cast<const T*>(x), dy, static_cast<float*>(dx), n, accumulate);
      ZS_CUDA_CHECK(cudaGetLastError());
    } else {
      gelu_backward_kernel<T, T><<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(
          static_cast<const T*>(x), dy, static_cast<T*>(dx), n, accumulate);
      ZS_CUDA_CHECK(cudaGetLastError());
    }
  });
}

void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
          cudaStream_t stream) {
  if (n == 0) return;
  if (src_dtype == dst_dtype) {
    // A copy, bit for bit (as ops::cast to the same dtype keeps x, NaN payloads included).
    if (src != dst) {
      ZS_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(src_dtype),
                                    cudaMemcpyDeviceToDevice, stream));
    }
    return;
  }
  ZS_DISPATCH_FLOAT(src_dtype, "cuda cast (source)", From, {
    ZS_DISPATCH_FLOAT(dst_dtype, "cuda cast (destination)", To, {
      cast_kernel<From, To><<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(
          static_cast<const From*>(src), static_cast<To*>(dst), n);
      ZS_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void scale_inplace(void* x, float alpha, int64_t n, DType dtype, cudaStream_t stream) {
  if (n == 0) return;
  ZS_DISPATCH_FLOAT(dtype, "cuda scale_", T, {
    scale_kernel<T><<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(static_cast<T*>(x), alpha, n);
    ZS_CUDA_CHECK(cudaGetLastError());
  });
}

void add(const void* a, const void* b, void* y, int64_t n, DType dtype, cudaStream_t stream) {
  if (n == 0) return;
  ZS_DISPATCH_FLOAT(dtype, "cuda add", T, {
    add_kernel<T><<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), n);
    ZS_CUDA_CHECK(cudaGetLastError());
  });
}

void mark_nonfinite(const void* x, int64_t n, DType dtype, int32_t* found_nonfinite,
                    cudaStream_t stream) {
  if (n == 0) return;
  ZS_CHECK(found_nonfinite != nullptr, "cuda mark_nonfinite: the flag pointer is null");
  ZS_DISPATCH_FLOAT(dtype, "cuda mark_nonfinite", T, {
    mark_nonfinite_kernel<T><<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<const T*>(x), n, found_nonfinite);
    ZS_CUDA_CHECK(cudaGetLastError());
  });
}

void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                const ops::math::AdamWStep& step, bool decay, cudaStream_t stream) {
  if (n == 0) return;
  if (decay) {
    adamw_kernel<true>
        <<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(param, grad, exp_avg, exp_avg_sq, n, step);
    ZS_CUDA_CHECK(cudaGetLastError());
  } else {
    adamw_kernel<false>
        <<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(param, grad, exp_avg, exp_avg_sq, n, step);
    ZS_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace zs::ops::cuda
