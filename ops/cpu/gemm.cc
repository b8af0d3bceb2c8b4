// sgemm over Eigen (ZS_GEMM=eigen) or OpenBLAS (ZS_GEMM=openblas, ZS_GEMM_OPENBLAS=1); the
// benchmark that chose between them is bench/gemm.cc.
//
// Eigen backend: row-major Maps with an OuterStride carry the leading dimensions; Eigen's GEMM
// splits the work across omp_get_max_threads() of the calling thread, i.e. intra_op_threads().
//
// OpenBLAS backend: a direct cblas_sgemm, which takes strides and beta itself (Eigen built with
// EIGEN_USE_BLAS adds a pass over C for beta and measured no faster). OpenBLAS's own threading
// cannot follow a per-rank setting in Debian's default build: libopenblas0-pthread reads one
// process-wide thread count (openblas_set_num_threads, default all cores), so two ranks calling at
// once would each fan out over all cores. The OpenMP build (libopenblas0-openmp) does follow the
// caller's omp_get_max_threads(), but two concurrent multi-threaded calls share one buffer set and
// measured half the throughput of one. So OpenBLAS always runs single-threaded here, and sgemm
// splits C into intra_op_threads() blocks over the calling thread's own OpenMP team, one
// single-threaded cblas_sgemm per block; on 2 cores this matches OpenBLAS's own 2-thread speed
// (bench/gemm.cc). To keep OpenBLAS single-threaded, the pthread build's global count is pinned to
// 1 (re-checked every call, since anything in the process may change it); for the OpenMP build
// the caller's nthreads ICV is set to 1 around each call and restored. The same code is then right
// whichever libopenblas.so.0 the Debian alternatives system points at.
//
// Everything here is thread-safe; the only state is OpenBLAS's global thread count, which is only
// ever set to 1.
#include "ops/cpu/gemm.h"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <utility>

#include "runtime/error.h"

#ifndef ZS_GEMM_OPENBLAS
#define ZS_GEMM_OPENBLAS 0
#endif

#if ZS_GEMM_OPENBLAS
#include <cblas.h>

// OpenBLAS extensions (declared by OpenBLAS's cblas.h, not by the reference one).
extern "C" {
int openblas_get_parallel(void);
int openblas_get_num_threads(void);
void openblas_set_num_threads(int num_threads);
}
#else
#include <Eigen/Core>
#endif

