// The single-precision GEMM that every CPU op (linear, attention) goes through, and the number of
// intra-op threads the CPU ops of a rank may use.
//
// sgemm takes row-major fp32 matrices as pointer + leading dimension, so a strided view (one
// attention head's Q inside a [T, 3C] buffer, ld = 3C) is passed without a copy. The caller owns
// every buffer; sgemm keeps no pointer after it returns.
//
// Threads. Ranks of the local backend are threads of one process, so the intra-op thread count is
// a per-thread setting: set_intra_op_threads(n) changes the calling thread only. It is the calling
// thread's OpenMP nthreads ICV, which Eigen's GEMM and the ops' `omp parallel` loops read too, so
// one setting governs all CPU work of a rank. sgemm uses at most intra_op_threads() threads of the
// calling thread and never grows a shared pool: with the OpenBLAS backend, OpenBLAS runs single-
// threaded inside each of those threads (see gemm.cc for why and how). Called inside an OpenMP
// parallel region (e.g. one sgemm per attention head in an `omp parallel for`), sgemm runs on the
// calling thread alone: the enclosing team already uses the rank's threads. A thread that never
// calls set_intra_op_threads gets the process default (OMP_NUM_THREADS, else the number of cores),
// so a process running R ranks as threads on P cores should give each rank P / R threads.
//
// Thread-safety: every function here may be called from any number of threads at once; concurrent
// sgemm calls must write disjoint C.
#pragma once

#include <cstdint>

#include "runtime/macros.h"

namespace zs::ops::cpu {

// C[m x n] = alpha * op(A) * op(B) + beta * C, all row-major fp32.
//   op(A) is m x k: A is stored m x k (lda >= k), or k x m when trans_a (lda >= m).
//   op(B) is k x n: B is stored k x n (ldb >= n), or n x k when trans_b (ldb >= k).
//   C is m x n with ldc >= n, and must not overlap A or B.
// beta == 0 never reads C (it may hold NaN garbage). k == 0 or alpha == 0 gives C = beta * C
// without reading A or B. Sizes and leading dimensions must fit in an int (BLAS's index type).
// Throws InvalidArgument on negative sizes, too-small leading dimensions, or a null pointer to a
// non-empty operand.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The backend this build's sgemm uses: "eigen" or "openblas" (CMake option ZS_GEMM).
const char* gemm_backend_name();

// Intra-op threads of the calling thread (n >= 1; throws InvalidArgument otherwise).
void set_intra_op_threads(int n);
int intra_op_threads();

// Sets the calling thread's intra-op threads for a scope and restores the previous value on exit.
class IntraOpThreadsScope {
 public:
  explicit IntraOpThreadsScope(int n);
  ~IntraOpThreadsScope();
  ZS_DISALLOW_COPY(IntraOpThreadsScope);

 private:
  int previous_;
};

}  // namespace zs::ops::cpu
