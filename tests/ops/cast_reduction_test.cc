// Tests for ops/elementwise.h's casts and reductions: casts against runtime/half.h (round trips,
// same-dtype identity, the backward's conversion), reductions against double sums, of half
// inputs against fp32 of the converted values, their independence of the thread count, and the
// bias gradient against a double reference.
//
// fp16/bf16 tolerance as in elementwise_test.cc: the ops compute in fp32 and round once, so a
// 16-bit result equals the fp32 op on the converted inputs rounded to the 16-bit type, exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "ops/cpu/gemm.h"
#include "ops/elementwise.h"
#include "ops/math/elementwise.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/half.h"
#include "runtime/rng.h"
#include "tests/ops/elementwise_test_util.h"
#include "tests/support/gradcheck.h"
#include "tests/support/op_test.h"

namespace zs::ops {
namespace {

using elementwise_testing::bits16;
using elementwise_testing::ElementwiseTest;
using elementwise_testing::float_bits;
using elementwise_testing::kLarge;
using elementwise_testing::kOddShapes;
using elementwise_testing::kParallel;
using elementwise_testing::raw_bytes;
using testing::check_gradients;
using testing::converted;
using testing::GradCheckOptions;
using testing::OpTest;
using testing::random_tensor;

// ---------------------------------------------------------------- cast

TEST_F(ElementwiseTest, CastMatchesHalfConversions) {
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               -2.5f,
                               65504.0f,
                               65519.0f,
                               65520.0f,
                               1e-8f,
                               6.1035e-5f,
                               1.0009765625f + 1e-7f,
                               3.0e38f,
                               -3.4e38f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN()};
  std::mt19937 gen(130);
  std::uniform_int_distribution<uint32_t> any_bits;
  const int64_t n = int64_t{1} << 18;
  while (values.size() < static_cast<size_t>(n)) {
    float v;
    const uint32_t bits = any_bits(gen);
    std::memcpy(&v, &bits, sizeof(v));
    // Mostly moderate magnitudes, where fp16 and bf16 rounding both matter.
    values.push_back(values.size() % 2 ? v : std::ldexp(static_cast<float>(bits >> 8), -20));
  }
  Tensor x = tensor({n}, DType::kF32, values);
  Tensor h = cast(x, DType::kF16);
  Tensor bf = cast(x, DType::kBF16);
  ASSERT_EQ(h.dtype(), DType::kF16);
  ASSERT_EQ(bf.dtype(), DType::kBF16);
  const std::vector<uint16_t> hb = bits16(h), bb = bits16(bf);
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(hb[i], float_to_half_bits(values[i])) << i;
    ASSERT_EQ(bb[i], float_to_bf16_bits(values[i])) << i;
  }
  // Between the 16-bit types: exactly through fp32, one rounding.
  const std::vector<uint16_t> h_to_bf = bits16(cast(h, DType::kBF16));
  const std::vector<uint16_t> bf_to_h = bits16(cast(bf, DType::kF16));
  const std::vector<float> h_to_f = cast(h, DType::kF32).to_vector();
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(h_to_bf[i], float_to_bf16_bits(half_bits_to_float(hb[i]))) << i;
    ASSERT_EQ(bf_to_h[i], float_to_half_bits(bf16_bits_to_float(bb[i]))) << i;
    ASSERT_EQ(float_bits(h_to_f[i]), float_bits(half_bits_to_float(hb[i]))) << i;
  }
}

TEST_F(ElementwiseTest, CastRoundTrips) {
  // Every non-NaN fp16 and bf16 bit pattern survives 16 -> fp32 -> 16 (the widening is exact).
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    Tensor x = Tensor::empty({65536}, dtype, allocator_, "patterns");
    auto* bits = static_cast<uint16_t*>(x.raw_data());
    for (uint32_t i = 0; i < 65536; ++i) bits[i] = static_cast<uint16_t>(i);
    const std::vector<uint16_t> back = bits16(cast(cast(x, DType::kF32), dtype));
    for (uint32_t i = 0; i < 65536; ++i) {
      const bool nan = dtype == DType::kF16 ? ((i & 0x7C00u) == 0x7C00u && (i & 0x3FFu))
                                            : ((i & 0x7F80u) == 0x7F80u && (i & 0x7Fu));
      if (!nan) {
        ASSERT_EQ(back[i], i) << dtype_name(dtype);
      }
    }
  }
  // fp32 values on the bf16 grid (hence within fp16 range, on its grid when |x| is moderate).
  Tensor v = tensor({4}, DType::kF32, {0.5f, -1.25f, 3.0f, 1024.0f});
  EXPECT_EQ(cast(cast(v, DType::kF16), DType::kF32).to_vector(), v.to_vector());
  EXPECT_EQ(cast(cast(v, DType::kBF16), DType::kF32).to_vector(), v.to_vector());
}

TEST_F(ElementwiseTest, CastToSameDtypeReturnsInput) {
  Tensor x = random({3}, 140);
  Tensor y = cast(x, DType::kF32);
  EXPECT_EQ(y.autograd_meta(), x.autograd_meta());
}

TEST_F(ElementwiseTest, CastBackwardConvertsToInputDtype) {
  // fp16 leaf -> fp32 -> loss: the gradient arrives in fp16; bf16 leaf -> fp16 likewise.
  Tensor weights = random({9}, 141, false);
  for (DType from : {DType::kF16, DType::kBF16}) {
    Tensor x = converted(random({9}, 142, false), from).set_requires_grad(true);
    backward(sum(mul(cast(x, DType::kF32), weights)));
    ASSERT_EQ(x.grad().dtype(), from);
    EXPECT_EQ(bits16(x.grad()), bits16(converted(weights, from)));
  }
  Tensor x = converted(random({9}, 143, false), DType::kBF16).set_requires_grad(true);
  Tensor w16 = converted(weights, DType::kF16);
  backward(sum(mul(cast(x, DType::kF16), w16)));
  // dy is fp16 (the weights); x's bf16 gradient is that value rounded to bf16.
  EXPECT_EQ(bits16(x.grad()), bits16(converted(converted(w16, DType::kF32), DType::kBF16)));
}

