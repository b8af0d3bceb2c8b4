// Tests for ops/elementwise.h: gradients against finite differences on odd shapes, forward
// values against references written here, the gradient-buffer independence of add, dropout's
// regenerated mask and its statistics, the in-place helpers, and argument errors (casts and
// reductions: cast_reduction_test.cc).
//
// fp16/bf16 tolerance: the ops compute in fp32 and round the result once, so a 16-bit op must
// equal, bit for bit, the fp32 op on the same (already 16-bit-representable) inputs rounded to
// the 16-bit type. That is a tolerance of zero against that reference; the reductions return
// fp32 and must equal the fp32 reduction of the converted inputs exactly.
#include "ops/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "ops/cpu/gemm.h"
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

using testing::check_gradients;
using testing::converted;
using testing::GradCheckOptions;
using testing::OpTest;
using testing::random_tensor;

using elementwise_testing::bits16;
using elementwise_testing::ElementwiseTest;
using elementwise_testing::float_bits;
using elementwise_testing::kLarge;
using elementwise_testing::kOddShapes;
using elementwise_testing::kParallel;
using elementwise_testing::raw_bytes;

// ---------------------------------------------------------------- gradients vs finite differences

TEST_F(ElementwiseTest, AddGradients) {
  uint32_t seed = 1;
  for (const Shape& shape : kOddShapes) {
    Tensor a = random(shape, seed++);
    Tensor b = random(shape, seed++);
    EXPECT_EQ(
        check_gradients([](const std::vector<Tensor>& in) { return add(in[0], in[1]); }, {a, b}),
        0);
    // The same value as both inputs.
    EXPECT_EQ(check_gradients([](const std::vector<Tensor>& in) { return add(in[0], in[0]); }, {a}),
              0);
    // Non-leaf inputs (the aliasing path): both are outputs of recorded ops.
    EXPECT_EQ(check_gradients(
                  [](const std::vector<Tensor>& in) {
                    return add(scale(in[0], 2.0f), scale(in[1], -3.0f));
                  },
                  {a, b}),
              0);
    EXPECT_EQ(check_gradients(
                  [](const std::vector<Tensor>& in) {
                    Tensor h = scale(in[0], 0.5f);
                    return add(h, h);
                  },
                  {a}),
              0);
  }
}

TEST_F(ElementwiseTest, AddBiasGradients) {
  const std::vector<Shape> shapes = {{1}, {7}, {1, 3}, {7, 13}, {3, 1, 5}};
  uint32_t seed = 10;
  for (const Shape& shape : shapes) {
    Tensor x = random(shape, seed++);
    Tensor bias = random({shape.back()}, seed++);
    EXPECT_EQ(check_gradients([](const std::vector<Tensor>& in) { return add_bias(in[0], in[1]); },
                              {x, bias}),
              0);
    // Non-leaf x: its gradient is dy itself (aliased).
    EXPECT_EQ(check_gradients(
                  [](const std::vector<Tensor>& in) {
                    return add_bias(scale(in[0], 1.5f), scale(in[1], 2.0f));
                  },
                  {x, bias}),
              0);
  }
  // 1-D x that is also the bias.
  Tensor v = random({5}, seed++);
  EXPECT_EQ(
      check_gradients([](const std::vector<Tensor>& in) { return add_bias(in[0], in[0]); }, {v}),
      0);
}

TEST_F(ElementwiseTest, ScaleMulGradients) {
  uint32_t seed = 20;
  for (const Shape& shape : kOddShapes) {
    Tensor a = random(shape, seed++);
    Tensor b = random(shape, seed++);
    EXPECT_EQ(
        check_gradients([](const std::vector<Tensor>& in) { return scale(in[0], -2.5f); }, {a}), 0);
    EXPECT_EQ(
        check_gradients([](const std::vector<Tensor>& in) { return mul(in[0], in[1]); }, {a, b}),
        0);
    EXPECT_EQ(check_gradients([](const std::vector<Tensor>& in) { return mul(in[0], in[0]); }, {a}),
              0);
  }
}

TEST_F(ElementwiseTest, DropoutGradients) {
  uint32_t seed = 30;
  for (const Shape& shape : kOddShapes) {
    Tensor x = random(shape, seed++);
    const RngKey key = rng_key(7, "blocks.0.attn.dropout", seed);
    EXPECT_EQ(check_gradients(
                  [key](const std::vector<Tensor>& in) { return dropout(in[0], 0.4f, key); }, {x}),
              0);
  }
}

