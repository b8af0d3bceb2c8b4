// Tests of ops::embedding (ops/embedding.h): the gathered rows, gradients against finite
// differences on odd shapes, repeated ids (gradient = occurrences × upstream), position
// embeddings (ids 0..T-1), fp16/bf16 tables, accumulation into an existing gradient,
// independence of the backward from the OpenMP thread count, and argument checks (an
// out-of-range id names its position, its value and V).
#include "ops/embedding.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
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
using testing::invalid_argument_message;
using testing::OpTest;
using testing::random_tensor;

Tensor make_ids(const Shape& shape, const std::vector<int32_t>& values, Allocator& allocator) {
  Tensor t = Tensor::empty(shape, DType::kI32, allocator, MemoryCategory::kOther, "ids");
  EXPECT_EQ(t.numel(), static_cast<int64_t>(values.size()));
  int32_t* p = t.data<int32_t>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}

class EmbeddingTest : public OpTest {};

TEST_F(EmbeddingTest, GathersRows) {
  const int64_t vocab = 6;
  const int64_t cols = 5;
  Tensor table = random_tensor({vocab, cols}, allocator_, 201, -1.0f, 1.0f, false);
  const std::vector<int32_t> id_values = {5, 0, 3, 3, 1, 0};
  Tensor ids = make_ids({2, 3}, id_values, allocator_);
  Tensor out = ops::embedding(table, ids);
  ASSERT_EQ(out.shape(), (Shape{2, 3, cols}));
  const std::vector<float> t = table.to_vector();
  const std::vector<float> o = out.to_vector();
  for (size_t p = 0; p < id_values.size(); ++p) {
    for (int64_t j = 0; j < cols; ++j) {
      EXPECT_EQ(o[p * cols + j], t[id_values[p] * cols + j]) << "position " << p << " col " << j;
    }
  }
  // A 0-d ids tensor gives one row of shape [C].
  Tensor one = make_ids({}, {4}, allocator_);
  EXPECT_EQ(ops::embedding(table, one).shape(), Shape{cols});
}

TEST_F(EmbeddingTest, GradientsMatchFiniteDifferencesOnOddShapes) {
  struct Case {
    int64_t vocab;
    int64_t cols;
    Shape ids_shape;
    std::vector<int32_t> ids;
  };
  const std::vector<Case> cases = {{1, 1, {1}, {0}},
                                   {7, 3, {2, 3}, {6, 0, 6, 2, 2, 6}},
                                   {13, 1, {7}, {12, 0, 5, 5, 1, 12, 3}},
                                   {3, 7, {1, 1, 4}, {1, 1, 1, 1}}};
  uint32_t seed = 210;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.vocab) + "x" + std::to_string(c.cols));
    Tensor table = random_tensor({c.vocab, c.cols}, allocator_, seed++);
    Tensor ids = make_ids(c.ids_shape, c.ids, allocator_);
    auto fn = [](const std::vector<Tensor>& in) { return ops::embedding(in[0], in[1]); };
    EXPECT_EQ(check_gradients(fn, {table, ids}), 0);
  }
}

TEST_F(EmbeddingTest, RepeatedIdsAccumulateOccurrencesTimesUpstream) {
  // Upstream gradient 1.5 everywhere: row v's gradient is 1.5 × (occurrences of v), exactly
  // (small integer multiples of 1.5 are exact in fp32); rows no id hits are exactly 0.
  const int64_t vocab = 9;
  const int64_t cols = 4;
  const std::vector<int32_t> id_values = {2, 7, 2, 2, 0, 7, 2, 8};
  Tensor table = random_tensor({vocab, cols}, allocator_, 220);
  Tensor ids = make_ids({2, 4}, id_values, allocator_);
  Tensor out = ops::embedding(table, ids);
  Tensor seed = Tensor::empty(out.shape(), DType::kF32, allocator_, "seed");
  seed.fill(1.5f);
  backward_from(out, seed);
  std::vector<int> occurrences(vocab, 0);
  for (int32_t v : id_values) ++occurrences[v];
  const std::vector<float> grad = table.grad().to_vector();
  for (int64_t v = 0; v < vocab; ++v) {
    for (int64_t j = 0; j < cols; ++j) {
      EXPECT_EQ(grad[v * cols + j], 1.5f * occurrences[v]) << "row " << v << " col " << j;
    }
  }
}

TEST_F(EmbeddingTest, PositionEmbeddingsAreTheFirstTRows) {
  const int64_t max_positions = 16;
  const int64_t cols = 3;
  const int64_t seq_len = 5;
  Tensor table = random_tensor({max_positions, cols}, allocator_, 230);
  std::vector<int32_t> positions(seq_len);
  for (int64_t t = 0; t < seq_len; ++t) positions[t] = static_cast<int32_t>(t);
  Tensor out = ops::embedding(table, make_ids({seq_len}, positions, allocator_));
  const std::vector<float> t = table.to_vector();
  const std::vector<float> o = out.to_vector();
  for (int64_t i = 0; i < seq_len * cols; ++i) EXPECT_EQ(o[i], t[i]);
  Tensor seed = random_tensor({seq_len, cols}, allocator_, 231, -1.0f, 1.0f, false);
  backward_from(out, seed);
  const std::vector<float> grad = table.grad().to_vector();
  const std::vector<float> s = seed.to_vector();
  for (int64_t i = 0; i < max_positions * cols; ++i) {
    EXPECT_EQ(grad[i], i < seq_len * cols ? s[i] : 0.0f) << "element " << i;
  }
}

