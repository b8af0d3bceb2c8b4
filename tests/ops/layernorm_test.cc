// Tests of ops::layernorm (ops/layernorm.h): gradients against finite differences on odd shapes,
// forward values against a double-precision reference (also with a large common offset), fp16
// and bf16 storage, accumulation into an existing gradient, independence of dgamma/dbeta/dx from
// the OpenMP thread count, and argument checks.
//
// Tolerances for fp16/bf16: the op computes in fp32 from the stored (already rounded) values, so
// against the fp32 op run on those same values the only difference is the final rounding of each
// output to the storage type: at most half an ulp, i.e. 2^-11 (fp16) or 2^-8 (bf16) relative.
// We allow one full ulp (2^-10, 2^-7) so a different fp32 contraction (FMA) between the template
// instantiations cannot make the test flaky, plus 1e-7 absolute for fp16 subnormals.
#include "ops/layernorm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/error.h"
#include "tests/support/gradcheck.h"
#include "tests/support/op_test.h"

namespace zs {
namespace {

using testing::backward_from;
using testing::check_gradients;
using testing::converted;
using testing::one_ulp_tolerance;
using testing::OpTest;
using testing::random_tensor;

// y of one row in double.
std::vector<double> reference_layernorm(const std::vector<float>& x,
                                        const std::vector<float>& gamma,
                                        const std::vector<float>& beta, int64_t rows, int64_t cols,
                                        double eps) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0;
    for (int64_t j = 0; j < cols; ++j) mean += x[r * cols + j];
    mean /= cols;
    double var = 0;
    for (int64_t j = 0; j < cols; ++j) var += (x[r * cols + j] - mean) * (x[r * cols + j] - mean);
    var /= cols;
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t j = 0; j < cols; ++j) {
      y[r * cols + j] = (x[r * cols + j] - mean) * rstd * gamma[j] + beta[j];
    }
  }
  return y;
}

class LayerNormTest : public OpTest {};

TEST_F(LayerNormTest, GradientsMatchFiniteDifferencesOnOddShapes) {
  const std::vector<Shape> shapes = {{1, 1}, {5, 1}, {3, 7}, {2, 3, 13}, {1, 3}};
  uint32_t seed = 10;
  for (const Shape& shape : shapes) {
    SCOPED_TRACE(shape_str(shape));
    const int64_t cols = shape.back();
    Tensor x = random_tensor(shape, allocator_, seed++, -2.0f, 2.0f);
    Tensor gamma = random_tensor({cols}, allocator_, seed++, 0.5f, 1.5f);
    Tensor beta = random_tensor({cols}, allocator_, seed++);
    auto fn = [](const std::vector<Tensor>& in) { return ops::layernorm(in[0], in[1], in[2]); };
    EXPECT_EQ(check_gradients(fn, {x, gamma, beta}), 0);
  }
}

TEST_F(LayerNormTest, GradientOfXAloneAndOfParametersAlone) {
  Tensor x = random_tensor({4, 9}, allocator_, 1, -2.0f, 2.0f);
  Tensor gamma = random_tensor({9}, allocator_, 2, 0.5f, 1.5f, /*requires_grad=*/false);
  Tensor beta = random_tensor({9}, allocator_, 3, -1.0f, 1.0f, /*requires_grad=*/false);
  auto fn = [](const std::vector<Tensor>& in) { return ops::layernorm(in[0], in[1], in[2]); };
  EXPECT_EQ(check_gradients(fn, {x, gamma, beta}), 0);

  Tensor x_const = random_tensor({4, 9}, allocator_, 4, -2.0f, 2.0f, /*requires_grad=*/false);
  gamma.set_requires_grad(true);
  beta.set_requires_grad(true);
  EXPECT_EQ(check_gradients(fn, {x_const, gamma, beta}), 0);
}

TEST_F(LayerNormTest, ForwardMatchesDoubleReference) {
  // offset 0: ordinary activations; offset 100: a large common mean, where a naive fp32 sum of
  // the row would lose ~1e-4 of accuracy in the mean. The fp32 result can differ from the exact
  // one by the rounding of the mean itself (|mean|·2^-24·rstd ≈ 1e-5 at offset 100) plus a few
  // ulps of each step, hence 3e-5 absolute on outputs of magnitude ≲ 5.
  const int64_t rows = 5;
  const int64_t cols = 257;
  for (float offset : {0.0f, 100.0f}) {
    SCOPED_TRACE(offset);
    Tensor x = random_tensor({rows, cols}, allocator_, 7, offset - 1.0f, offset + 1.0f, false);
    Tensor gamma = random_tensor({cols}, allocator_, 8, 0.5f, 1.5f, false);
    Tensor beta = random_tensor({cols}, allocator_, 9, -1.0f, 1.0f, false);
    Tensor y = ops::layernorm(x, gamma, beta, 1e-5f);
    ASSERT_EQ(y.shape(), x.shape());
    ASSERT_EQ(y.dtype(), DType::kF32);
    const std::vector<double> expected =
        reference_layernorm(x.to_vector(), gamma.to_vector(), beta.to_vector(), rows, cols, 1e-5);
    const std::vector<float> got = y.to_vector();
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], expected[i], 3e-5) << "element " << i;
    }
  }
}