TEST_F(ElementwiseTest, ReductionGradients) {
  uint32_t seed = 40;
  for (const Shape& shape : kOddShapes) {
    Tensor x = random(shape, seed++);
    EXPECT_EQ(check_gradients([](const std::vector<Tensor>& in) { return sum(in[0]); }, {x}), 0);
    EXPECT_EQ(check_gradients([](const std::vector<Tensor>& in) { return mean(in[0]); }, {x}), 0);
    EXPECT_EQ(
        check_gradients([](const std::vector<Tensor>& in) { return sum_of_squares(in[0]); }, {x}),
        0);
  }
}

TEST_F(ElementwiseTest, CastGradients) {
  // Values k·2^-9 with k in [256, 508) and the step h = 2^-7 keep x and x ± h on the fp16 and the
  // bf16 grids, so the cast is exact and the central differences are exact too.
  GradCheckOptions options;
  options.step = 1.0 / 128;
  std::mt19937 gen(50);
  std::uniform_int_distribution<int> k(256, 507);
  for (const Shape& shape : kOddShapes) {
    std::vector<float> values(static_cast<size_t>(shape_numel(shape)));
    for (float& v : values) v = static_cast<float>(k(gen)) / 512.0f;
    Tensor x = tensor(shape, DType::kF32, values, /*requires_grad=*/true);
    for (DType dtype : {DType::kF16, DType::kBF16}) {
      EXPECT_EQ(
          check_gradients([dtype](const std::vector<Tensor>& in) { return cast(in[0], dtype); },
                          {x}, options),
          0)
          << dtype_name(dtype);
      // There and back again.
      EXPECT_EQ(check_gradients(
                    [dtype](const std::vector<Tensor>& in) {
                      return cast(cast(in[0], dtype), DType::kF32);
                    },
                    {x}, options),
                0)
          << dtype_name(dtype);
    }
  }
}

// ---------------------------------------------------------------- add: independent gradients

// An identity op whose backward shows its output gradient to `on_grad` (which may modify it)
// before handing it to x.
Tensor probe(const Tensor& x, std::function<void(const Tensor&)> on_grad) {
  Tensor y =
      Tensor::empty(x.shape(), x.dtype(), x.allocator(), MemoryCategory::kActivations, "probe");
  y.copy_from(x.to_vector());
  record_op("probe", {&x}, {&y}, [on_grad](BackwardContext& ctx) {
    Tensor g = ctx.grad_output(0);
    on_grad(g);
    ctx.alias_or_accumulate_input_grad(0, g);
  });
  return y;
}

TEST_F(ElementwiseTest, AddGivesIndependentGradientBuffers) {
  const Shape shape = {3, 5};
  Tensor weights = random(shape, 61, /*requires_grad=*/false);
  const std::vector<float> dy = weights.to_vector();
  for (bool modify_a : {false, true}) {
    Tensor x1 = random(shape, 62);
    Tensor x2 = random(shape, 63);
    Tensor grad_a, grad_b;
    // The probe recorded last runs first in backward; that one overwrites its gradient.
    auto modify = [](const Tensor& g) { fill_(g, 1000.0f); };
    auto keep_a = [&](const Tensor& g) { grad_a = g; };
    auto keep_b = [&](const Tensor& g) { grad_b = g; };
    Tensor a, b;
    if (modify_a) {
      b = probe(x2, keep_b);
      a = probe(x1, [&](const Tensor& g) {
        keep_a(g);
        modify(g);
      });
    } else {
      a = probe(x1, keep_a);
      b = probe(x2, [&](const Tensor& g) {
        keep_b(g);
        modify(g);
      });
    }
    Tensor loss = sum(mul(add(a, b), weights));
    backward(loss);
    ASSERT_TRUE(grad_a.defined() && grad_b.defined());
    const bool same_bytes =
        grad_a.storage() == grad_b.storage() && grad_a.offset_bytes() == grad_b.offset_bytes();
    EXPECT_FALSE(same_bytes) << "add handed one buffer to both inputs";
    const std::vector<float> thousands(dy.size(), 1000.0f);
    EXPECT_EQ(x1.grad().to_vector(), modify_a ? thousands : dy);
    EXPECT_EQ(x2.grad().to_vector(), modify_a ? dy : thousands);
  }
}