TEST_F(EmbeddingTest, HalfPrecisionTable) {
  // Forward copies stored rows bit for bit. Backward sums in fp32 and rounds once into the
  // table's dtype: within one ulp of the fp32 gradient (2^-10 fp16, 2^-7 bf16, relative — half an
  // ulp is the bound; one ulp leaves room for contraction differences) + 1e-7 absolute.
  const std::vector<int32_t> id_values = {3, 1, 3, 3, 0, 1, 4};
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor t16 = converted(random_tensor({5, 6}, allocator_, 240), dtype, true);
    Tensor t32 = converted(t16, DType::kF32, true);
    Tensor ids = make_ids({7}, id_values, allocator_);
    Tensor out16 = ops::embedding(t16, ids);
    ASSERT_EQ(out16.dtype(), dtype);
    const uint16_t* o = static_cast<const uint16_t*>(out16.raw_data());
    const uint16_t* t = static_cast<const uint16_t*>(t16.raw_data());
    for (size_t p = 0; p < id_values.size(); ++p) {
      EXPECT_EQ(0, std::memcmp(o + p * 6, t + id_values[p] * 6, 6 * sizeof(uint16_t)));
    }
    // Forward and backward one run at a time: backward consumes the whole tape.
    Tensor seed16 = converted(random_tensor({7, 6}, allocator_, 241), dtype, false);
    backward_from(out16, seed16);
    Tensor out32 = ops::embedding(t32, ids);
    backward_from(out32, converted(seed16, DType::kF32, false));
    ASSERT_EQ(t16.grad().dtype(), dtype);
    const std::vector<float> low = t16.grad().to_vector();
    const std::vector<float> ref = t32.grad().to_vector();
    const double relative = dtype == DType::kF16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
    for (size_t i = 0; i < low.size(); ++i) {
      EXPECT_NEAR(low[i], ref[i], relative * std::fabs(ref[i]) + 1e-7) << "element " << i;
    }
  }
}

TEST_F(EmbeddingTest, AccumulatesIntoExistingGradient) {
  // Unhit rows keep their previous gradient; hit rows add.
  Tensor table = random_tensor({4, 2}, allocator_, 250);
  Tensor existing = Tensor::empty({4, 2}, DType::kF32, allocator_, "grad");
  existing.fill(10.0f);
  table.set_grad(existing);
  Tensor out = ops::embedding(table, make_ids({3}, {1, 3, 1}, allocator_));
  Tensor seed = Tensor::empty(out.shape(), DType::kF32, allocator_, "seed");
  seed.fill(0.5f);
  backward_from(out, seed);
  const std::vector<float> grad = table.grad().to_vector();
  const std::vector<float> expected = {10, 10, 11, 11, 10, 10, 10.5f, 10.5f};
  for (size_t i = 0; i < grad.size(); ++i) EXPECT_EQ(grad[i], expected[i]) << "element " << i;
}

TEST_F(EmbeddingTest, BackwardDoesNotDependOnThreadCount) {
  // 800 positions × 64 columns: above the parallel threshold; ids drawn from 50 rows, so every
  // row is hit many times and sums are long.
  const int64_t vocab = 50;
  const int64_t cols = 64;
  std::mt19937 gen(260);
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  std::vector<int32_t> id_values(800);
  for (int32_t& v : id_values) v = pick(gen);
  Tensor ids = make_ids({4, 200}, id_values, allocator_);
  Tensor seed = random_tensor({4, 200, cols}, allocator_, 261, -1.0f, 1.0f, false);
  std::vector<float> grads[2];
  const int saved_threads = omp_get_max_threads();
  for (int run = 0; run < 2; ++run) {
    omp_set_num_threads(run + 1);
    Tensor table = random_tensor({vocab, cols}, allocator_, 262);
    backward_from(ops::embedding(table, ids), seed);
    grads[run] = table.grad().to_vector();
  }
  omp_set_num_threads(saved_threads);
  ASSERT_EQ(grads[0].size(), grads[1].size());
  EXPECT_EQ(0, std::memcmp(grads[0].data(), grads[1].data(), grads[0].size() * sizeof(float)));
}

TEST_F(EmbeddingTest, OutOfRangeIdsNamePositionValueAndV) {
  Tensor table = random_tensor({7, 3}, allocator_, 270, -1.0f, 1.0f, false);
  const std::string too_big = invalid_argument_message([&] {
    ops::embedding(table, make_ids({2, 2}, {0, 1, 2, 9}, allocator_));
  });
  EXPECT_NE(too_big.find("ids[1, 1] = 9"), std::string::npos) << too_big;
  EXPECT_NE(too_big.find("V = 7"), std::string::npos) << too_big;
  const std::string negative = invalid_argument_message([&] {
    ops::embedding(table, make_ids({3}, {0, -2, 1}, allocator_));
  });
  EXPECT_NE(negative.find("ids[1] = -2"), std::string::npos) << negative;
  EXPECT_THROW(ops::embedding(table, make_ids({1}, {7}, allocator_)), InvalidArgument);
}

TEST_F(EmbeddingTest, RejectsBadShapesAndDtypes) {
  Tensor table = random_tensor({7, 3}, allocator_, 280, -1.0f, 1.0f, false);
  Tensor ids = make_ids({2}, {0, 1}, allocator_);
  EXPECT_THROW(ops::embedding(table, converted(ids, DType::kF32, false)), InvalidArgument);
  EXPECT_THROW(ops::embedding(table.view({21}), ids), InvalidArgument);
  EXPECT_THROW(ops::embedding(table.view({7, 3, 1}), ids), InvalidArgument);
  Tensor int_table = Tensor::zeros({7, 3}, DType::kI32, allocator_, "table");
  EXPECT_THROW(ops::embedding(int_table, ids), InvalidArgument);
  EXPECT_THROW(ops::embedding(table, Tensor()), InvalidArgument);
  EXPECT_THROW(ops::embedding(Tensor(), ids), InvalidArgument);
}

}  // namespace
}  // namespace zs
