// Tests of ops::tanh (ops/elementwise.h) and its math (ops/math/tanh.h): values against tanh in
// double, the fp32 op against std::tanh bit for bit across chunk boundaries, the derivative
// against a double central difference, autograd gradients against finite differences on odd
// shapes, fp16/bf16 storage (the backward uses the stored, rounded output), accumulation into an
// existing gradient, and argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ops/elementwise.h"
#include "ops/math/tanh.h"
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
using testing::invalid_argument_message;
using testing::one_ulp_tolerance;
using testing::OpTest;
using testing::random_tensor;

const std::vector<float> kSamplePoints = {-1e30f, -30.0f, -9.5f, -5.0f, -2.0f, -1.0f, -0.5f,
                                          -1e-3f, -1e-8f, -0.0f, 0.0f,  1e-8f, 1e-3f, 0.25f,
                                          0.5f,   1.0f,   2.0f,  5.0f,  9.5f,  30.0f, 1e30f};

uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

class TanhTest : public OpTest {};

TEST_F(TanhTest, ValuesMatchTanhInDouble) {
  // tanhf is accurate to a couple of ulp (2^-23 relative each); 4e-7 relative covers it, and
  // large |x| saturates to exactly ±1. Signed zeros keep their sign, NaN stays NaN.
  Tensor x =
      Tensor::empty({static_cast<int64_t>(kSamplePoints.size())}, DType::kF32, allocator_, "x");
  x.copy_from(kSamplePoints);
  const std::vector<float> y = ops::tanh(x).to_vector();
  for (size_t i = 0; i < kSamplePoints.size(); ++i) {
    const double expected = std::tanh(static_cast<double>(kSamplePoints[i]));
    EXPECT_NEAR(y[i], expected, 4e-7 * std::fabs(expected)) << "x = " << kSamplePoints[i];
    EXPECT_EQ(std::signbit(y[i]), std::signbit(kSamplePoints[i])) << "x = " << kSamplePoints[i];
  }
  EXPECT_EQ(y.front(), -1.0f);
  EXPECT_EQ(y.back(), 1.0f);
  EXPECT_TRUE(std::isnan(ops::math::tanh_forward(std::numeric_limits<float>::quiet_NaN())));
}

TEST_F(TanhTest, Fp32EqualsStdTanhBitForBitAcrossChunks) {
  // 2·2048 + 37 elements: three chunks of the element-wise loops, the last one partial. Each
  // element is std::tanh of its own value whatever chunk it lands in.
  const int64_t n = 2 * 2048 + 37;
  Tensor x = random_tensor({n}, allocator_, 11, -6.0f, 6.0f, /*requires_grad=*/false);
  const std::vector<float> xs = x.to_vector();
  const std::vector<float> y = ops::tanh(x).to_vector();
  ASSERT_EQ(y.size(), xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    ASSERT_EQ(bits_of(y[i]), bits_of(std::tanh(xs[i]))) << "i " << i << " x " << xs[i];
  }
}

TEST_F(TanhTest, DerivativeMatchesDoubleCentralDifference) {
  // The derivative from the output, 1 − y², against (tanh(x+h) − tanh(x−h)) / 2h in double
  // (h = 1e-5: truncation ~h² and rounding ~1e-11, effectively exact). 1 − y² loses relative
  // accuracy as y → ±1 (the absolute error stays ~2 ulp of 1), hence 5e-7 absolute.
  const double h = 1e-5;
  for (float x : kSamplePoints) {
    if (std::fabs(x) > 100.0f) continue;
    const double expected = (std::tanh(x + h) - std::tanh(x - h)) / (2 * h);
    const float y = ops::math::tanh_forward(x);
    EXPECT_NEAR(ops::math::tanh_derivative_from_output(y), expected, 5e-7 + 1e-6 * expected)
        << "x = " << x;
  }
  EXPECT_EQ(ops::math::tanh_backward(1.0f, 3.0f), 0.0f);  // saturated: no gradient
  EXPECT_EQ(ops::math::tanh_backward(0.0f, 3.0f), 3.0f);
}