TEST_F(ElementwiseTest, AddOfItselfGivesTwiceTheGradient) {
  Tensor weights = random({4, 3}, 71, /*requires_grad=*/false);
  const std::vector<float> dy = weights.to_vector();
  // Leaf x and non-leaf h = x (through scale by 1).
  for (bool through_op : {false, true}) {
    Tensor x = random({4, 3}, 72);
    Tensor h = through_op ? scale(x, 1.0f) : x;
    backward(sum(mul(add(h, h), weights)));
    std::vector<float> grad = x.grad().to_vector();
    for (size_t i = 0; i < dy.size(); ++i) EXPECT_EQ(grad[i], 2.0f * dy[i]) << i;
  }
}

TEST_F(ElementwiseTest, LeafGradientsAccumulateAcrossBackwards) {
  Tensor x = random({5}, 75);
  Tensor b = random({5}, 76);
  backward(sum(scale(x, 3.0f)));
  backward(sum(add(x, b)));
  backward(sum(add_bias(x, b)));
  for (float g : x.grad().to_vector()) EXPECT_EQ(g, 5.0f);
  for (float g : b.grad().to_vector()) EXPECT_EQ(g, 2.0f);
}

// ---------------------------------------------------------------- forward values

TEST_F(ElementwiseTest, ForwardValuesMatchReference) {
  Tensor a = random({7, 13}, 80, false);
  Tensor b = random({7, 13}, 81, false);
  Tensor bias = random({13}, 82, false);
  const std::vector<float> av = a.to_vector(), bv = b.to_vector(), biasv = bias.to_vector();
  const std::vector<float> added = add(a, b).to_vector();
  const std::vector<float> multiplied = mul(a, b).to_vector();
  const std::vector<float> scaled = scale(a, 0.3f).to_vector();
  const std::vector<float> biased = add_bias(a, bias).to_vector();
  for (size_t i = 0; i < av.size(); ++i) {
    EXPECT_EQ(added[i], av[i] + bv[i]);
    EXPECT_EQ(multiplied[i], av[i] * bv[i]);
    EXPECT_EQ(scaled[i], 0.3f * av[i]);
    EXPECT_EQ(biased[i], av[i] + biasv[i % 13]);
  }
}

// op on 16-bit inputs == (op on the fp32 values of those inputs) rounded once to 16 bits.
void expect_16bit_matches_fp32(const std::vector<Tensor>& fp32_inputs, const testing::OpFn& fn,
                               const char* what) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    std::vector<Tensor> narrow, widened;
    for (const Tensor& t : fp32_inputs) {
      Tensor n = converted(t, dtype);
      narrow.push_back(n);
      widened.push_back(converted(n, DType::kF32));  // exact
    }
    Tensor y16 = fn(narrow);
    ASSERT_EQ(y16.dtype(), dtype) << what;
    Tensor expected = converted(fn(widened), dtype);
    EXPECT_EQ(bits16(y16), bits16(expected)) << what << " " << dtype_name(dtype);
  }
}

TEST_F(ElementwiseTest, HalfPrecisionInputsRoundTheFp32ResultOnce) {
  Tensor a = random({5, 11}, 90, false);
  Tensor b = random({5, 11}, 91, false);
  Tensor bias = random({11}, 92, false);
  Tensor big = random({kParallel}, 93, false);
  Tensor big2 = random({kParallel}, 94, false);
  const RngKey key = rng_key(3, "dropout", 1);
  expect_16bit_matches_fp32(
      {a, b}, [](auto& in) { return add(in[0], in[1]); }, "add");
  expect_16bit_matches_fp32(
      {big, big2}, [](auto& in) { return add(in[0], in[1]); }, "add");
  expect_16bit_matches_fp32(
      {a, b}, [](auto& in) { return mul(in[0], in[1]); }, "mul");
  expect_16bit_matches_fp32(
      {a}, [](auto& in) { return scale(in[0], 1.7f); }, "scale");
  expect_16bit_matches_fp32(
      {a, bias}, [](auto& in) { return add_bias(in[0], in[1]); }, "add_bias");
  expect_16bit_matches_fp32(
      {big}, [key](auto& in) { return dropout(in[0], 0.2f, key); }, "dropout");
}

