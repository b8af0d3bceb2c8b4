// CUDA launchers behind the tensor-level ops (ops/*.cc on cuda:N): the element-wise ops and
// their gradients (scale, mul, tanh, dropout, fills), bias add and bias-gradient column sums,
// the blocked reductions, select, and the all-finite check. Like ops/cuda/kernels.h, each is a
// thin launcher around the ZS_HOST_DEVICE functions the CPU loops use (ops/math/*.h,
// runtime/half.h, runtime/rng.h dropout_keep — STYLE.md, "One source of math").
//
// Conventions (as kernels.h):
// - Pointers are device memory; `dtype` (fp32/fp16/bf16) is the storage type of every floating
//   operand unless a parameter says otherwise; compute is fp32 (double where the CPU sums in
//   double). The tensor-level ops check that the operands share a dtype before calling.
// - `accumulate`: add into the output (out = T(float(out) + value), the CPU's rounding) instead
//   of overwriting it, as a GradSink asks.
// - Each launcher enqueues on `stream` and returns at once (except all_finite, which reads its
//   flag back); n == 0 launches nothing; launch errors throw zs errors.
//
// Bitwise agreement with the CPU ops: scale, mul, dropout, fills, add_bias, select, the column
// sums and the reductions compute each value with the same operations in the same order as the
// CPU loops (the reductions and column sums use the CPU's block layout and add in double or
// fp32 exactly as it does), so their results are bit for bit the CPU's. tanh differs by CUDA's
// tanhf vs glibc's (a couple of ulp).
//
// This header is plain C++ (no CUDA syntax). Thread-safety: no state; any thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/rng.h"

namespace zs::ops::cuda {

// ---- element-wise (n elements)
// y (+)= alpha · x (math::scale).
void scale(const void* x, void* y, float alpha, bool accumulate, int64_t n, DType dtype,
           cudaStream_t stream);
// y = a · b (math::mul).
void mul(const void* a, const void* b, void* y, int64_t n, DType dtype, cudaStream_t stream);
// dx (+)= other · dy (math::mul_backward).
void mul_backward(const void* other, const void* dy, void* dx, bool accumulate, int64_t n,
                  DType dtype, cudaStream_t stream);
// y = tanh(x); dx (+)= dy · (1 − y²) from the saved output y (ops/math/tanh.h).
void tanh_forward(const void* x, void* y, int64_t n, DType dtype, cudaStream_t stream);
void tanh_backward(const void* y, const void* dy, void* dx, bool accumulate, int64_t n, DType dtype,
                   cudaStream_t stream);
// y (+)= math::dropout(x[i], dropout_keep(key, i, keep_prob), scale) with i the flat index: the
// forward on x and the backward on dy are the same call (the mask is regenerated).
void dropout(const void* x, void* y, bool accumulate, int64_t n, const RngKey& key, float keep_prob,
             float scale, DType dtype, cudaStream_t stream);
// y (+)= value.
void fill(void* y, float value, bool accumulate, int64_t n, DType dtype, cudaStream_t stream);
// y (+)= float(double(*scalar) / divisor), *scalar a device fp32 (a reduction's gradient: sum
// passes divisor 1, mean the element count — the CPU's formula, without a host readback).
void fill_from_scalar(void* y, const float* scalar, double divisor, bool accumulate, int64_t n,
                      DType dtype, cudaStream_t stream);
// dx (+)= math::sum_of_squares_backward(x[i], *dy), *dy a device fp32.
void sum_of_squares_backward(const void* x, const float* dy, void* dx, bool accumulate, int64_t n,
                             DType dtype, cudaStream_t stream);

// ---- rows × cols
// y[r, c] = math::add(x[r, c], bias[c]).
void add_bias(const void* x, const void* bias, void* y, int64_t rows, int64_t cols, DType dtype,
              cudaStream_t stream);
// y[r, c] = bias[c], y fp32 or of the bias's dtype (exact either way): the linear op's bias,
// before a beta = 1 GEMM adds x·Wᵀ in fp32 and rounds once into y.
void broadcast_rows(const void* bias, void* y, int64_t rows, int64_t cols, DType bias_dtype,
                    DType y_dtype, cudaStream_t stream);
// db[c] (+)= Σ_r dy[r, c] in fp32 — the linear op's bias gradient — in parallel and in a fixed
// order (ops/cuda/column_blocks.cuh): blocks of 64 rows each summed in row order, then the blocks
// in order, added to db[c] when `accumulate`. Deterministic; the CPU (ops/linear.cc) sums all rows
// in one sequence, so the two agree to fp32 rounding, like the weight gradient's GEMM. dy of
// `dy_dtype`, db fp32; `partials` a device workspace of column_sum_partials(rows, cols) floats.
void column_sums_f32(const void* dy, float* db, float* partials, int64_t rows, int64_t cols,
                     bool accumulate, DType dy_dtype, cudaStream_t stream);
// The fp32 workspace floats column_sums_f32 needs (one partial per column and block of 64 rows);
// layernorm_backward's parameter gradients need twice as many.
int64_t column_sum_partials(int64_t rows, int64_t cols);
// dst[c] (+)= float(Σ_r double(dy[r, c])), rows in order — add_bias's gradient (ops/elementwise.cc
// column_sums). dy and dst of `dtype`.
void column_sums_f64(const void* dy, void* dst, int64_t rows, int64_t cols, bool accumulate,
                     DType dtype, cudaStream_t stream);

// ---- reductions with the CPU's block layout (ops/elementwise.cc reduce_sum): chunks of
// kReduceChunk elements; within a chunk, element i goes to lane i % kReduceLanes, each lane adds
// its elements in order in double; a chunk's sum is its lanes added in order; the total is the
// chunk sums added in chunk order; out[0] = float(total / divisor).
constexpr int64_t kReduceChunk = 2048;
constexpr int64_t kReduceLanes = 8;
enum class ReduceTerm { kSum, kSumOfSquares };  // math::sum_term / sum_of_squares_term
// Doubles of workspace reduce_sum needs for n elements (at least 1).
int64_t reduce_workspace_doubles(int64_t n);
// out: device fp32 [1]; chunk_sums: device workspace of reduce_workspace_doubles(n) doubles.
// The chunk sums are added by one thread, in order (that is what makes the total bitwise the
// CPU's; it costs one pass over n / 2048 doubles).
void reduce_sum(const void* x, int64_t n, DType dtype, ReduceTerm term, double divisor,
                double* chunk_sums, float* out, cudaStream_t stream);

// ---- select: x viewed as [outer, size, inner]; y = x[:, index, :] ([outer, inner]), bits copied
// (element_size 2 or 4).
void select_forward(const void* x, void* y, int64_t outer, int64_t size, int64_t inner,
                    int64_t index, size_t element_size, cudaStream_t stream);
// dx[o, index, j] (+)= dy[o, j]; other elements of dx untouched (the caller zeroes a fresh dx).
void select_backward(const void* dy, void* dx, int64_t outer, int64_t size, int64_t inner,
                     int64_t index, bool accumulate, DType dtype, cudaStream_t stream);

// ---- True if no element of x is NaN or ±inf: zeroes the device int32 *flag, marks it with
// kernels.h mark_nonfinite, reads it back (one copy) and waits for the stream.
bool all_finite(const void* x, int64_t n, DType dtype, int32_t* flag, cudaStream_t stream);

}  // namespace zs::ops::cuda
