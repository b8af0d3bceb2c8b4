// GEMM on the GPU through cuBLAS, with the row-major semantics of ops/cpu/gemm.h.
//
//   C[m x n] = alpha · op(A) · op(B) + beta · C, every matrix row-major with a leading dimension
//   (the distance between rows), op(X) = X or Xᵀ — exactly sgemm's contract in ops/cpu/gemm.h.
//
// A and B are fp32, fp16 or bf16 (the same dtype); C is that dtype or fp32. Accumulation is always
// fp32 (CUBLAS_COMPUTE_32F): fp16/bf16 inputs run on tensor cores, fp32 inputs run in true fp32
// unless the handle allows TF32 (CublasHandle::set_allow_tf32), which trades 10 mantissa bits of
// the products for tensor-core speed.
//
// Row-major through a column-major library. cuBLAS reads a matrix column by column. A row-major
// r x c matrix with leading dimension ld is, byte for byte, the column-major c x r matrix (its
// transpose) with the same ld. So instead of C = op(A)·op(B) (row-major) we ask cuBLAS for
//   Cᵀ = op(B)ᵀ · op(A)ᵀ                                            (column-major, n x m)
// which writes the same bytes: swap the operands (B first, then A), swap m and n, and keep each
// operand's own transpose flag (B's op becomes cuBLAS's transa, A's its transb). The leading
// dimensions pass through unchanged. No data moves and no extra transpose kernel runs.
//
// Ownership: CublasHandle owns a cublasHandle_t bound to one device and one stream; gemm()
// enqueues on that stream and returns without synchronizing. Buffers must stay alive until the
// stream has run it. Thread-safety: a handle is used by one thread at a time (cuBLAS's rule).
#pragma once

#include <cublas_v2.h>

#include <cstdint>

#include "runtime/cuda/stream.h"
#include "runtime/dtype.h"
#include "runtime/macros.h"

namespace zs::ops::cuda {

class CublasHandle {
 public:
  // A handle on `stream`'s device that enqueues on `stream` (which must outlive it).
  explicit CublasHandle(const zs::cuda::Stream& stream);
  ~CublasHandle();
  ZS_DISALLOW_COPY(CublasHandle);

  // fp32 GEMMs may use TF32 tensor cores (off by default: results then match the CPU to fp32
  // rounding).
  void set_allow_tf32(bool allow) { allow_tf32_ = allow; }
  bool allow_tf32() const { return allow_tf32_; }

  cublasHandle_t get() const { return handle_; }
  const zs::cuda::Stream& stream() const { return stream_; }

 private:
  const zs::cuda::Stream& stream_;
  cublasHandle_t handle_ = nullptr;
  bool allow_tf32_ = false;
};

// C = alpha · op(A) · op(B) + beta · C, row-major (see the file comment and ops/cpu/gemm.h):
// op(A) is m x k (A stored m x k with lda >= k, or k x m with lda >= m when trans_a), op(B) is
// k x n (B stored k x n with ldb >= n, or n x k with ldb >= k when trans_b), C is m x n with
// ldc >= n. `ab_dtype` is the dtype of A and B, `c_dtype` of C (ab_dtype or fp32). Sizes and
// leading dimensions must fit in an int. m, n or k == 0 is valid (k == 0 scales C by beta).
// Throws InvalidArgument on bad sizes, dtypes or null pointers, before enqueueing anything.
void gemm(CublasHandle& handle, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          float alpha, const void* a, int64_t lda, const void* b, int64_t ldb, float beta, void* c,
          int64_t ldc, DType ab_dtype, DType c_dtype);

}  // namespace zs::ops::cuda
