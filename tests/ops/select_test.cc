// Tests of ops::select (ops/select.h): values against index arithmetic along every dimension
// (negative dims too), bit-for-bit copies of fp16/bf16 elements, autograd gradients against
// finite differences on odd shapes, the exact shape of the gradient (dy at the index, zero
// elsewhere) in every dtype, accumulation from two selects of one tensor, and argument errors.
#include "ops/select.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ops/elementwise.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/error.h"
#include "runtime/half.h"
#include "tests/support/gradcheck.h"
#include "tests/support/op_test.h"

namespace zs {
namespace {

using testing::backward_from;
using testing::check_gradients;
using testing::converted;
using testing::invalid_argument_message;
using testing::OpTest;
using testing::random_tensor;

// x[.., index, ..] along `dim` of a contiguous `shape`, from the flat values.
std::vector<float> reference_select(const std::vector<float>& values, const Shape& shape,
                                    int64_t dim, int64_t index) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t size = shape[dim];
  std::vector<float> out;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) out.push_back(values[(o * size + index) * inner + j]);
  }
  return out;
}

// The shape of x without dimension `dim`.
Shape without(Shape shape, int64_t dim) {
  shape.erase(shape.begin() + dim);
  return shape;
}

class SelectTest : public OpTest {};

TEST_F(SelectTest, PicksTheIndexAlongEveryDimension) {
  const Shape shape = {3, 5, 7};
  Tensor x = random_tensor(shape, allocator_, 3, -1.0f, 1.0f, /*requires_grad=*/false);
  const std::vector<float> values = x.to_vector();
  for (int64_t dim = 0; dim < 3; ++dim) {
    for (int64_t index : {int64_t{0}, shape[dim] / 2, shape[dim] - 1}) {
      SCOPED_TRACE("dim " + std::to_string(dim) + " index " + std::to_string(index));
      Tensor y = ops::select(x, dim, index);
      EXPECT_EQ(y.shape(), without(shape, dim));
      EXPECT_EQ(y.to_vector(), reference_select(values, shape, dim, index));
      // A negative dim counts from the end.
      EXPECT_EQ(ops::select(x, dim - 3, index).to_vector(), y.to_vector());
    }
  }
  // Leading and trailing dimensions of size 1, and the [CLS] case of [B, T, C].
  Tensor ones = random_tensor({1, 4, 1}, allocator_, 4, -1.0f, 1.0f, false);
  EXPECT_EQ(ops::select(ones, 1, 2).shape(), (Shape{1, 1}));
  EXPECT_EQ(ops::select(ones, 1, 2).to_vector()[0], ones.to_vector()[2]);
  EXPECT_EQ(ops::select(x, 1, 0).to_vector(), reference_select(values, shape, 1, 0));
}

TEST_F(SelectTest, SixteenBitElementsAreCopiedBitForBit) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = converted(random_tensor({2, 3, 5}, allocator_, 21), dtype, false);
    Tensor y = ops::select(x, 1, 2);
    ASSERT_EQ(y.dtype(), dtype);
    ASSERT_EQ(y.shape(), (Shape{2, 5}));
    const uint16_t* in = static_cast<const uint16_t*>(x.raw_data());
    const uint16_t* out = static_cast<const uint16_t*>(y.raw_data());
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t c = 0; c < 5; ++c) EXPECT_EQ(out[b * 5 + c], in[(b * 3 + 2) * 5 + c]);
    }
  }
}

TEST_F(SelectTest, GradientsMatchFiniteDifferencesOnOddShapes) {
  struct Case {
    Shape shape;
    int64_t dim;
    int64_t index;
  };
  const std::vector<Case> cases = {{{3, 5, 7}, 1, 0},    {{3, 5, 7}, 0, 2}, {{3, 5, 7}, -1, 6},
                                   {{2, 3, 1, 5}, 2, 0}, {{7, 1}, 0, 4},    {{1, 13}, 1, 12}};
  uint32_t seed = 30;
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.shape) + " dim " + std::to_string(c.dim) + " index " +
                 std::to_string(c.index));
    Tensor x = random_tensor(c.shape, allocator_, seed++);
    auto fn = [&c](const std::vector<Tensor>& in) { return ops::select(in[0], c.dim, c.index); };
    EXPECT_EQ(check_gradients(fn, {x}), 0);
  }
  // Into a non-leaf, and out to a following op: tanh(select(tanh(x))).
  Tensor x = random_tensor({3, 4, 5}, allocator_, 39);
  auto chain = [](const std::vector<Tensor>& in) {
    return ops::tanh(ops::select(ops::tanh(in[0]), 1, 3));
  };
  EXPECT_EQ(check_gradients(chain, {x}), 0);
}