TEST_F(ElementwiseTest, HalfPrecisionGradients) {
  // sum(mul(a, b)) gives da = b and db = a exactly; mul(x, x) accumulates 2x in a 16-bit sink.
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    Tensor a = converted(random({3, 5}, 95, false), dtype).set_requires_grad(true);
    Tensor b = converted(random({3, 5}, 96, false), dtype).set_requires_grad(true);
    backward(sum(mul(a, b)));
    ASSERT_EQ(a.grad().dtype(), dtype);
    EXPECT_EQ(bits16(a.grad()), bits16(b));
    EXPECT_EQ(bits16(b.grad()), bits16(a));

    Tensor x = converted(random({7}, 97, false), dtype).set_requires_grad(true);
    backward(sum(mul(x, x)));
    EXPECT_EQ(bits16(x.grad()), bits16(converted(scale(x.detach(), 2.0f), dtype)));

    // add_bias: the bias gradient (row sums of ones) is the row count.
    Tensor h = converted(random({6, 4}, 98, false), dtype).set_requires_grad(true);
    Tensor c = converted(random({4}, 99, false), dtype).set_requires_grad(true);
    backward(sum(add_bias(h, c)));
    for (float g : c.grad().to_vector()) EXPECT_EQ(g, 6.0f);
    for (float g : h.grad().to_vector()) EXPECT_EQ(g, 1.0f);
  }
}

// ---------------------------------------------------------------- dropout

TEST_F(ElementwiseTest, DropoutMaskIsRegeneratedInBackward) {
  const float p = 0.3f;
  const float keep_prob = 1.0f - p;
  const float scale_factor = 1.0f / keep_prob;
  const RngKey key = rng_key(11, "blocks.2.mlp.dropout", 5);
  Tensor x = random({kLarge}, 100);
  Tensor y = dropout(x, p, key);
  backward(sum(y));
  const std::vector<float> xv = x.to_vector(), yv = y.to_vector(), gv = x.grad().to_vector();
  int64_t kept = 0;
  for (int64_t i = 0; i < kLarge; ++i) {
    const bool keep = dropout_keep(key, static_cast<uint64_t>(i), keep_prob);
    kept += keep;
    // Kept values scaled exactly (fp32 multiply by 1/(1-p)); dropped ones exactly 0.
    ASSERT_EQ(float_bits(yv[i]), float_bits(keep ? xv[i] * scale_factor : 0.0f)) << i;
    // Backward uses the same mask.
    ASSERT_EQ(gv[i], keep ? scale_factor : 0.0f) << i;
  }
  // The kept count is Binomial(n, 1 - p): σ of the fraction is sqrt(p(1-p)/n) ≈ 4.5e-4 for
  // n ≈ 1M; allow 5σ.
  const double fraction = static_cast<double>(kept) / kLarge;
  const double sigma = std::sqrt(p * (1.0 - p) / kLarge);
  EXPECT_NEAR(fraction, 1.0 - p, 5 * sigma);
}

TEST_F(ElementwiseTest, DropoutDifferentSubstreamsDiffer) {
  const float p = 0.5f;
  Tensor x = tensor({kLarge}, DType::kF32, std::vector<float>(kLarge, 1.0f));
  const std::vector<float> first = dropout(x, p, rng_key(1, "site", 0)).to_vector();
  const std::vector<float> again = dropout(x, p, rng_key(1, "site", 0)).to_vector();
  const std::vector<float> next_step = dropout(x, p, rng_key(1, "site", 1)).to_vector();
  const std::vector<float> other_site = dropout(x, p, rng_key(1, "other site", 0)).to_vector();
  EXPECT_EQ(first, again);
  // Independent masks disagree on a fraction 2p(1-p) = 1/2 of the elements (σ ≈ 5e-4).
  for (const auto* other : {&next_step, &other_site}) {
    int64_t differ = 0;
    for (int64_t i = 0; i < kLarge; ++i) differ += (first[i] != (*other)[i]);
    EXPECT_NEAR(static_cast<double>(differ) / kLarge, 2 * p * (1 - p), 0.0025);
  }
}