TEST_F(LayerNormTest, ConstantRowIsFinite) {
  // var = 0: rstd = 1/sqrt(eps) is finite and x̂ = 0, so y = beta, dgamma = 0, dbeta = dy and
  // dx = rstd·(g − mean(g)) with g = dy·gamma (the variance term vanishes with x̂). No NaN.
  // dx is ~316× the upstream gradient, computed in fp32: 1e-5 relative + 1e-6 absolute.
  Tensor x = Tensor::empty({2, 4}, DType::kF32, allocator_, "x");
  x.fill(3.0f);
  x.set_requires_grad(true);
  Tensor gamma = random_tensor({4}, allocator_, 1, 0.5f, 1.5f);
  Tensor beta = random_tensor({4}, allocator_, 2);
  Tensor y = ops::layernorm(x, gamma, beta);
  const std::vector<float> got = y.to_vector();
  const std::vector<float> b = beta.to_vector();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], b[i % 4]);
  Tensor seed = random_tensor({2, 4}, allocator_, 3, -1.0f, 1.0f, false);
  backward_from(y, seed);
  const std::vector<float> dy = seed.to_vector();
  const std::vector<float> gm = gamma.to_vector();
  const std::vector<float> dx = x.grad().to_vector();
  const double rstd = 1.0 / std::sqrt(1e-5);
  for (int r = 0; r < 2; ++r) {
    double mean_g = 0;
    for (int j = 0; j < 4; ++j) mean_g += dy[r * 4 + j] * gm[j] / 4.0;
    for (int j = 0; j < 4; ++j) {
      const double expected = rstd * (dy[r * 4 + j] * gm[j] - mean_g);
      EXPECT_NEAR(dx[r * 4 + j], expected, 1e-5 * std::fabs(expected) + 1e-6);
    }
  }
  for (float g : gamma.grad().to_vector()) EXPECT_EQ(g, 0.0f);
  const std::vector<float> dbeta = beta.grad().to_vector();
  for (int j = 0; j < 4; ++j) EXPECT_FLOAT_EQ(dbeta[j], dy[j] + dy[4 + j]);
}

TEST_F(LayerNormTest, HalfPrecisionMatchesFp32WithinOneUlp) {
  const int64_t rows = 6;
  const int64_t cols = 33;
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    // Round the inputs to the storage type once; both runs then see identical values.
    Tensor x16 = converted(random_tensor({rows, cols}, allocator_, 21, -3.0f, 3.0f), dtype, true);
    Tensor g16 = converted(random_tensor({cols}, allocator_, 22, 0.5f, 1.5f), dtype, true);
    Tensor b16 = converted(random_tensor({cols}, allocator_, 23), dtype, true);
    Tensor dy16 = converted(random_tensor({rows, cols}, allocator_, 24), dtype, false);
    Tensor x32 = converted(x16, DType::kF32, true);
    Tensor g32 = converted(g16, DType::kF32, true);
    Tensor b32 = converted(b16, DType::kF32, true);
    Tensor dy32 = converted(dy16, DType::kF32, false);

    // Forward and backward one run at a time: backward consumes the whole tape.
    Tensor y16 = ops::layernorm(x16, g16, b16);
    EXPECT_EQ(y16.dtype(), dtype);
    backward_from(y16, dy16);
    Tensor y32 = ops::layernorm(x32, g32, b32);
    backward_from(y32, dy32);
    const std::vector<std::pair<Tensor, Tensor>> pairs = {
        {y16, y32}, {x16.grad(), x32.grad()}, {g16.grad(), g32.grad()}, {b16.grad(), b32.grad()}};
    for (size_t k = 0; k < pairs.size(); ++k) {
      ASSERT_EQ(pairs[k].first.dtype(), dtype) << "pair " << k;
      const std::vector<float> low = pairs[k].first.to_vector();
      const std::vector<float> ref = pairs[k].second.to_vector();
      for (size_t i = 0; i < low.size(); ++i) {
        ASSERT_NEAR(low[i], ref[i], one_ulp_tolerance(dtype, ref[i])) << "pair " << k << " i " << i;
      }
    }
  }
}

