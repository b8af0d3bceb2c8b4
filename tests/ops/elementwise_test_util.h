// The fixture and helpers shared by the element-wise op tests (elementwise_test.cc,
// cast_reduction_test.cc): tensors from values or random, the raw bits of a tensor, and the
// sizes that take the ops' parallel paths.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/tensor.h"
#include "tests/support/gradcheck.h"
#include "tests/support/op_test.h"

namespace zs::ops::elementwise_testing {

using zs::testing::OpTest;
using zs::testing::random_tensor;

// Sizes that take the parallel paths of ops/elementwise.cc (which start at 2^15 elements):
// kParallel for exactness checks, kLarge (~1M) where statistics or the thread count matter.
inline constexpr int64_t kParallel = 40009;
inline constexpr int64_t kLarge = (int64_t{1} << 20) + 3;

class ElementwiseTest : public OpTest {
 protected:
  Tensor tensor(const Shape& shape, DType dtype, const std::vector<float>& values,
                bool requires_grad = false) {
    Tensor t = Tensor::empty(shape, dtype, allocator_, MemoryCategory::kOther, "input");
    t.copy_from(values);
    t.set_requires_grad(requires_grad);
    return t;
  }
  Tensor random(const Shape& shape, uint32_t seed, bool requires_grad = true) {
    return random_tensor(shape, allocator_, seed, -1.0f, 1.0f, requires_grad);
  }
};

inline std::vector<uint8_t> raw_bytes(const Tensor& t) {
  const auto* begin = static_cast<const uint8_t*>(t.raw_data());
  return std::vector<uint8_t>(begin, begin + t.nbytes());
}

inline uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

inline std::vector<uint16_t> bits16(const Tensor& t) {
  const auto* begin = static_cast<const uint16_t*>(t.raw_data());
  return std::vector<uint16_t>(begin, begin + t.numel());
}

inline const std::vector<Shape> kOddShapes = {{1}, {13}, {3, 7}, {7, 1, 3}};

}  // namespace zs::ops::elementwise_testing