// ---------------------------------------------------------------- reductions

struct DoubleSums {
  double sum = 0, sum_of_squares = 0, abs_sum = 0;
};
DoubleSums double_sums(const std::vector<float>& values) {
  DoubleSums s;
  for (float v : values) {
    s.sum += v;
    s.sum_of_squares += static_cast<double>(v) * v;
    s.abs_sum += std::fabs(v);
  }
  return s;
}

TEST_F(ElementwiseTest, ReductionsMatchDoubleReference) {
  std::vector<Shape> shapes = kOddShapes;
  shapes.push_back({kLarge});
  shapes.push_back({2049});  // one element past a chunk
  uint32_t seed = 150;
  for (const Shape& shape : shapes) {
    Tensor x = random(shape, seed++, false);
    const DoubleSums ref = double_sums(x.to_vector());
    const double n = static_cast<double>(x.numel());
    // Each result is the double sum rounded once to fp32: within 1 fp32 ulp, plus the double
    // rounding differences of another summation order (~1e-16 relative to Σ|x|).
    EXPECT_NEAR(sum(x).item(), ref.sum, 1e-7 * ref.abs_sum + 1e-30);
    EXPECT_NEAR(mean(x).item(), ref.sum / n, 1e-7 * ref.abs_sum / n + 1e-30);
    EXPECT_NEAR(sum_of_squares(x).item(), ref.sum_of_squares, 1e-7 * ref.sum_of_squares);
    EXPECT_EQ(sum(x).dtype(), DType::kF32);
    EXPECT_EQ(sum(x).shape(), Shape{1});
  }
  // A sum that sequential fp32 accumulation gets wrong: 2^24 + 1 rounds back to 2^24, so 1000
  // ones after 2^24 would add nothing. In double they all count.
  std::vector<float> big_then_ones(1001, 1.0f);
  big_then_ones[0] = 16777216.0f;
  EXPECT_EQ(sum(tensor({1001}, DType::kF32, big_then_ones)).item(), 16778216.0f);
  // Empty: the sums are 0, the mean is an error.
  Tensor empty = Tensor::empty({0}, DType::kF32, allocator_, "empty");
  EXPECT_EQ(sum(empty).item(), 0.0f);
  EXPECT_EQ(sum_of_squares(empty).item(), 0.0f);
  EXPECT_THROW(mean(empty), InvalidArgument);
}

TEST_F(ElementwiseTest, ReductionsOfHalfInputsEqualFp32OfConvertedValues) {
  Tensor x = random({kParallel}, 160, false);
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    Tensor narrow = converted(x, dtype);
    Tensor wide = converted(narrow, DType::kF32);
    EXPECT_EQ(float_bits(sum(narrow).item()), float_bits(sum(wide).item()));
    EXPECT_EQ(float_bits(mean(narrow).item()), float_bits(mean(wide).item()));
    EXPECT_EQ(float_bits(sum_of_squares(narrow).item()), float_bits(sum_of_squares(wide).item()));
    EXPECT_EQ(sum(narrow).dtype(), DType::kF32);
  }
}

TEST_F(ElementwiseTest, ResultsDoNotDependOnThreadCount) {
  Tensor x = random({kLarge}, 170, false);
  Tensor rows_dy = random({1031, 777}, 171, false);  // > 2^15 elements, several column blocks
  auto run = [&](int threads) {
    cpu::IntraOpThreadsScope scope(threads);
    EXPECT_EQ(cpu::intra_op_threads(), threads);
    std::vector<std::vector<uint8_t>> out;
    out.push_back(raw_bytes(sum(x)));
    out.push_back(raw_bytes(mean(x)));
    out.push_back(raw_bytes(sum_of_squares(x)));
    out.push_back(raw_bytes(dropout(x, 0.25f, rng_key(1, "d", 2))));
    // The bias gradient: Σ over rows of dy, through backward.
    Tensor h = Tensor::zeros(rows_dy.shape(), DType::kF32, allocator_, "h");
    Tensor bias = Tensor::zeros({777}, DType::kF32, allocator_, "bias").set_requires_grad(true);
    backward(sum(mul(add_bias(h, bias), rows_dy)));
    out.push_back(raw_bytes(bias.grad()));
    return out;
  };
  const auto one = run(1);
  const auto two = run(2);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i], two[i]) << "result " << i;
}

TEST_F(ElementwiseTest, BiasGradientMatchesDoubleReference) {
  const int64_t rows = 301, cols = 515;
  Tensor dy = random({rows, cols}, 180, false);
  Tensor h = Tensor::zeros({rows, cols}, DType::kF32, allocator_, "h");
  Tensor bias = Tensor::zeros({cols}, DType::kF32, allocator_, "bias").set_requires_grad(true);
  backward(sum(mul(add_bias(h, bias), dy)));
  const std::vector<float> dyv = dy.to_vector(), grad = bias.grad().to_vector();
  for (int64_t c = 0; c < cols; ++c) {
    double ref = 0;
    for (int64_t r = 0; r < rows; ++r) ref += dyv[r * cols + c];
    EXPECT_EQ(grad[c], static_cast<float>(ref)) << c;  // summed in double, rounded once
  }
}

}  // namespace
}  // namespace zs::ops
