// linear and matmul: gradients against finite differences (every transpose combination, odd
// sizes, with and without bias, leading batch dims), 16-bit inputs against fp32, bad shapes.
#include "ops/linear.h"

#include <gtest/gtest.h>

#include "ops/elementwise.h"
#include "runtime/allocator.h"
#include "tests/support/gradcheck.h"
#include "tests/support/op_test.h"

namespace zs::ops {
namespace {

using zs::testing::check_gradients;
using zs::testing::OpTest;
using zs::testing::random_tensor;

class Linear : public OpTest {};
class Matmul : public OpTest {};

TEST_F(Linear, GradientsMatchFiniteDifferences) {
  for (auto [rows, in, out] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {3, 7, 5}, {13, 4, 9}}) {
    Tensor x = random_tensor({rows, in}, allocator_, 1);
    Tensor w = random_tensor({out, in}, allocator_, 2);
    Tensor b = random_tensor({out}, allocator_, 3);
    EXPECT_EQ(check_gradients([](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); },
                              {x, w, b}),
              0);
    EXPECT_EQ(
        check_gradients([](const std::vector<Tensor>& t) { return linear(t[0], t[1]); }, {x, w}),
        0);
  }
}

TEST_F(Linear, LeadingDimsAndValues) {
  Tensor x = random_tensor({2, 3, 4}, allocator_, 4);
  Tensor w = random_tensor({5, 4}, allocator_, 5);
  Tensor b = random_tensor({5}, allocator_, 6);
  EXPECT_EQ(check_gradients([](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); },
                            {x, w, b}),
            0);
  Tensor y = linear(x, w, b);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 5}));
  std::vector<float> xv = x.to_vector(), wv = w.to_vector(), bv = b.to_vector(), yv = y.to_vector();
  for (int64_t r = 0; r < 6; ++r) {
    for (int64_t o = 0; o < 5; ++o) {
      double expect = bv[o];
      for (int64_t i = 0; i < 4; ++i) expect += double(xv[r * 4 + i]) * wv[o * 4 + i];
      EXPECT_NEAR(yv[r * 5 + o], expect, 1e-5);
    }
  }
}

TEST_F(Matmul, AllTransposesMatchFiniteDifferences) {
  const int64_t m = 3, k = 5, n = 7;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, allocator_, 7);
      Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, allocator_, 8);
      EXPECT_EQ(check_gradients(
                    [ta, tb](const std::vector<Tensor>& t) { return matmul(t[0], t[1], ta, tb); },
                    {a, b}),
                0)
          << "trans_a " << ta << " trans_b " << tb;
    }
  }
}

TEST_F(Linear, HalfPrecisionInputsMatchFp32) {
  Tensor x = random_tensor({9, 33}, allocator_, 9, -1, 1, false);
  Tensor w = random_tensor({17, 33}, allocator_, 10, -1, 1, false);
  Tensor b = random_tensor({17}, allocator_, 11, -1, 1, false);
  std::vector<float> ref = linear(x, w, b).to_vector();
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    Tensor y = linear(cast(x, dtype), cast(w, dtype), cast(b, dtype));
    EXPECT_EQ(y.dtype(), dtype);
    std::vector<float> got = y.to_vector();
    // Inputs rounded to 11 (fp16) or 8 (bf16) significant bits; 33 products of magnitude <= 1
    // accumulate at most ~33 · 2 · 2^-p relative input error, then one output rounding.
    const double tol = dtype == DType::kF16 ? 2e-2 : 1.5e-1;
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], tol) << i;
  }
}

TEST_F(Linear, RejectsBadShapesAndDtypes) {
  Tensor x = random_tensor({2, 4}, allocator_, 1, -1, 1, false);
  Tensor w = random_tensor({3, 5}, allocator_, 2, -1, 1, false);
  EXPECT_THROW(linear(x, w), InvalidArgument);
  Tensor w2 = random_tensor({3, 4}, allocator_, 2, -1, 1, false);
  Tensor bad_bias = random_tensor({4}, allocator_, 3, -1, 1, false);
  EXPECT_THROW(linear(x, w2, bad_bias), InvalidArgument);
  EXPECT_THROW(linear(x, cast(w2, DType::kBF16)), InvalidArgument);
  Tensor ids = Tensor::zeros({2, 4}, DType::kI32, allocator_, "ids");
  EXPECT_THROW(linear(ids, w2), InvalidArgument);
  EXPECT_THROW(matmul(x, w2), InvalidArgument);  // [2,4]·[3,4]
  EXPECT_NO_THROW(matmul(x, w2, false, true));
}

}  // namespace
}  // namespace zs::ops
