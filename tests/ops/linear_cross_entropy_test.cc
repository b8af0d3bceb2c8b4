// Tests of ops::linear_cross_entropy and ops::head_chunk_rows (ops/linear_cross_entropy.h): the
// fused head against the unfused cross_entropy(linear(h, weight)) — bitwise with one chunk, the
// same loss and close gradients with several — at every chunk size, with ignored rows, for 16-bit
// operands, accumulating into existing gradients (a tied weight), with no valid rows or no rows,
// against finite differences; that the head's activations peak at one chunk's logits and
// gradient; and the argument checks (a bad target names its row and value).
#include "ops/linear_cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/cross_entropy.h"
#include "ops/linear.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/error.h"
#include "tests/support/error_text.h"
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

struct Result {
  float loss = 0;
  std::vector<float> dh;
  std::vector<float> dweight;
};

// Loss and gradients of h and weight (fresh leaves converted to `dtype`) through the fused op
// (chunk_rows >= 0) or the unfused ops (chunk_rows < 0).
Result run(const Tensor& h, const Tensor& weight, const Tensor& targets, int64_t chunk_rows,
           DType dtype = DType::kF32) {
  Tensor h_leaf = converted(h, dtype, /*requires_grad=*/true);
  Tensor weight_leaf = converted(weight, dtype, /*requires_grad=*/true);
  Tensor loss = chunk_rows >= 0
                    ? ops::linear_cross_entropy(h_leaf, weight_leaf, targets, kIgnore, chunk_rows)
                    : ops::cross_entropy(ops::linear(h_leaf, weight_leaf), targets);
  Result result;
  result.loss = loss.item();
  backward(loss);
  result.dh = h_leaf.grad().to_vector();
  result.dweight = weight_leaf.grad().to_vector();
  return result;
}

void expect_bitwise(const Result& a, const Result& b, const std::string& what) {
  EXPECT_EQ(a.loss, b.loss) << what;
  EXPECT_EQ(a.dh, b.dh) << what;
  EXPECT_EQ(a.dweight, b.dweight) << what;
}

void expect_close(const Result& a, const Result& b, double tolerance, const std::string& what) {
  ASSERT_EQ(a.dh.size(), b.dh.size());
  ASSERT_EQ(a.dweight.size(), b.dweight.size());
  for (size_t i = 0; i < a.dh.size(); ++i) {
    EXPECT_NEAR(a.dh[i], b.dh[i], tolerance) << what << ", dh element " << i;
  }
  for (size_t i = 0; i < a.dweight.size(); ++i) {
    EXPECT_NEAR(a.dweight[i], b.dweight[i], tolerance) << what << ", dweight element " << i;
  }
}

class LinearCrossEntropyTest : public OpTest {
 protected:
  static constexpr int64_t kRows = 10;
  static constexpr int64_t kWidth = 6;
  static constexpr int64_t kVocab = 13;
  Tensor h_ = random_tensor({kRows, kWidth}, allocator_, 301, -1.0f, 1.0f);
  Tensor weight_ = random_tensor({kVocab, kWidth}, allocator_, 302, -1.0f, 1.0f);
  Tensor targets_ = make_targets({3, kIgnore, 12, 0, 7, kIgnore, 5, 1, 9, 11}, allocator_);
};

TEST_F(LinearCrossEntropyTest, OneChunkIsBitwiseTheUnfusedOps) {
  const Result unfused = run(h_, weight_, targets_, -1);
  expect_bitwise(run(h_, weight_, targets_, 0), unfused, "the default chunk (all rows)");
  expect_bitwise(run(h_, weight_, targets_, kRows), unfused, "chunk_rows = N");
  expect_bitwise(run(h_, weight_, targets_, 4 * kRows), unfused, "chunk_rows > N");
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    expect_bitwise(run(h_, weight_, targets_, kRows, dtype), run(h_, weight_, targets_, -1, dtype),
                   std::string(dtype_name(dtype)) + " operands");
  }
}

