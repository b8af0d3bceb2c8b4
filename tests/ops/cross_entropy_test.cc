// Tests of ops::cross_entropy and ops::count_valid_targets (ops/cross_entropy.h): loss and
// gradient against a double-precision reference including ignore_index rows, an all-ignored
// batch (0, not NaN), very large logits without overflow, gradients against finite differences
// on odd shapes, scaling by the upstream gradient, fp16/bf16 logits, accumulation into an
// existing gradient, and argument checks (out-of-range targets name their row and value).
#include "ops/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/error.h"
#include "tests/support/gradcheck.h"
#include "tests/support/op_test.h"

namespace zs {
namespace {

using testing::check_gradients;
using testing::converted;
using testing::invalid_argument_message;
using testing::OpTest;
using testing::random_tensor;

constexpr int32_t kIgnore = ops::kDefaultIgnoreIndex;

Tensor make_targets(const std::vector<int32_t>& values, Allocator& allocator) {
  return testing::int32_tensor(values, allocator, "targets");
}

Tensor make_logits(const std::vector<float>& values, int64_t rows, int64_t vocab,
                   Allocator& allocator, bool requires_grad = true) {
  Tensor t = Tensor::empty({rows, vocab}, DType::kF32, allocator, MemoryCategory::kOther, "logits");
  t.copy_from(values);
  t.set_requires_grad(requires_grad);
  return t;
}

struct Reference {
  double loss = 0;
  std::vector<double> grad;  // d loss / d logits, for dloss = 1
};

Reference reference_cross_entropy(const std::vector<float>& logits,
                                  const std::vector<int32_t>& targets, int64_t vocab,
                                  int32_t ignore_index) {
  const int64_t rows = static_cast<int64_t>(targets.size());
  Reference ref;
  ref.grad.assign(logits.size(), 0.0);
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) count += targets[r] != ignore_index;
  if (count == 0) return ref;
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] == ignore_index) continue;
    double max_logit = -INFINITY;
    for (int64_t i = 0; i < vocab; ++i)
      max_logit = std::max<double>(max_logit, logits[r * vocab + i]);
    double sum = 0;
    for (int64_t i = 0; i < vocab; ++i) sum += std::exp(logits[r * vocab + i] - max_logit);
    const double lse = max_logit + std::log(sum);
    ref.loss += (lse - logits[r * vocab + targets[r]]) / count;
    for (int64_t i = 0; i < vocab; ++i) {
      ref.grad[r * vocab + i] =
          (std::exp(logits[r * vocab + i] - lse) - (i == targets[r] ? 1.0 : 0.0)) / count;
    }
  }
  return ref;
}

class CrossEntropyTest : public OpTest {};

TEST_F(CrossEntropyTest, MatchesDoubleReferenceWithIgnoredRows) {
  // fp32 lse per row is good to a few ulps of its magnitude (~3); the mean of 7 rows likewise:
  // 1e-6 relative + 1e-6 absolute. Gradient entries are softmax values in [0, 1] / count:
  // 1e-6 absolute.
  const int64_t rows = 7;
  const int64_t vocab = 13;
  Tensor logits = random_tensor({rows, vocab}, allocator_, 101, -3.0f, 3.0f);
  const std::vector<int32_t> target_values = {3, kIgnore, 12, 0, kIgnore, 7, 5};
  Tensor targets = make_targets(target_values, allocator_);
  Tensor loss = ops::cross_entropy(logits, targets);
  ASSERT_EQ(loss.shape(), Shape{1});
  ASSERT_EQ(loss.dtype(), DType::kF32);
  const Reference ref = reference_cross_entropy(logits.to_vector(), target_values, vocab, kIgnore);
  EXPECT_NEAR(loss.item(), ref.loss, 1e-6 * std::fabs(ref.loss) + 1e-6);
  backward(loss);
  const std::vector<float> grad = logits.grad().to_vector();
  for (size_t i = 0; i < grad.size(); ++i) {
    EXPECT_NEAR(grad[i], ref.grad[i], 1e-6) << "element " << i;
    if (target_values[i / vocab] == kIgnore) {
      EXPECT_EQ(grad[i], 0.0f) << "element " << i;
    }
  }
  EXPECT_EQ(ops::count_valid_targets(targets, kIgnore), 5);
}

