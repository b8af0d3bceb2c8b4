// The tolerance helpers of tests/support/op_test.h that the CPU and CUDA op tests bound their
// comparisons with, against the formats themselves (runtime/half.h's conversions): storage_ulp is
// the distance from a value to the next representable one, in the normal and the subnormal range,
// and the bounds built from it hold the two-rounding cases the CUDA tests meet.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "runtime/half.h"
#include "tests/support/op_test.h"

namespace zs {
namespace {

using testing::one_ulp_tolerance;
using testing::storage_ulp;

// The next representable value above the positive `value` (exactly representable) in `dtype`.
double next_up(DType dtype, float value) {
  switch (dtype) {
    case DType::kF16:
      return half_bits_to_float(static_cast<uint16_t>(float_to_half_bits(value) + 1));
    case DType::kBF16:
      return bf16_bits_to_float(static_cast<uint16_t>(float_to_bf16_bits(value) + 1));
    default:
      return std::nextafter(value, INFINITY);
  }
}

TEST(StorageUlp, IsTheDistanceToTheNextValueInEveryRange) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    // Values every format holds exactly: normal ones of several binades, the smallest normal,
    // and subnormals.
    const float min_normal = dtype == DType::kF16 ? std::ldexp(1.0f, -14) : std::ldexp(1.0f, -126);
    const float smallest = dtype == DType::kF16    ? std::ldexp(1.0f, -24)
                           : dtype == DType::kBF16 ? std::ldexp(1.0f, -133)
                                                   : std::ldexp(1.0f, -149);
    for (float value : {1.0f, 1.5f, 0.75f, std::ldexp(1.25f, -9), 1000.0f, min_normal,
                        5.0f * smallest, smallest}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " at " + std::to_string(value));
      EXPECT_EQ(storage_ulp(dtype, value), next_up(dtype, value) - value);
      EXPECT_EQ(storage_ulp(dtype, -value), storage_ulp(dtype, value));
    }
    EXPECT_EQ(storage_ulp(dtype, 0.0), smallest) << dtype_name(dtype);
  }
}

TEST(StorageUlp, CoversTheTwoRoundingsOfAGradientAddedIntoAHalfSinkNearZero) {
  // CudaNnOpsTest's "cross_entropy twice" fp16 case: one gradient g = 32.5000x · 2^-24 (an fp16
  // subnormal near a tie), written into the fp16 sink and then added to it. An fp32 g a few ulps
  // above the tie gives 33 then 66 · 2^-24; one a few ulps below, 32 then 64 · 2^-24: two storage
  // ulps apart from the same fp32 value up to rounding.
  const double unit = std::ldexp(1.0, -24);
  const auto twice = [](float g) {
    const float first = half_bits_to_float(float_to_half_bits(g));
    return static_cast<double>(half_bits_to_float(float_to_half_bits(first + g)));
  };
  const float above = static_cast<float>(32.500046 * unit);
  const float below = static_cast<float>(32.499954 * unit);
  EXPECT_EQ(twice(above), 66 * unit);
  EXPECT_EQ(twice(below), 64 * unit);
  const double difference = twice(above) - twice(below);
  // One ulp relative to the value is about 2^-10 of it here: far below one subnormal spacing.
  EXPECT_GT(difference,
            one_ulp_tolerance(DType::kF16, twice(above)) + std::ldexp(1.0, -10) * twice(above));
  // One storage_ulp per rounding covers it.
  EXPECT_LE(difference, 2 * storage_ulp(DType::kF16, twice(above)));
  EXPECT_LE(difference, one_ulp_tolerance(DType::kF16, twice(above)) +
                            std::ldexp(1.0, -10) * twice(above) + storage_ulp(DType::kF16, 0.0));
}

}  // namespace
}  // namespace zs