TEST_F(ElementwiseTest, DropoutIdentityCases) {
  Tensor x = random({4, 6}, 110);
  const size_t tape_before = current_tape().size();
  Tensor eval = dropout(x, 0.5f, rng_key(1, "site"), /*training=*/false);
  Tensor zero = dropout(x, 0.0f, rng_key(1, "site"));
  for (const Tensor* y : {&eval, &zero}) {
    EXPECT_EQ(y->autograd_meta(), x.autograd_meta());  // x itself
    EXPECT_EQ(y->storage(), x.storage());
  }
  EXPECT_EQ(current_tape().size(), tape_before);
  // Without requires_grad nothing is recorded either.
  Tensor c = random({4, 6}, 111, false);
  (void)dropout(c, 0.5f, rng_key(1, "site"));
  EXPECT_EQ(current_tape().size(), tape_before);
}

TEST_F(ElementwiseTest, DropoutRejectsBadProbability) {
  Tensor x = random({4}, 120, false);
  for (float p : {-0.1f, 1.0f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    EXPECT_THROW(dropout(x, p, rng_key(1, "site")), InvalidArgument) << p;
    EXPECT_THROW(dropout(x, p, rng_key(1, "site"), false), InvalidArgument) << p;
  }
}

// ---------------------------------------------------------------- in-place helpers

TEST_F(ElementwiseTest, AllFiniteFindsNanAndInfAtTheLastElement) {
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t n : {int64_t{1}, int64_t{3}, kParallel}) {
      std::vector<float> values(static_cast<size_t>(n), 0.5f);
      values[0] = dtype == DType::kF16 ? 65504.0f : 3.0e38f;  // largest finite values stay finite
      EXPECT_TRUE(all_finite(tensor({n}, dtype, values))) << dtype_name(dtype) << " " << n;
      for (float special : specials) {
        values.back() = special;
        EXPECT_FALSE(all_finite(tensor({n}, dtype, values)))
            << dtype_name(dtype) << " " << n << " " << special;
      }
    }
  }
  EXPECT_TRUE(all_finite(Tensor::empty({0}, DType::kF32, allocator_)));
  // fp32 overflow to fp16 infinity is what the loss scaler must see.
  EXPECT_FALSE(all_finite(cast(tensor({2}, DType::kF32, {1.0f, 70000.0f}), DType::kF16)));
}

TEST_F(ElementwiseTest, FinitenessMathMatchesStd) {
  std::mt19937 gen(190);
  std::uniform_int_distribution<uint32_t> any_bits;
  for (int i = 0; i < 100000; ++i) {
    const uint32_t bits = any_bits(gen);
    float v;
    std::memcpy(&v, &bits, sizeof(v));
    ASSERT_EQ(math::is_finite(v), std::isfinite(v));
  }
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    ASSERT_EQ(math::is_finite_f16_bits(static_cast<uint16_t>(bits)),
              std::isfinite(half_bits_to_float(static_cast<uint16_t>(bits))));
    ASSERT_EQ(math::is_finite_bf16_bits(static_cast<uint16_t>(bits)),
              std::isfinite(bf16_bits_to_float(static_cast<uint16_t>(bits))));
  }
}

TEST_F(ElementwiseTest, ScaleFillCopyInPlace) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    Tensor x = converted(random({kParallel}, 200, false), dtype);
    const std::vector<float> before = x.to_vector();
    scale_(x, 0.125f);
    // Exact in fp32, then one rounding to the dtype (fp16 subnormals lose bits).
    std::vector<float> expected(before.size());
    for (size_t i = 0; i < before.size(); ++i) expected[i] = before[i] * 0.125f;
    EXPECT_EQ(x.to_vector(), tensor({kParallel}, dtype, expected).to_vector());

    fill_(x, 0.1f);
    const float rounded = converted(tensor({1}, DType::kF32, {0.1f}), dtype).item();
    for (float v : x.to_vector()) ASSERT_EQ(v, rounded);

    // copy_ converts like cast; between equal dtypes it is bitwise.
    Tensor src = random({kParallel}, 201, false);
    copy_(x, src);
    EXPECT_EQ(raw_bytes(x), raw_bytes(cast(src, dtype)));
    Tensor same = Tensor::empty({kParallel}, dtype, allocator_, "same");
    copy_(same, x);
    EXPECT_EQ(raw_bytes(same), raw_bytes(x));
  }
  // A 16-bit NaN payload survives copy_ between equal dtypes (no round trip through fp32).
  Tensor h = Tensor::empty({1}, DType::kF16, allocator_, "h");
  *static_cast<uint16_t*>(h.raw_data()) = 0x7C01;  // signalling NaN
  Tensor h2 = Tensor::empty({1}, DType::kF16, allocator_, "h2");
  copy_(h2, h);
  EXPECT_EQ(bits16(h2)[0], 0x7C01);
  // The in-place helpers record nothing, even on a tensor that requires grad.
  Tensor g = random({3}, 202, true);
  const size_t tape_before = current_tape().size();
  scale_(g, 2.0f);
  fill_(g, 1.0f);
  copy_(g, random({3}, 203, false));
  EXPECT_EQ(current_tape().size(), tape_before);
}