TEST_F(CrossEntropyTest, CustomIgnoreIndexInsideTheVocabulary) {
  // Padding id 0 as ignore_index: rows with target 0 are skipped, -100 is then out of range.
  const int64_t vocab = 5;
  Tensor logits = random_tensor({4, vocab}, allocator_, 102, -2.0f, 2.0f);
  const std::vector<int32_t> target_values = {0, 4, 0, 2};
  Tensor targets = make_targets(target_values, allocator_);
  Tensor loss = ops::cross_entropy(logits, targets, /*ignore_index=*/0);
  const Reference ref = reference_cross_entropy(logits.to_vector(), target_values, vocab, 0);
  EXPECT_NEAR(loss.item(), ref.loss, 1e-6 * std::fabs(ref.loss) + 1e-6);
  EXPECT_EQ(ops::count_valid_targets(targets, 0), 2);
  EXPECT_THROW(ops::cross_entropy(logits, make_targets({0, kIgnore, 1, 1}, allocator_), 0),
               InvalidArgument);
}

TEST_F(CrossEntropyTest, AllIgnoredGivesZeroLossAndZeroGradient) {
  Tensor logits = random_tensor({3, 4}, allocator_, 103, -2.0f, 2.0f);
  Tensor targets = make_targets({kIgnore, kIgnore, kIgnore}, allocator_);
  Tensor loss = ops::cross_entropy(logits, targets);
  EXPECT_EQ(loss.item(), 0.0f);
  backward(loss);
  ASSERT_TRUE(logits.grad().defined());
  for (float g : logits.grad().to_vector()) EXPECT_EQ(g, 0.0f);
  EXPECT_EQ(ops::count_valid_targets(targets, kIgnore), 0);

  // No rows at all behaves the same.
  Tensor no_logits = random_tensor({0, 4}, allocator_, 104);
  Tensor no_targets = make_targets({}, allocator_);
  EXPECT_EQ(ops::cross_entropy(no_logits, no_targets).item(), 0.0f);
}

TEST_F(CrossEntropyTest, LargeLogitsDoNotOverflow) {
  // exp(1000) overflows fp32 and double; the max-subtracted form does not. Row 0's target has the
  // largest logit: loss = log(1 + e^-0.5 + e^-1000 + e^-1000); row 1's target is 2000 below.
  const int64_t vocab = 4;
  const std::vector<float> values = {1000.0f, 999.5f,   0.0f,    -1000.0f,  //
                                     1000.0f, -1000.0f, 1000.0f, 3.0f};
  Tensor logits = make_logits(values, 2, vocab, allocator_);
  const std::vector<int32_t> target_values = {0, 1};
  Tensor loss = ops::cross_entropy(logits, make_targets(target_values, allocator_));
  const Reference ref = reference_cross_entropy(values, target_values, vocab, kIgnore);
  ASSERT_TRUE(std::isfinite(loss.item()));
  EXPECT_NEAR(ref.loss, (std::log1p(std::exp(-0.5)) + (2000.0 + std::log(2.0))) / 2, 1e-9);
  // Loss magnitude ~1000: fp32 resolves it to ~6e-5.
  EXPECT_NEAR(loss.item(), ref.loss, 2e-4);
  backward(loss);
  const std::vector<float> grad = logits.grad().to_vector();
  for (size_t i = 0; i < grad.size(); ++i) {
    ASSERT_TRUE(std::isfinite(grad[i])) << "element " << i;
    EXPECT_NEAR(grad[i], ref.grad[i], 1e-6) << "element " << i;
  }
}

TEST_F(CrossEntropyTest, GradientsMatchFiniteDifferencesOnOddShapes) {
  struct Case {
    int64_t rows;
    int64_t vocab;
    std::vector<int32_t> targets;
  };
  const std::vector<Case> cases = {{1, 1, {0}},
                                   {1, 3, {2}},
                                   {3, 7, {6, kIgnore, 0}},
                                   {7, 13, {1, 12, kIgnore, 5, 5, 0, kIgnore}}};
  uint32_t seed = 110;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.rows) + "x" + std::to_string(c.vocab));
    Tensor logits = random_tensor({c.rows, c.vocab}, allocator_, seed++, -3.0f, 3.0f);
    Tensor targets = make_targets(c.targets, allocator_);
    auto fn = [](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], in[1]); };
    EXPECT_EQ(check_gradients(fn, {logits, targets}), 0);
  }
}