TEST_F(LinearCrossEntropyTest, ChunksGiveTheUnfusedLossAndCloseGradients) {
  // Each row's logits come from the same products, and the mean is summed in row order either way:
  // the loss is the same. dweight is summed chunk by chunk: within a few fp32 roundings.
  const Result unfused = run(h_, weight_, targets_, -1);
  for (int64_t chunk_rows : {1, 2, 3, 4, 7, 9}) {
    const Result fused = run(h_, weight_, targets_, chunk_rows);
    const std::string what = "chunk_rows " + std::to_string(chunk_rows);
    EXPECT_EQ(fused.loss, unfused.loss) << what;
    expect_close(fused, unfused, 1e-6, what);
    for (size_t i = 0; i < fused.dh.size(); ++i) {
      if (i / kWidth == 1 || i / kWidth == 5) {
        EXPECT_EQ(fused.dh[i], 0.0f) << "ignored row " << i;
      }
    }
  }
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const Result unfused16 = run(h_, weight_, targets_, -1, dtype);
    const Result fused16 = run(h_, weight_, targets_, 3, dtype);
    EXPECT_EQ(fused16.loss, unfused16.loss) << dtype_name(dtype);
    // The gradients are rounded to the 16-bit sinks once: an ulp of the largest entries.
    expect_close(fused16, unfused16, dtype == DType::kBF16 ? 2e-3 : 2e-4, dtype_name(dtype));
  }
}

TEST_F(LinearCrossEntropyTest, GradientsMatchFiniteDifferences) {
  h_.set_requires_grad(true);
  weight_.set_requires_grad(true);
  const Tensor targets = targets_;
  EXPECT_EQ(check_gradients(
                [targets](const std::vector<Tensor>& t) {
                  return ops::linear_cross_entropy(t[0], t[1], targets, kIgnore, /*chunk_rows=*/3);
                },
                {h_, weight_}),
            0);
}

TEST_F(LinearCrossEntropyTest, AccumulatesIntoExistingGradientsLikeATiedWeight) {
  // The weight already has a gradient (a tied embedding's, or an earlier micro-batch's): the
  // fused head adds into it as linear's backward does.
  auto twice = [&](int64_t chunk_rows) {
    Tensor h = converted(h_, DType::kF32, true);
    Tensor weight = converted(weight_, DType::kF32, true);
    auto loss = [&] {
      return chunk_rows >= 0 ? ops::linear_cross_entropy(h, weight, targets_, kIgnore, chunk_rows)
                             : ops::cross_entropy(ops::linear(h, weight), targets_);
    };
    backward(loss());
    backward(loss(), 0.5f);
    return Result{0.0f, h.grad().to_vector(), weight.grad().to_vector()};
  };
  const Result unfused = twice(-1);
  expect_bitwise(twice(kRows), unfused, "one chunk");
  expect_close(twice(3), unfused, 2e-6, "chunks of 3");
}

TEST_F(LinearCrossEntropyTest, NoValidRowsOrNoRowsGiveZeroLossAndZeroGradients) {
  Tensor all_ignored = make_targets(std::vector<int32_t>(kRows, kIgnore), allocator_);
  const Result ignored = run(h_, weight_, all_ignored, 3);
  EXPECT_EQ(ignored.loss, 0.0f);
  for (float g : ignored.dh) EXPECT_EQ(g, 0.0f);
  for (float g : ignored.dweight) EXPECT_EQ(g, 0.0f);

  Tensor no_h = random_tensor({0, kWidth}, allocator_, 303);
  const Result empty = run(no_h, weight_, make_targets({}, allocator_), 0);
  EXPECT_EQ(empty.loss, 0.0f);
  EXPECT_TRUE(empty.dh.empty());
  ASSERT_EQ(empty.dweight.size(), static_cast<size_t>(kVocab * kWidth));
  for (float g : empty.dweight) EXPECT_EQ(g, 0.0f);
}

TEST_F(LinearCrossEntropyTest, CustomIgnoreIndexIsTheCrossEntropyOne) {
  Tensor targets = make_targets({0, 4, 0, 2, 0, 1, 12, 0, 3, 0}, allocator_);
  Tensor h = converted(h_, DType::kF32, true);
  Tensor weight = converted(weight_, DType::kF32, true);
  const float fused = ops::linear_cross_entropy(h, weight, targets, /*ignore_index=*/0, 4).item();
  const float unfused = ops::cross_entropy(ops::linear(h, weight), targets, 0).item();
  current_tape().clear();
  EXPECT_EQ(fused, unfused);
}

