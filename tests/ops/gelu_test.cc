// Tests of ops::gelu (ops/gelu.h) and its math (ops/math/gelu.h): values against the tanh
// formula evaluated in double, the derivative against a double central difference, autograd
// gradients against finite differences on odd shapes, fp16/bf16 storage, accumulation into an
// existing gradient, and argument checks.
//
// Tolerances: see each test. For fp16/bf16 the op computes in fp32 from the stored values, so
// against the fp32 op on those same values only the final rounding differs (≤ ½ ulp); we allow
// one ulp (2^-10 fp16, 2^-7 bf16, relative) plus 1e-7 absolute for fp16 subnormals.
#include "ops/gelu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/math/gelu.h"
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

// GPT-2's formula, literally, in double.
double reference_gelu(double x) {
  const double pi = 3.14159265358979323846;
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}

const std::vector<float> kSamplePoints = {
    -30.0f, -10.0f, -6.0f, -4.0f, -3.0f, -2.0f, -1.5f, -1.0f, -0.5f, -0.1f, -1e-4f, 0.0f,
    1e-4f,  0.1f,   0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,  10.0f, 30.0f,  1000.0f};

class GeluTest : public OpTest {};

TEST_F(GeluTest, ValuesMatchTanhFormulaInDouble) {
  // The fp32 evaluation (as x·σ(2u)) has a relative error of a few ulp near 0, growing to about
  // |2u|·(a few ulp) in the negative tail where σ(2u) ≈ e^(2u) magnifies the error of u: at
  // x = −6, |2u| ≈ 19, i.e. ~1e-5 relative. 2e-5 relative + 1e-12 absolute covers every point
  // (for x ≤ −10 both results are below 1e-30).
  Tensor x =
      Tensor::empty({static_cast<int64_t>(kSamplePoints.size())}, DType::kF32, allocator_, "x");
  x.copy_from(kSamplePoints);
  const std::vector<float> y = ops::gelu(x).to_vector();
  for (size_t i = 0; i < kSamplePoints.size(); ++i) {
    const double expected = reference_gelu(kSamplePoints[i]);
    EXPECT_NEAR(y[i], expected, 2e-5 * std::fabs(expected) + 1e-12) << "x = " << kSamplePoints[i];
    EXPECT_FALSE(std::isnan(y[i])) << "x = " << kSamplePoints[i];
  }
}

TEST_F(GeluTest, DerivativeMatchesDoubleCentralDifference) {
  // (f(x+h) − f(x−h)) / 2h in double with h = 1e-5 has truncation error h²·f'''/6 < 1e-10 and
  // rounding error ~1e-16/h = 1e-11: effectively exact. The fp32 derivative is good to a few
  // ulps of its terms, whose magnitude is at most ~10 near x ≈ −2 (they cancel partially), so
  // 2e-6 absolute + 1e-5 relative.
  const double h = 1e-5;
  for (float x : kSamplePoints) {
    if (std::fabs(x) > 100.0f) continue;  // x·x³ blows up the double difference's scale
    const double expected = (reference_gelu(x + h) - reference_gelu(x - h)) / (2 * h);
    const float got = ops::math::gelu_derivative(x);
    EXPECT_NEAR(got, expected, 2e-6 + 1e-5 * std::fabs(expected)) << "x = " << x;
  }
  // The saturation shortcut agrees with the limits, and huge inputs give no NaN.
  EXPECT_EQ(ops::math::gelu_derivative(1e30f), 1.0f);
  EXPECT_EQ(ops::math::gelu_derivative(-1e30f), 0.0f);
  EXPECT_EQ(ops::math::gelu_forward(1e30f), 1e30f);
  EXPECT_EQ(ops::math::gelu_forward(-1e30f), 0.0f);
}