TEST_F(CrossEntropyTest, GradientScalesWithUpstreamAndAccumulates) {
  Tensor logits = random_tensor({3, 5}, allocator_, 120, -2.0f, 2.0f);
  Tensor targets = make_targets({1, 4, kIgnore}, allocator_);
  backward(ops::cross_entropy(logits, targets));
  const std::vector<float> unit = logits.grad().to_vector();
  logits.set_grad(Tensor());
  backward(ops::cross_entropy(logits, targets), /*seed=*/2.5f);  // e.g. a loss scale
  const std::vector<float> scaled = logits.grad().to_vector();
  for (size_t i = 0; i < unit.size(); ++i) EXPECT_FLOAT_EQ(scaled[i], 2.5f * unit[i]);
  backward(ops::cross_entropy(logits, targets));  // adds into the existing gradient
  const std::vector<float> summed = logits.grad().to_vector();
  for (size_t i = 0; i < unit.size(); ++i) EXPECT_FLOAT_EQ(summed[i], 3.5f * unit[i]);
}

TEST_F(CrossEntropyTest, HalfPrecisionLogits) {
  // The loss is computed in fp32 from the stored logit values either way, so it matches the fp32
  // op on the same (rounded) values to fp32 rounding: 1e-6 relative. The gradient is stored in
  // the logits' dtype: within one ulp (2^-10 fp16, 2^-7 bf16, relative) + 1e-7 absolute.
  const std::vector<int32_t> target_values = {2, kIgnore, 0, 10, 7};
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor l16 = converted(random_tensor({5, 11}, allocator_, 130, -4.0f, 4.0f), dtype, true);
    Tensor l32 = converted(l16, DType::kF32, true);
    Tensor targets = make_targets(target_values, allocator_);
    // Forward and backward one run at a time: backward consumes the whole tape.
    Tensor loss16 = ops::cross_entropy(l16, targets);
    EXPECT_EQ(loss16.dtype(), DType::kF32);
    backward(loss16);
    Tensor loss32 = ops::cross_entropy(l32, targets);
    backward(loss32);
    EXPECT_NEAR(loss16.item(), loss32.item(), 1e-6 * std::fabs(loss32.item()));
    ASSERT_EQ(l16.grad().dtype(), dtype);
    const std::vector<float> low = l16.grad().to_vector();
    const std::vector<float> ref = l32.grad().to_vector();
    const double relative = dtype == DType::kF16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
    for (size_t i = 0; i < low.size(); ++i) {
      EXPECT_NEAR(low[i], ref[i], relative * std::fabs(ref[i]) + 1e-7) << "element " << i;
    }
  }
}

TEST_F(CrossEntropyTest, OutOfRangeTargetsNameRowAndValue) {
  Tensor logits = random_tensor({4, 13}, allocator_, 140, -1.0f, 1.0f, false);
  const std::string too_big = invalid_argument_message([&] {
    ops::cross_entropy(logits, make_targets({0, 1, 13, 2}, allocator_));
  });
  EXPECT_NE(too_big.find("targets[2] = 13"), std::string::npos) << too_big;
  const std::string negative = invalid_argument_message([&] {
    ops::cross_entropy(logits, make_targets({0, -1, 3, 2}, allocator_));
  });
  EXPECT_NE(negative.find("targets[1] = -1"), std::string::npos) << negative;
}

TEST_F(CrossEntropyTest, RejectsBadShapesAndDtypes) {
  Tensor logits = random_tensor({4, 13}, allocator_, 150, -1.0f, 1.0f, false);
  Tensor targets = make_targets({0, 1, 2, 3}, allocator_);
  EXPECT_THROW(ops::cross_entropy(logits.view({52}), targets), InvalidArgument);
  EXPECT_THROW(ops::cross_entropy(logits.view({2, 2, 13}), targets), InvalidArgument);
  EXPECT_THROW(ops::cross_entropy(logits, make_targets({0, 1, 2}, allocator_)), InvalidArgument);
  EXPECT_THROW(ops::cross_entropy(logits, targets.view({2, 2})), InvalidArgument);
  EXPECT_THROW(ops::cross_entropy(logits, converted(targets, DType::kF32, false)), InvalidArgument);
  Tensor int_logits = Tensor::zeros({4, 13}, DType::kI32, allocator_, "logits");
  EXPECT_THROW(ops::cross_entropy(int_logits, targets), InvalidArgument);
  Tensor no_classes = Tensor::zeros({4, 0}, DType::kF32, allocator_, "logits");
  EXPECT_THROW(ops::cross_entropy(no_classes, targets), InvalidArgument);
  EXPECT_THROW(ops::cross_entropy(logits, Tensor()), InvalidArgument);
  EXPECT_THROW(ops::count_valid_targets(logits, kIgnore), InvalidArgument);
}

}  // namespace
}  // namespace zs