TEST_F(TanhTest, GradientsMatchFiniteDifferencesOnOddShapes) {
  const std::vector<Shape> shapes = {{1}, {13}, {3, 7}, {2, 3, 5}};
  uint32_t seed = 40;
  for (const Shape& shape : shapes) {
    SCOPED_TRACE(shape_str(shape));
    Tensor x = random_tensor(shape, allocator_, seed++, -3.0f, 3.0f);
    auto fn = [](const std::vector<Tensor>& in) { return ops::tanh(in[0]); };
    EXPECT_EQ(check_gradients(fn, {x}), 0);
  }
  // Composition: tanh(tanh(x)) exercises backward into a non-leaf.
  Tensor x = random_tensor({7}, allocator_, 49, -2.0f, 2.0f);
  auto twice = [](const std::vector<Tensor>& in) { return ops::tanh(ops::tanh(in[0])); };
  EXPECT_EQ(check_gradients(twice, {x}), 0);
}

TEST_F(TanhTest, HalfPrecisionRoundsOnceAndDifferentiatesTheStoredOutput) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x16 = converted(random_tensor({5, 11}, allocator_, 61, -3.0f, 3.0f), dtype, true);
    Tensor dy16 = converted(random_tensor({5, 11}, allocator_, 62), dtype, false);
    Tensor x32 = converted(x16, DType::kF32, false);
    Tensor y16 = ops::tanh(x16);
    EXPECT_EQ(y16.dtype(), dtype);
    backward_from(y16, dy16);
    ASSERT_TRUE(x16.grad().defined());
    ASSERT_EQ(x16.grad().dtype(), dtype);
    // Forward: the fp32 op on the same values, rounded once.
    const std::vector<float> low = y16.to_vector();
    const std::vector<float> ref = ops::tanh(x32).to_vector();
    for (size_t i = 0; i < low.size(); ++i) {
      ASSERT_NEAR(low[i], ref[i], one_ulp_tolerance(dtype, ref[i])) << "y i " << i;
    }
    // Backward: dy · (1 − y²) from the stored 16-bit y, computed in fp32 and rounded once.
    const std::vector<float> grad = x16.grad().to_vector();
    const std::vector<float> dy = dy16.to_vector();
    for (size_t i = 0; i < grad.size(); ++i) {
      const float expected = ops::math::tanh_backward(low[i], dy[i]);
      ASSERT_NEAR(grad[i], expected, one_ulp_tolerance(dtype, expected)) << "dx i " << i;
    }
  }
}

TEST_F(TanhTest, AccumulatesIntoExistingGradient) {
  Tensor x = random_tensor({9}, allocator_, 71, -3.0f, 3.0f);
  Tensor seed = random_tensor({9}, allocator_, 72, -1.0f, 1.0f, false);
  backward_from(ops::tanh(x), seed);
  const std::vector<float> once = x.grad().to_vector();
  backward_from(ops::tanh(x), seed);
  const std::vector<float> twice = x.grad().to_vector();
  const std::vector<float> xs = x.to_vector();
  const std::vector<float> dy = seed.to_vector();
  for (size_t i = 0; i < once.size(); ++i) {
    EXPECT_FLOAT_EQ(once[i], ops::math::tanh_backward(std::tanh(xs[i]), dy[i]));
    EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
  }
}

TEST_F(TanhTest, NoTapeEntryWithoutGrad) {
  Tensor x = random_tensor({4}, allocator_, 81, -1.0f, 1.0f, /*requires_grad=*/false);
  const size_t before = current_tape().size();
  Tensor y = ops::tanh(x);
  EXPECT_EQ(current_tape().size(), before);
  EXPECT_FALSE(y.requires_grad());
  Tensor w = random_tensor({4}, allocator_, 82);
  {
    NoGradScope no_grad;
    ops::tanh(w);
  }
  EXPECT_EQ(current_tape().size(), before);
}

TEST_F(TanhTest, RejectsBadArguments) {
  Tensor ints = Tensor::zeros({3}, DType::kI32, allocator_, "ints");
  EXPECT_NE(invalid_argument_message([&] { ops::tanh(ints); }).find("tanh"), std::string::npos);
  EXPECT_NE(invalid_argument_message([&] { ops::tanh(ints); }).find("fp32, fp16 or bf16"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([] { ops::tanh(Tensor()); }).find("undefined"),
            std::string::npos);
}

}  // namespace
}  // namespace zs