namespace zs::ops::cpu {
namespace {

// C = beta * C, without reading C when beta == 0 (it may hold NaN garbage).
void scale_c(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  if (beta == 1.0f) return;
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    if (beta == 0.0f) {
      std::fill(row, row + n, 0.0f);
    } else {
      for (int64_t j = 0; j < n; ++j) row[j] *= beta;
    }
  }
}

#if ZS_GEMM_OPENBLAS

// Each thread of a split gets at least this many multiply-adds: below ~1M in all, starting the
// team and packing the shared operand twice cost more than the second core gives back (64^3 runs
// 1.5x slower split in two; 128 x 128 x 64 runs 1.5x faster).
constexpr int64_t kMinMacsPerThread = int64_t{1} << 19;
// Block edges are multiples of this, so each block starts on a 64-byte boundary when C does and
// keeps OpenBLAS's 16-wide AVX-512 micro-kernel full.
constexpr int64_t kSplitAlign = 16;

constexpr int kOpenblasOpenmp = 2;  // openblas_get_parallel(): 0 serial, 1 pthreads, 2 OpenMP

// One cblas_sgemm that runs on the calling thread only (see the file comment).
void blas_on_calling_thread(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                            float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                            float beta, float* c, int64_t ldc) {
  static const int parallel = openblas_get_parallel();
  int saved_threads = 0;
  if (parallel == kOpenblasOpenmp) {
    saved_threads = omp_get_max_threads();
    omp_set_num_threads(1);
  } else if (openblas_get_num_threads() != 1) {
    openblas_set_num_threads(1);
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
  if (parallel == kOpenblasOpenmp) omp_set_num_threads(saved_threads);
}

// [begin, end) of block `index` of `count` over [0, extent), edges aligned to kSplitAlign.
std::pair<int64_t, int64_t> block_range(int64_t extent, int index, int count) {
  int64_t units = (extent + kSplitAlign - 1) / kSplitAlign;
  int64_t begin = units * index / count * kSplitAlign;
  int64_t end = units * (index + 1) / count * kSplitAlign;
  return {std::min(begin, extent), std::min(end, extent)};
}

void backend_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                   int64_t ldc) {
  // Split the rows of C unless it is wider than tall. Each block packs all of the operand it
  // shares with the others again; measured with OpenBLAS 0.3.21 on 2 cores, splitting rows is
  // faster for square C (1.6x vs 1.2x on 128^3) and columns only when n > m (256 x 3072 x 768:
  // 204 vs 185 GFLOP/s).
  bool split_rows = m >= n;
  int64_t split_extent = split_rows ? m : n;
  double macs = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  int64_t max_by_extent = (split_extent + kSplitAlign - 1) / kSplitAlign;
  // Inside a parallel region (say, one sgemm per attention head) the caller's team is the split.
  int64_t budget = omp_in_parallel() ? 1 : intra_op_threads();
  int64_t threads = std::min<int64_t>(budget, max_by_extent);
  if (macs < static_cast<double>(threads) * kMinMacsPerThread) {
    threads = std::max<int64_t>(1, static_cast<int64_t>(macs / kMinMacsPerThread));
  }
  if (threads <= 1) {
    blas_on_calling_thread(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const int team_size = static_cast<int>(threads);
#pragma omp parallel num_threads(team_size)
  {
    // The runtime may give fewer threads than asked; split over the team actually running.
    auto [begin, end] = block_range(split_extent, omp_get_thread_num(), omp_get_num_threads());
    if (begin < end) {
      if (split_rows) {
        // Rows [begin, end) of op(A) and of C.
        const float* a_block = trans_a ? a + begin : a + begin * lda;
        blas_on_calling_thread(trans_a, trans_b, end - begin, n, k, alpha, a_block, lda, b, ldb,
                               beta, c + begin * ldc, ldc);
      } else {
        // Columns [begin, end) of op(B) and of C.
        const float* b_block = trans_b ? b + begin * ldb : b + begin;
        blas_on_calling_thread(trans_a, trans_b, m, end - begin, k, alpha, a, lda, b_block, ldb,
                               beta, c + begin, ldc);
      }
    }
  }
}

#else  // Eigen

using RowMajorMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixView = Eigen::Map<const RowMajorMatrix, Eigen::Unaligned, Eigen::OuterStride<> >;
using MatrixView = Eigen::Map<RowMajorMatrix, Eigen::Unaligned, Eigen::OuterStride<> >;

template <typename OpA, typename OpB>
void eigen_product(const OpA& op_a, const OpB& op_b, float alpha, float beta, MatrixView& c_view) {
  if (beta == 0.0f) {
    // Assignment zero-fills C before accumulating; it never reads the old values.
    c_view.noalias() = alpha * op_a * op_b;
  } else {
    if (beta != 1.0f) c_view *= beta;
    c_view.noalias() += alpha * op_a * op_b;
  }
}

void backend_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                   int64_t ldc) {
  ConstMatrixView a_view(a, trans_a ? k : m, trans_a ? m : k, Eigen::OuterStride<>(lda));
  ConstMatrixView b_view(b, trans_b ? n : k, trans_b ? k : n, Eigen::OuterStride<>(ldb));
  MatrixView c_view(c, m, n, Eigen::OuterStride<>(ldc));
  if (trans_a && trans_b) {
    eigen_product(a_view.transpose(), b_view.transpose(), alpha, beta, c_view);
  } else if (trans_a) {
    eigen_product(a_view.transpose(), b_view, alpha, beta, c_view);
  } else if (trans_b) {
    eigen_product(a_view, b_view.transpose(), alpha, beta, c_view);
  } else {
    eigen_product(a_view, b_view, alpha, beta, c_view);
  }
}

#endif

}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  ZS_CHECK(m >= 0 && n >= 0 && k >= 0, "sgemm: sizes must be non-negative, got m=", m, " n=", n,
           " k=", k);
  // Row lengths of A, B and C as stored (row-major): a leading dimension is at least that.
  int64_t a_row = trans_a ? m : k;
  int64_t b_row = trans_b ? k : n;
  ZS_CHECK(lda >= std::max<int64_t>(1, a_row), "sgemm: lda=", lda, " is less than the row length ",
           a_row, " of A (stored ", trans_a ? "k x m" : "m x k",
           "); pass the distance in floats between consecutive rows of A");
  ZS_CHECK(ldb >= std::max<int64_t>(1, b_row), "sgemm: ldb=", ldb, " is less than the row length ",
           b_row, " of B (stored ", trans_b ? "n x k" : "k x n",
           "); pass the distance in floats between consecutive rows of B");
  ZS_CHECK(ldc >= std::max<int64_t>(1, n), "sgemm: ldc=", ldc, " is less than n=", n,
           "; pass the distance in floats between consecutive rows of C");
  ZS_CHECK(std::max({m, n, k, lda, ldb, ldc}) <= INT_MAX,
           "sgemm: sizes and leading dimensions must fit in an int (BLAS's index type), got m=", m,
           " n=", n, " k=", k, " lda=", lda, " ldb=", ldb, " ldc=", ldc,
           "; split the product into smaller GEMMs");
  ZS_CHECK(c != nullptr || m == 0 || n == 0, "sgemm: C is null but m x n = ", m, " x ", n);
  ZS_CHECK(a != nullptr || m == 0 || k == 0, "sgemm: A is null but op(A) is ", m, " x ", k);
  ZS_CHECK(b != nullptr || k == 0 || n == 0, "sgemm: B is null but op(B) is ", k, " x ", n);

  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.0f) {
    scale_c(m, n, beta, c, ldc);
    return;
  }
  backend_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

const char* gemm_backend_name() { return ZS_GEMM_OPENBLAS ? "openblas" : "eigen"; }

void set_intra_op_threads(int n) {
  ZS_CHECK(n >= 1, "set_intra_op_threads: expected at least 1 thread, got ", n);
  omp_set_num_threads(n);
}

int intra_op_threads() { return omp_get_max_threads(); }

IntraOpThreadsScope::IntraOpThreadsScope(int n) : previous_(intra_op_threads()) {
  set_intra_op_threads(n);
}

// previous_ came from omp_get_max_threads(), so it is valid and nothing here can throw.
IntraOpThreadsScope::~IntraOpThreadsScope() { omp_set_num_threads(previous_); }

}  // namespace zs::ops::cpu