TEST_F(SelectTest, GradientIsDyAtTheIndexAndZeroElsewhereInEveryDtype) {
  const Shape shape = {3, 4, 5};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = converted(random_tensor(shape, allocator_, 41), dtype, true);
    Tensor dy = converted(random_tensor({3, 5}, allocator_, 42), dtype, false);
    backward_from(ops::select(x, 1, 1), dy);
    ASSERT_TRUE(x.grad().defined());
    ASSERT_EQ(x.grad().dtype(), dtype);
    const std::vector<float> grad = x.grad().to_vector();
    const std::vector<float> seed = dy.to_vector();
    for (int64_t b = 0; b < 3; ++b) {
      for (int64_t t = 0; t < 4; ++t) {
        for (int64_t c = 0; c < 5; ++c) {
          const float expected = t == 1 ? seed[b * 5 + c] : 0.0f;
          EXPECT_EQ(grad[(b * 4 + t) * 5 + c], expected) << "b " << b << " t " << t << " c " << c;
        }
      }
    }
  }
}

TEST_F(SelectTest, TwoSelectsOfOneTensorAccumulate) {
  // select(x, 1, 0) + select(x, 1, 2): the first backward writes a fresh gradient (zeros and one
  // slab), the second adds its slab; then a second backward adds everything once more.
  Tensor x = random_tensor({2, 3, 4}, allocator_, 51);
  Tensor seed = random_tensor({2, 4}, allocator_, 52, -1.0f, 1.0f, false);
  auto run = [&] { backward_from(ops::add(ops::select(x, 1, 0), ops::select(x, 1, 2)), seed); };
  run();
  const std::vector<float> once = x.grad().to_vector();
  const std::vector<float> dy = seed.to_vector();
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t t = 0; t < 3; ++t) {
      for (int64_t c = 0; c < 4; ++c) {
        EXPECT_EQ(once[(b * 3 + t) * 4 + c], t == 1 ? 0.0f : dy[b * 4 + c]);
      }
    }
  }
  run();
  const std::vector<float> twice = x.grad().to_vector();
  for (size_t i = 0; i < once.size(); ++i) EXPECT_EQ(twice[i], 2 * once[i]) << "i " << i;
  // The same index twice: 2·dy there.
  x.set_grad(Tensor());
  Tensor row_seed = random_tensor({3, 4}, allocator_, 53, -1.0f, 1.0f, false);
  backward_from(ops::add(ops::select(x, 0, 1), ops::select(x, 0, 1)), row_seed);
  const std::vector<float> same = x.grad().to_vector();
  const std::vector<float> row_dy = row_seed.to_vector();
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t i = 0; i < 12; ++i) {
      EXPECT_EQ(same[b * 12 + i], b == 1 ? 2 * row_dy[i] : 0.0f) << "b " << b << " i " << i;
    }
  }
}

TEST_F(SelectTest, NoTapeEntryWithoutGrad) {
  Tensor x = random_tensor({2, 3}, allocator_, 61, -1.0f, 1.0f, /*requires_grad=*/false);
  const size_t before = current_tape().size();
  Tensor y = ops::select(x, 1, 1);
  EXPECT_EQ(current_tape().size(), before);
  EXPECT_FALSE(y.requires_grad());
  Tensor w = random_tensor({2, 3}, allocator_, 62);
  {
    NoGradScope no_grad;
    ops::select(w, 0, 0);
  }
  EXPECT_EQ(current_tape().size(), before);
}

TEST_F(SelectTest, RejectsBadArguments) {
  Tensor x = random_tensor({2, 3, 4}, allocator_, 71, -1.0f, 1.0f, false);
  auto message = [](const std::function<void()>& fn) { return invalid_argument_message(fn); };
  const auto contains = [](const std::string& text, const char* part) {
    return text.find(part) != std::string::npos;
  };
  // Dimension out of range, either side.
  EXPECT_TRUE(contains(message([&] { ops::select(x, 3, 0); }), "dim 3 is out of range"));
  EXPECT_TRUE(contains(message([&] { ops::select(x, -4, 0); }), "[-3, 3)"));
  // Index out of range, either side.
  EXPECT_TRUE(contains(message([&] { ops::select(x, 1, 3); }), "index 3 is out of range"));
  EXPECT_TRUE(contains(message([&] { ops::select(x, 1, 3); }), "[0, 3)"));
  EXPECT_TRUE(contains(message([&] { ops::select(x, 2, -1); }), "index -1"));
  // Too few dimensions, integer and undefined inputs.
  Tensor vector = random_tensor({5}, allocator_, 72, -1.0f, 1.0f, false);
  EXPECT_TRUE(contains(message([&] { ops::select(vector, 0, 0); }), "at least 2 dimensions"));
  Tensor ints = Tensor::zeros({2, 3}, DType::kI32, allocator_, "ints");
  EXPECT_TRUE(contains(message([&] { ops::select(ints, 0, 0); }), "fp32, fp16 or bf16"));
  EXPECT_TRUE(contains(message([] { ops::select(Tensor(), 0, 0); }), "undefined"));
  // Every message names the op.
  EXPECT_TRUE(contains(message([&] { ops::select(x, 0, 2); }), "select"));
}

}  // namespace
}  // namespace zs
