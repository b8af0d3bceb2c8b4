// Eigen's GEMM built with EIGEN_USE_BLAS (products forwarded to OpenBLAS's sgemm_), for
// bench/gemm.cc only; bench/CMakeLists.txt compiles this file with EIGEN_USE_BLAS.
//
// Why Eigen is renamed here: the rest of the program instantiates Eigen's product templates
// without EIGEN_USE_BLAS. The same template instance with a different body in two translation
// units is an ODR violation, and the linker would keep one of them for both measurements. Renaming
// the namespace before including Eigen gives this unit's instances different symbols. The standard
// headers Eigen uses are included first so the macro only reaches Eigen's own code.
// Thread-safe as Eigen and OpenBLAS are; OpenBLAS's thread count is set by the caller.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iosfwd>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

#define Eigen ZsBenchEigenOverBlas
#include <Eigen/Core>

namespace zs::bench {

using RowMajorMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixView = Eigen::Map<const RowMajorMatrix, Eigen::Unaligned, Eigen::OuterStride<>>;
using MatrixView = Eigen::Map<RowMajorMatrix, Eigen::Unaligned, Eigen::OuterStride<>>;

// C = alpha * op(A) * op(B) (beta = 0), row-major, as ops/cpu/gemm.h's sgemm.
void eigen_over_blas_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                           int64_t ldc) {
  ConstMatrixView a_view(a, trans_a ? k : m, trans_a ? m : k, Eigen::OuterStride<>(lda));
  ConstMatrixView b_view(b, trans_b ? n : k, trans_b ? k : n, Eigen::OuterStride<>(ldb));
  MatrixView c_view(c, m, n, Eigen::OuterStride<>(ldc));
  if (trans_a && trans_b) {
    c_view.noalias() = alpha * a_view.transpose() * b_view.transpose();
  } else if (trans_a) {
    c_view.noalias() = alpha * a_view.transpose() * b_view;
  } else if (trans_b) {
    c_view.noalias() = alpha * a_view * b_view.transpose();
  } else {
    c_view.noalias() = alpha * a_view * b_view;
  }
}

}  // namespace zs::bench