TEST_F(LayerNormTest, AccumulatesIntoExistingGradients) {
  Tensor x = random_tensor({3, 5}, allocator_, 31, -2.0f, 2.0f);
  Tensor gamma = random_tensor({5}, allocator_, 32, 0.5f, 1.5f);
  Tensor beta = random_tensor({5}, allocator_, 33);
  Tensor seed = random_tensor({3, 5}, allocator_, 34, -1.0f, 1.0f, false);
  backward_from(ops::layernorm(x, gamma, beta), seed);
  const std::vector<float> dx = x.grad().to_vector();
  const std::vector<float> dgamma = gamma.grad().to_vector();
  const std::vector<float> dbeta = beta.grad().to_vector();
  // Second backward adds into the existing buffers: 2× the single gradient.
  backward_from(ops::layernorm(x, gamma, beta), seed);
  const std::vector<float> dx2 = x.grad().to_vector();
  const std::vector<float> dgamma2 = gamma.grad().to_vector();
  const std::vector<float> dbeta2 = beta.grad().to_vector();
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_FLOAT_EQ(dx2[i], 2 * dx[i]);
  for (size_t i = 0; i < dgamma.size(); ++i) EXPECT_FLOAT_EQ(dgamma2[i], 2 * dgamma[i]);
  for (size_t i = 0; i < dbeta.size(); ++i) EXPECT_FLOAT_EQ(dbeta2[i], 2 * dbeta[i]);
}

TEST_F(LayerNormTest, ResultsDoNotDependOnThreadCount) {
  // 700 rows × 37 = 25900 elements: above the parallel threshold, 11 reduction blocks.
  const int64_t rows = 700;
  const int64_t cols = 37;
  Tensor seed = random_tensor({rows, cols}, allocator_, 44, -1.0f, 1.0f, false);
  std::vector<std::vector<float>> results[2];
  const int saved_threads = omp_get_max_threads();
  for (int run = 0; run < 2; ++run) {
    omp_set_num_threads(run + 1);
    Tensor x = random_tensor({rows, cols}, allocator_, 41, -2.0f, 2.0f);
    Tensor gamma = random_tensor({cols}, allocator_, 42, 0.5f, 1.5f);
    Tensor beta = random_tensor({cols}, allocator_, 43);
    Tensor y = ops::layernorm(x, gamma, beta);
    backward_from(y, seed);
    results[run] = {y.to_vector(), x.grad().to_vector(), gamma.grad().to_vector(),
                    beta.grad().to_vector()};
  }
  omp_set_num_threads(saved_threads);
  for (size_t k = 0; k < results[0].size(); ++k) {
    ASSERT_EQ(results[0][k].size(), results[1][k].size());
    EXPECT_EQ(0, std::memcmp(results[0][k].data(), results[1][k].data(),
                             results[0][k].size() * sizeof(float)))
        << "result " << k << " (y, dx, dgamma, dbeta) differs between 1 and 2 threads";
  }
}

TEST_F(LayerNormTest, RejectsBadArguments) {
  Tensor x = random_tensor({3, 4}, allocator_, 1, -1.0f, 1.0f, false);
  Tensor gamma = random_tensor({4}, allocator_, 2, -1.0f, 1.0f, false);
  Tensor beta = random_tensor({4}, allocator_, 3, -1.0f, 1.0f, false);
  Tensor wrong = random_tensor({5}, allocator_, 4, -1.0f, 1.0f, false);
  EXPECT_THROW(ops::layernorm(x, wrong, beta), InvalidArgument);
  EXPECT_THROW(ops::layernorm(x, gamma, wrong), InvalidArgument);
  EXPECT_THROW(ops::layernorm(x, gamma.view({1, 4}), beta), InvalidArgument);
  EXPECT_THROW(ops::layernorm(x, converted(gamma, DType::kF16, false), beta), InvalidArgument);
  Tensor ints = Tensor::zeros({3, 4}, DType::kI32, allocator_, "ints");
  EXPECT_THROW(ops::layernorm(ints, gamma, beta), InvalidArgument);
  EXPECT_THROW(ops::layernorm(Tensor(), gamma, beta), InvalidArgument);
  Tensor empty_features = Tensor::zeros({3, 0}, DType::kF32, allocator_, "x");
  Tensor empty_gamma = Tensor::zeros({0}, DType::kF32, allocator_, "gamma");
  EXPECT_THROW(ops::layernorm(empty_features, empty_gamma, empty_gamma), InvalidArgument);
  EXPECT_THROW(ops::layernorm(x, gamma, beta, -1e-5f), InvalidArgument);
  EXPECT_THROW(ops::layernorm(x, gamma, beta, std::numeric_limits<float>::quiet_NaN()),
               InvalidArgument);
}

}  // namespace
}  // namespace zs
