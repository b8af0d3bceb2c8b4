// CUDA kernel launchers of the element-wise, layernorm and optimizer math: thin wrappers around
// the same ZS_HOST_DEVICE inline functions the CPU ops use (ops/math/*.h, runtime/half.h), so
// the CPU path and the CUDA path compute each element with the same formula (STYLE.md, "One
// source of math"). Every launcher here has a CPU reference and a comparison test
// (tests/cuda/kernels_test.cc) that runs wherever a GPU is present.
//
// Conventions:
// - Pointers are device memory (or memory the device can address); `n` elements; an fp32/fp16/
//   bf16 `dtype` says how the storage is read and written, compute is always fp32.
// - Each launcher enqueues on `stream` and returns at once; nothing synchronizes the host. The
//   caller keeps the buffers alive until the stream has run the kernel. n == 0 launches nothing.
// - Launch errors are thrown (ZS_CUDA_CHECK(cudaGetLastError())) as zs errors; errors while the
//   kernel runs surface at the next synchronizing call.
// - Results match the CPU op per element up to fp32 contraction and expf: nvcc fuses a·b + c
//   into FMAs where GCC (ISO mode) does not, and CUDA's expf differs from glibc's by ≤ 2 ulp.
//   Casts, scale/add, the finiteness check and AdamW (whose multiply-adds are explicit fused
//   operations, with IEEE sqrt and division) are bitwise equal to the CPU on FMA hosts.
//
// This header is plain C++ (no CUDA syntax): host code includes it without nvcc.
// Thread-safety: the launchers keep no state; they may be called from any thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/math/adamw.h"
#include "runtime/dtype.h"

namespace zs::ops::cuda {

// ---- GELU (ops/math/gelu.h). y = gelu(x), x and y of `dtype`.
void gelu_forward(const void* x, void* y, int64_t n, DType dtype, cudaStream_t stream);
// dx = dy · gelu'(x): x of `dtype`, dy fp32 (the upstream gradient, as on the CPU), dx of
// `dx_dtype` (x's dtype or fp32); adds into dx when `accumulate`.
void gelu_backward(const void* x, const float* dy, void* dx, int64_t n, DType dtype, DType dx_dtype,
                   bool accumulate, cudaStream_t stream);

// ---- Layernorm over rows of `cols` (ops/math/layernorm.h). x, gamma, beta, y of `dtype`; mean
// and rstd are fp32 [rows] outputs (saved for backward, as the CPU op saves them). One warp per
// row; the row sums are tree reductions within the warp (a different order from the CPU's
// sequential sums, hence tolerance, not bits).
void layernorm_forward(const void* x, const void* gamma, const void* beta, void* y, float* mean,
                       float* rstd, int64_t rows, int64_t cols, float eps, DType dtype,
                       cudaStream_t stream);
// dx (of `dx_dtype`; added into when `accumulate`) from fp32 dy and the saved mean/rstd; adds
// this call's contributions to the fp32 [cols] dgamma and dbeta (either may be null). dgamma and
// dbeta are summed as the CPU op sums them (ops/cuda/column_blocks.cuh: blocks of 64 rows in row
// order, then the blocks in order, the products unfused), in parallel: deterministic, and the
// CPU's bits for fp32. `partials`: a device workspace of 2 · column_sum_partials(rows, cols)
// floats (tensor_kernels.h) when dgamma or dbeta is wanted, else may be null.
void layernorm_backward(const void* x, const float* dy, const void* gamma, const float* mean,
                        const float* rstd, void* dx, float* dgamma, float* dbeta, float* partials,
                        int64_t rows, int64_t cols, DType dtype, DType dx_dtype, bool accumulate,
                        cudaStream_t stream);

// ---- Casts (runtime/half.h, round to nearest even, NaN stays NaN): dst ← src converted; equal
// dtypes copy the bits.
void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
          cudaStream_t stream);

// ---- Scale and add (ops/math/elementwise.h).
// x ← alpha · x in place, rounded to `dtype`.
void scale_inplace(void* x, float alpha, int64_t n, DType dtype, cudaStream_t stream);
// y = a + b (all `dtype`); y may alias a or b.
void add(const void* a, const void* b, void* y, int64_t n, DType dtype, cudaStream_t stream);

// ---- Loss-scaler overflow check: sets *found_nonfinite (device int32) to 1 if any element of x
// is NaN or ±inf; never clears it, so several tensors can be checked into one flag and read
// back with one copy. The caller zeroes the flag first (cudaMemsetAsync on the same stream).
void mark_nonfinite(const void* x, int64_t n, DType dtype, int32_t* found_nonfinite,
                    cudaStream_t stream);

// ---- Fused AdamW (ops/math/adamw.h) over elements [0, n) of a flat fp32 shard segment: param,
// m, v updated in place from fp32 grad with the step's scalars. `decay` applies the decoupled
// weight decay (one launch per decay segment of the shard, as optim/adamw.cc loops per segment).
void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                const ops::math::AdamWStep& step, bool decay, cudaStream_t stream);

}  // namespace zs::ops::cuda