TEST_F(LinearCrossEntropyTest, HoldsOneChunkOfLogitsAtATime) {
  // 64 rows in chunks of 8 over a vocabulary of 256: the unfused head holds 64 rows of logits and
  // their gradient (2 · 64 KiB); the fused one 8 rows of each (2 · 8 KiB). Both keep the fp32 row
  // statistics; h's gradient is a leaf's here (category gradients).
  const int64_t rows = 64, vocab = 256, width = 8, chunk = 8;
  Tensor h = random_tensor({rows, width}, allocator_, 304, -1.0f, 1.0f);
  Tensor weight = random_tensor({vocab, width}, allocator_, 305, -1.0f, 1.0f);
  std::vector<int32_t> values(rows);
  for (int64_t r = 0; r < rows; ++r) values[r] = static_cast<int32_t>((r * 37) % vocab);
  Tensor targets = make_targets(values, allocator_);
  auto peak = [&](int64_t chunk_rows) {
    Tensor h_leaf = converted(h, DType::kF32, true);
    Tensor weight_leaf = converted(weight, DType::kF32, true);
    tracker_.reset_peaks();
    const size_t before = tracker_.current(MemoryCategory::kActivations);
    Tensor loss = chunk_rows >= 0
                      ? ops::linear_cross_entropy(h_leaf, weight_leaf, targets, kIgnore, chunk_rows)
                      : ops::cross_entropy(ops::linear(h_leaf, weight_leaf), targets);
    backward(loss);
    return tracker_.peak(MemoryCategory::kActivations) - before;
  };
  const size_t logits_bytes = rows * vocab * 4;
  const size_t chunk_bytes = chunk * vocab * 4;
  const size_t row_stats = 2 * rows * 4;
  // The loss (4 bytes) and its seed gradient (4) stay throughout.
  EXPECT_EQ(peak(-1), 2 * logits_bytes + row_stats + 8);
  EXPECT_EQ(peak(chunk), 2 * chunk_bytes + row_stats + 8);
}

TEST_F(LinearCrossEntropyTest, ChunkRowsFollowTheByteBudget) {
  EXPECT_EQ(ops::head_chunk_rows(50257), 333);  // GPT-2: 64 MiB / (4 · 50257)
  EXPECT_EQ(ops::head_chunk_rows(256), ops::kHeadChunkLogitBytes / 1024);
  EXPECT_EQ(ops::head_chunk_rows(int64_t{1} << 30), 1);  // never 0
  EXPECT_THROW(ops::head_chunk_rows(0), InvalidArgument);
}

TEST_F(LinearCrossEntropyTest, RejectsBadArguments) {
  const std::string bad_target = invalid_argument_message([&] {
    ops::linear_cross_entropy(h_, weight_,
                              make_targets({3, 1, 13, 0, 7, 1, 5, 1, 9, -1}, allocator_));
  });
  EXPECT_NE(bad_target.find("linear_cross_entropy: targets[2] = 13 is out of range [0, 13)"),
            std::string::npos)
      << bad_target;
  EXPECT_THROW(ops::linear_cross_entropy(h_, weight_, make_targets({1, 2}, allocator_)),
               InvalidArgument);  // one target per row
  Tensor narrow = random_tensor({kVocab, kWidth - 1}, allocator_, 306);
  EXPECT_THROW(ops::linear_cross_entropy(h_, narrow, targets_), InvalidArgument);
  EXPECT_THROW(ops::linear_cross_entropy(h_.view({-1}), weight_, targets_), InvalidArgument);
  EXPECT_THROW(ops::linear_cross_entropy(h_, converted(weight_, DType::kBF16), targets_),
               InvalidArgument);  // one dtype
  EXPECT_THROW(ops::linear_cross_entropy(h_, weight_, targets_, kIgnore, -1), InvalidArgument);
}

}  // namespace
}  // namespace zs