TEST_F(ElementwiseTest, CopyOverlapAndSelf) {
  Tensor flat = random({10}, 210, false);
  Tensor first = flat.slice(0, {6});
  Tensor second = flat.slice(4, {6});
  EXPECT_THROW(copy_(first, second), InvalidArgument);
  const std::vector<float> before = flat.to_vector();
  copy_(flat, flat);  // itself: nothing to do
  EXPECT_EQ(flat.to_vector(), before);
  Tensor left = flat.slice(0, {5});
  Tensor right = flat.slice(5, {5});
  copy_(left, right);  // disjoint parts of one storage
  std::vector<float> expected = before;
  for (int i = 0; i < 5; ++i) expected[i] = before[5 + i];
  EXPECT_EQ(flat.to_vector(), expected);
}

// ---------------------------------------------------------------- argument errors

TEST_F(ElementwiseTest, BadArgumentsThrow) {
  Tensor a = random({3, 4}, 220, false);
  Tensor b = random({4, 3}, 221, false);
  Tensor a16 = converted(a, DType::kF16);
  Tensor ints = Tensor::zeros({3, 4}, DType::kI32, allocator_, "ints");
  Tensor undefined;

  EXPECT_THROW(add(a, b), InvalidArgument);
  EXPECT_THROW(add(a, a16), InvalidArgument);
  EXPECT_THROW(add(a, ints), InvalidArgument);
  EXPECT_THROW(add(a, undefined), InvalidArgument);
  EXPECT_THROW(mul(a, b), InvalidArgument);
  EXPECT_THROW(mul(a16, a), InvalidArgument);
  EXPECT_THROW(mul(ints, ints), InvalidArgument);

  EXPECT_THROW(add_bias(a, random({3}, 222, false)), InvalidArgument);     // wrong length
  EXPECT_THROW(add_bias(a, random({1, 4}, 223, false)), InvalidArgument);  // not 1-D
  EXPECT_THROW(add_bias(a, converted(random({4}, 224, false), DType::kBF16)), InvalidArgument);
  EXPECT_THROW(add_bias(Tensor::zeros({}, DType::kF32, allocator_), random({1}, 225, false)),
               InvalidArgument);  // x without dimensions

  EXPECT_THROW(scale(a, std::numeric_limits<float>::infinity()), InvalidArgument);
  EXPECT_THROW(scale(a, std::numeric_limits<float>::quiet_NaN()), InvalidArgument);
  EXPECT_THROW(scale(ints, 2.0f), InvalidArgument);
  EXPECT_THROW(dropout(ints, 0.5f, rng_key(1, "site")), InvalidArgument);

  EXPECT_THROW(cast(a, DType::kI32), InvalidArgument);
  EXPECT_THROW(cast(ints, DType::kF32), InvalidArgument);

  EXPECT_THROW(sum(ints), InvalidArgument);
  EXPECT_THROW(mean(ints), InvalidArgument);
  EXPECT_THROW(sum_of_squares(undefined), InvalidArgument);

  EXPECT_THROW(scale_(a, std::numeric_limits<float>::infinity()), InvalidArgument);
  EXPECT_THROW(scale_(ints, 2.0f), InvalidArgument);
  EXPECT_THROW(all_finite(ints), InvalidArgument);
  EXPECT_THROW(fill_(ints, 1.0f), InvalidArgument);
  EXPECT_THROW(copy_(a, b), InvalidArgument);
  EXPECT_THROW(copy_(ints, a), InvalidArgument);
  EXPECT_THROW(copy_(a, undefined), InvalidArgument);
}

}  // namespace
}  // namespace zs::ops