TEST_F(GeluTest, GradientsMatchFiniteDifferencesOnOddShapes) {
  const std::vector<Shape> shapes = {{1}, {13}, {3, 7}, {2, 3, 5}};
  uint32_t seed = 50;
  for (const Shape& shape : shapes) {
    SCOPED_TRACE(shape_str(shape));
    Tensor x = random_tensor(shape, allocator_, seed++, -4.0f, 4.0f);
    auto fn = [](const std::vector<Tensor>& in) { return ops::gelu(in[0]); };
    EXPECT_EQ(check_gradients(fn, {x}), 0);
  }
  // Composition: gelu(gelu(x)) exercises backward into a non-leaf.
  Tensor x = random_tensor({7}, allocator_, 99, -3.0f, 3.0f);
  auto twice = [](const std::vector<Tensor>& in) { return ops::gelu(ops::gelu(in[0])); };
  EXPECT_EQ(check_gradients(twice, {x}), 0);
}

TEST_F(GeluTest, HalfPrecisionMatchesFp32WithinOneUlp) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x16 = converted(random_tensor({5, 11}, allocator_, 61, -5.0f, 5.0f), dtype, true);
    Tensor dy16 = converted(random_tensor({5, 11}, allocator_, 62), dtype, false);
    Tensor x32 = converted(x16, DType::kF32, true);
    Tensor dy32 = converted(dy16, DType::kF32, false);
    // Forward and backward one run at a time: backward consumes the whole tape.
    Tensor y16 = ops::gelu(x16);
    EXPECT_EQ(y16.dtype(), dtype);
    backward_from(y16, dy16);
    Tensor y32 = ops::gelu(x32);
    backward_from(y32, dy32);
    ASSERT_EQ(x16.grad().dtype(), dtype);
    const std::vector<std::pair<Tensor, Tensor>> pairs = {{y16, y32}, {x16.grad(), x32.grad()}};
    for (size_t k = 0; k < pairs.size(); ++k) {
      const std::vector<float> low = pairs[k].first.to_vector();
      const std::vector<float> ref = pairs[k].second.to_vector();
      for (size_t i = 0; i < low.size(); ++i) {
        ASSERT_NEAR(low[i], ref[i], one_ulp_tolerance(dtype, ref[i])) << "pair " << k << " i " << i;
      }
    }
  }
}

TEST_F(GeluTest, AccumulatesIntoExistingGradient) {
  Tensor x = random_tensor({9}, allocator_, 71, -3.0f, 3.0f);
  Tensor seed = random_tensor({9}, allocator_, 72, -1.0f, 1.0f, false);
  backward_from(ops::gelu(x), seed);
  const std::vector<float> once = x.grad().to_vector();
  backward_from(ops::gelu(x), seed);
  const std::vector<float> twice = x.grad().to_vector();
  const std::vector<float> xs = x.to_vector();
  const std::vector<float> dy = seed.to_vector();
  for (size_t i = 0; i < once.size(); ++i) {
    EXPECT_FLOAT_EQ(once[i], dy[i] * ops::math::gelu_derivative(xs[i]));
    EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
  }
}

TEST_F(GeluTest, NoTapeEntryWithoutGrad) {
  Tensor x = random_tensor({4}, allocator_, 81, -1.0f, 1.0f, /*requires_grad=*/false);
  const size_t before = current_tape().size();
  Tensor y = ops::gelu(x);
  EXPECT_EQ(current_tape().size(), before);
  EXPECT_FALSE(y.requires_grad());
  Tensor w = random_tensor({4}, allocator_, 82);
  {
    NoGradScope no_grad;
    ops::gelu(w);
  }
  EXPECT_EQ(current_tape().size(), before);
}

TEST_F(GeluTest, RejectsBadArguments) {
  Tensor ints = Tensor::zeros({3}, DType::kI32, allocator_, "ints");
  EXPECT_THROW(ops::gelu(ints), InvalidArgument);
  EXPECT_THROW(ops::gelu(Tensor()), InvalidArgument);
}

}  // namespace
}  // namespace zs
