// The cuBLAS GEMM (ops/cuda/gemm.h) against ops/cpu/gemm.h's sgemm: every transpose
// combination, padded leading dimensions, alpha/beta, fp32/fp16/bf16 inputs with fp32 or
// same-dtype output (label gpu; skips with "no CUDA device: skipped (compiled only)" where there
// is no GPU).
//
// Tolerance: both accumulate in fp32 but in different orders (and cuBLAS may split k), so an
// element may differ by about k·2^-24·Σ|a·b| — with entries in [−1, 1], at most 2e-5·k absolute
// here. fp16/bf16 inputs are compared with sgemm on the same (already rounded) values, so only
// the order differs; a 16-bit output adds one ulp of its type.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/cpu/gemm.h"
#include "ops/cuda/gemm.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/gradcheck.h"
#include "tests/support/op_test.h"

namespace zs {
namespace {

using testing::converted;
using testing::CudaTest;
using testing::one_ulp_tolerance;
using testing::random_tensor;

class CudaGemmTest : public CudaTest {};

TEST_F(CudaGemmTest, MatchesCpuSgemmForEveryTransposeAndDtype) {
  ops::cuda::CublasHandle handle(*stream_);
  const int64_t m = 37, n = 29, k = 53;
  const float alpha = 0.7f, beta = 0.3f;
  for (DType ab : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType c_dtype : {DType::kF32, ab}) {
      for (bool trans_a : {false, true}) {
        for (bool trans_b : {false, true}) {
          // Stored shapes with padded rows (ld = row length + 3).
          const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
          const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
          const int64_t lda = a_cols + 3, ldb = b_cols + 3, ldc = n + 3;
          Tensor a32 = random_tensor({a_rows, lda}, host_allocator_, 1, -1.0f, 1.0f, false);
          Tensor b32 = random_tensor({b_rows, ldb}, host_allocator_, 2, -1.0f, 1.0f, false);
          Tensor c32 = random_tensor({m, ldc}, host_allocator_, 3, -1.0f, 1.0f, false);
          // The inputs as stored in `ab` and `c_dtype`, and their exact fp32 values.
          Tensor a = converted(a32, ab), b = converted(b32, ab), c = converted(c32, c_dtype);
          Tensor a_ref = converted(a, DType::kF32), b_ref = converted(b, DType::kF32);
          Tensor c_ref = converted(c, DType::kF32);
          ops::cpu::sgemm(trans_a, trans_b, m, n, k, alpha, a_ref.data<float>(), lda,
                          b_ref.data<float>(), ldb, beta, c_ref.data<float>(), ldc);
          Tensor d_a = upload(a), d_b = upload(b), d_c = upload(c);
          ops::cuda::gemm(handle, trans_a, trans_b, m, n, k, alpha, d_a.raw_device_data(), lda,
                          d_b.raw_device_data(), ldb, beta, d_c.raw_device_data(), ldc, ab,
                          c_dtype);
          const std::vector<float> got = download(d_c).to_vector();
          const std::vector<float> want = c_ref.to_vector();
          int failures = 0;
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < ldc; ++j) {
              const size_t at = static_cast<size_t>(i * ldc + j);
              if (j >= n) {  // padding of C is never written
                EXPECT_EQ(got[at], c.to_vector()[at]);
                continue;
              }
              double tol = 2e-5 * static_cast<double>(k);
              if (c_dtype != DType::kF32) tol += one_ulp_tolerance(c_dtype, want[at]);
              if (!(std::fabs(got[at] - want[at]) <= tol) && failures++ < 5) {
                ADD_FAILURE() << dtype_name(ab) << "->" << dtype_name(c_dtype)
                              << " trans_a=" << trans_a << " trans_b=" << trans_b << " C[" << i
                              << "][" << j << "]: got " << got[at] << ", sgemm " << want[at];
              }
            }
          }
        }
      }
    }
  }
}

TEST_F(CudaGemmTest, BetaZeroIgnoresNanInCAndKZeroScalesC) {
  ops::cuda::CublasHandle handle(*stream_);
  Tensor a = random_tensor({4, 5}, host_allocator_, 4, -1.0f, 1.0f, false);
  Tensor b = random_tensor({5, 6}, host_allocator_, 5, -1.0f, 1.0f, false);
  Tensor c = Tensor::empty({4, 6}, DType::kF32, host_allocator_, MemoryCategory::kOther, "c");
  c.copy_from(std::vector<float>(24, std::nanf("")));
  Tensor want = Tensor::empty({4, 6}, DType::kF32, host_allocator_, MemoryCategory::kOther, "w");
  ops::cpu::sgemm(false, false, 4, 6, 5, 1.0f, a.data<float>(), 5, b.data<float>(), 6, 0.0f,
                  want.data<float>(), 6);
  Tensor d_a = upload(a), d_b = upload(b), d_c = upload(c);
  ops::cuda::gemm(handle, false, false, 4, 6, 5, 1.0f, d_a.raw_device_data(), 5,
                  d_b.raw_device_data(), 6, 0.0f, d_c.raw_device_data(), 6, DType::kF32,
                  DType::kF32);
  const std::vector<float> got = download(d_c).to_vector();
  const std::vector<float> expected = want.to_vector();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5) << i;

  // k == 0: C = beta·C.
  c.copy_from(std::vector<float>(24, 2.0f));
  Tensor d_c2 = upload(c);
  ops::cuda::gemm(handle, false, false, 4, 6, 0, 1.0f, d_a.raw_device_data(), 1,
                  d_b.raw_device_data(), 6, 0.5f, d_c2.raw_device_data(), 6, DType::kF32,
                  DType::kF32);
  EXPECT_EQ(download(d_c2).to_vector(), std::vector<float>(24, 1.0f));
}

TEST(CudaGemmArguments, BadLeadingDimensionsAndDtypesAreRejectedBeforeAnyLaunch) {
  ZS_SKIP_WITHOUT_CUDA();
  cuda::Stream stream(0);
  ops::cuda::CublasHandle handle(stream);
  float dummy = 0.0f;
  EXPECT_THROW(ops::cuda::gemm(handle, false, false, 4, 6, 5, 1.0f, &dummy, 4, &dummy, 6, 0.0f,
                               &dummy, 6, DType::kF32, DType::kF32),
               InvalidArgument);  // lda < k
  EXPECT_THROW(ops::cuda::gemm(handle, false, false, 4, 6, 5, 1.0f, &dummy, 5, &dummy, 6, 0.0f,
                               &dummy, 6, DType::kF16, DType::kBF16),
               InvalidArgument);  // C neither the inputs' dtype nor fp32
  EXPECT_THROW(ops::cuda::gemm(handle, false, false, 4, 6, 5, 1.0f, &dummy, 5, &dummy, 6, 0.0f,
                               &dummy, 6, DType::kI32, DType::kF32),
               InvalidArgument);
}

}  // namespace
}  // namespace zs
