// cuBLAS GEMM with row-major semantics (see gemm.h for the operand swap).
#include "ops/cuda/gemm.h"

#include <cublas_v2.h>

#include <algorithm>
#include <limits>

#include "runtime/cuda/check.h"
#include "runtime/cuda/cublas_check.h"
#include "runtime/error.h"

namespace zs::ops::cuda {
namespace {

cudaDataType_t cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBF16:
      return CUDA_R_16BF;
    default:
      ZS_THROW(InvalidArgument, "cuda gemm: dtype ", dtype_name(dtype),
               " is not supported (expected fp32, fp16 or bf16)");
  }
}

void check_fits_int(const char* what, int64_t value) {
  ZS_CHECK(value >= 0 && value <= std::numeric_limits<int>::max(), "cuda gemm: ", what, " = ",
           value, " must be in [0, INT_MAX] (cuBLAS's index type)");
}

}  // namespace

CublasHandle::CublasHandle(const zs::cuda::Stream& stream) : stream_(stream) {
  zs::cuda::DeviceGuard guard(stream.device());
  ZS_CUBLAS_CHECK(cublasCreate(&handle_));
  try {
    ZS_CUBLAS_CHECK(cublasSetStream(handle_, stream.get()));
    // A 16-bit C is rounded once, from the fp32 sum: cuBLAS may otherwise reduce split-k partial
    // sums in C's type (seen on an H200: fp16 linear+bias outputs 7 fp16 ulps from the CPU's).
    ZS_CUBLAS_CHECK(cublasSetMathMode(
        handle_, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                           CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  } catch (...) {
    ZS_CUBLAS_CHECK_WARN(cublasDestroy(handle_));
    throw;
  }
}

CublasHandle::~CublasHandle() {
  if (handle_ != nullptr) ZS_CUBLAS_CHECK_WARN(cublasDestroy(handle_));
}

void gemm(CublasHandle& handle, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          float alpha, const void* a, int64_t lda, const void* b, int64_t ldb, float beta, void* c,
          int64_t ldc, DType ab_dtype, DType c_dtype) {
  check_fits_int("m", m);
  check_fits_int("n", n);
  check_fits_int("k", k);
  check_fits_int("lda", lda);
  check_fits_int("ldb", ldb);
  check_fits_int("ldc", ldc);
  // The same leading-dimension rules as ops/cpu/gemm.h (row-major storage).
  const int64_t a_cols = trans_a ? m : k;
  const int64_t b_cols = trans_b ? k : n;
  ZS_CHECK(lda >= std::max<int64_t>(1, a_cols), "cuda gemm: lda = ", lda, " is below ",
           std::max<int64_t>(1, a_cols), ", the row length of the stored A");
  ZS_CHECK(ldb >= std::max<int64_t>(1, b_cols), "cuda gemm: ldb = ", ldb, " is below ",
           std::max<int64_t>(1, b_cols), ", the row length of the stored B");
  ZS_CHECK(ldc >= std::max<int64_t>(1, n), "cuda gemm: ldc = ", ldc, " is below ",
           std::max<int64_t>(1, n), ", the row length of C");
  ZS_CHECK(c_dtype == ab_dtype || c_dtype == DType::kF32, "cuda gemm: C is ", dtype_name(c_dtype),
           " but must be the inputs' dtype (", dtype_name(ab_dtype), ") or fp32");
  if (m == 0 || n == 0) return;
  ZS_CHECK(c != nullptr, "cuda gemm: C is null for a ", m, " x ", n, " result");
  ZS_CHECK(k == 0 || (a != nullptr && b != nullptr), "cuda gemm: A or B is null with k = ", k);

  const cudaDataType_t ab_type = cuda_data_type(ab_dtype);
  const cudaDataType_t c_type = cuda_data_type(c_dtype);
  const cublasComputeType_t compute = (ab_dtype == DType::kF32 && handle.allow_tf32())
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
  // Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: B goes first, m and n swap.
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  zs::cuda::DeviceGuard guard(handle.stream().device());
  // alpha and beta are host floats: the handle's default pointer mode is host, and with
  // CUBLAS_COMPUTE_32F the scalars are fp32 whatever the matrix types.
  ZS_CUBLAS_CHECK(cublasGemmEx(handle.get(), op_b, op_a, static_cast<int>(n), static_cast<int>(m),
                               static_cast<int>(k), &alpha, b, ab_type, static_cast<int>(ldb), a,
                               ab_type, static_cast<int>(lda), &beta, c, c_type,
                               static_cast<int>(ldc), compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace zs::ops::cuda
