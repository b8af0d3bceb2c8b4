// Tests of ops/attention.h: gradients against finite differences (causal, bidirectional, key
// padding, odd shapes, several query blocks), the forward against a naive double-precision
// reference that builds the full score matrix, exact causal and padding independence, the
// workspace charged to the memory tracker, bitwise independence from the thread count,
// accumulation into an existing gradient, fp16/bf16 against fp32, and argument checks.
#include "ops/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/cpu/gemm.h"
#include "ops/math/softmax.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/memory_tracker.h"
#include "tests/support/gradcheck.h"
#include "tests/support/op_test.h"

namespace zs::ops {
namespace {

using zs::testing::backward_from;
using zs::testing::check_gradients;
using zs::testing::OpTest;
using zs::testing::random_tensor;

struct Dims {
  int64_t batch, seq, channels, heads;
};

// Naive attention in double: explicit scores, mask, softmax and weighted sum, one query at a time.
// lengths empty = no padding. A query that sees no key outputs zeros.
std::vector<double> reference_attention(const std::vector<float>& qkv, const Dims& d, bool causal,
                                        const std::vector<int32_t>& lengths = {}) {
  const int64_t T = d.seq, C = d.channels, H = d.heads, D = C / H, ld = 3 * C;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> out(static_cast<size_t>(d.batch * T * C), 0.0);
  for (int64_t b = 0; b < d.batch; ++b) {
    const int64_t valid = lengths.empty() ? T : lengths[static_cast<size_t>(b)];
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> scores;
        for (int64_t j = 0; j < T; ++j) {
          if (j >= valid || (causal && j > i)) break;  // masks are prefixes
          double s = 0;
          for (int64_t c = 0; c < D; ++c) {
            s += static_cast<double>(qkv[b * T * ld + i * ld + h * D + c]) *
                 qkv[b * T * ld + j * ld + C + h * D + c];
          }
          scores.push_back(s * scale);
        }
        if (scores.empty()) continue;
        const double max = *std::max_element(scores.begin(), scores.end());
        double sum = 0;
        for (double& s : scores) sum += (s = std::exp(s - max));
        for (int64_t c = 0; c < D; ++c) {
          double acc = 0;
          for (size_t j = 0; j < scores.size(); ++j) {
            acc += scores[j] / sum *
                   qkv[b * T * ld + static_cast<int64_t>(j) * ld + 2 * C + h * D + c];
          }
          out[b * T * C + i * C + h * D + c] = acc;
        }
      }
    }
  }
  return out;
}

class AttentionTest : public OpTest {
 protected:
  Tensor qkv_for(const Dims& d, uint32_t seed, float range = 1.0f) {
    return random_tensor({d.batch, d.seq, 3 * d.channels}, allocator_, seed, -range, range);
  }
  Tensor lengths_tensor(const std::vector<int32_t>& values) {
    Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::kI32, allocator_,
                             MemoryCategory::kOther, "lengths");
    std::copy(values.begin(), values.end(), t.data<int32_t>());
    return t;
  }
  // A tensor of `dtype` holding `values` (rounded to that dtype).
  Tensor tensor_of(const Shape& shape, DType dtype, const std::vector<float>& values) {
    Tensor t = Tensor::empty(shape, dtype, allocator_, MemoryCategory::kOther, "input");
    t.copy_from(values);
    return t;
  }
  // The gradient of Σ dout ⊙ attention(qkv) with respect to qkv, through the tape.
  std::vector<float> qkv_grad(const Tensor& qkv, int64_t heads, bool causal,
                              const std::vector<float>& dout, const Tensor& lengths = Tensor()) {
    qkv.set_grad(Tensor());
    Tensor out = attention(qkv, heads, causal, lengths);
    seed_and_backward({out}, {dout});
    return qkv.grad().to_vector();
  }
  // Runs backward with d loss / d outs[i] = grads[i].
  void seed_and_backward(const std::vector<Tensor>& outs,
                         const std::vector<std::vector<float>>& grads) {
    std::vector<Tensor> seeds;
    for (size_t i = 0; i < outs.size(); ++i) {
      seeds.push_back(tensor_of(outs[i].shape(), outs[i].dtype(), grads[i]));
    }
    backward_from(outs, seeds);
  }
  static std::vector<float> random_values(size_t n, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> values(n);
    for (float& v : values) v = dist(gen);
    return values;
  }
  // Expects `got` within tol_rel · max|ref| of `ref`, element-wise.
  static void expect_matches_reference(const std::vector<float>& got,
                                       const std::vector<double>& ref, double tol_rel) {
    ASSERT_EQ(got.size(), ref.size());
    double max_abs = 0;
    for (double r : ref) max_abs = std::max(max_abs, std::fabs(r));
    int failures = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << "element " << i;
      if (std::fabs(got[i] - ref[i]) > tol_rel * max_abs && ++failures <= 10) {
        ADD_FAILURE() << "element " << i << ": got " << got[i] << ", reference " << ref[i];
      }
    }
    EXPECT_EQ(failures, 0);
  }
};

// ---- gradients --------------------------------------------------------------------------------

TEST_F(AttentionTest, GradientsMatchFiniteDifferences) {
  const Dims shapes[] = {
      {2, 5, 6, 2},   // odd T, D = 3
      {1, 7, 12, 3},  // D = 4
      {3, 1, 6, 2},   // T = 1
      {1, 3, 3, 1},   // one head, D = 3
      {1, 70, 4, 2},  // two query blocks (kQueryBlock = 64), D = 2
  };
  uint32_t seed = 1;
  for (const Dims& d : shapes) {
    for (bool causal : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "B=" << d.batch << " T=" << d.seq << " C=" << d.channels
                                        << " H=" << d.heads << " causal=" << causal);
      Tensor qkv = qkv_for(d, seed++);
      EXPECT_EQ(
          check_gradients(
              [&](const std::vector<Tensor>& in) { return attention(in[0], d.heads, causal); },
              {qkv}),
          0);
    }
  }
}

TEST_F(AttentionTest, GradientsWithKeyPaddingMatchFiniteDifferences) {
  const Dims d{3, 5, 6, 2};
  Tensor lengths = lengths_tensor({3, 0, 5});  // padded, fully masked, full
  uint32_t seed = 100;
  for (bool causal : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "causal=" << causal);
    Tensor qkv = qkv_for(d, seed++);
    EXPECT_EQ(check_gradients(
                  [&](const std::vector<Tensor>& in) {
                    return attention(in[0], d.heads, causal, lengths);
                  },
                  {qkv}),
              0);
  }
}

TEST_F(AttentionTest, AccumulatesIntoAnExistingGradient) {
  // qkv feeds two attention calls: the second backward adds into the first one's gradient.
  const Dims d{2, 6, 8, 2};
  Tensor qkv = qkv_for(d, 7);
  const size_t n_out = static_cast<size_t>(d.batch * d.seq * d.channels);
  const std::vector<float> g1 = random_values(n_out, 1), g2 = random_values(n_out, 2);
  const std::vector<float> causal_grad = qkv_grad(qkv, d.heads, true, g1);
  const std::vector<float> bidir_grad = qkv_grad(qkv, d.heads, false, g2);

  qkv.set_grad(Tensor());
  Tensor a = attention(qkv, d.heads, true);
  Tensor b = attention(qkv, d.heads, false);
  seed_and_backward({a, b}, {g1, g2});
  const std::vector<float> both = qkv.grad().to_vector();
  for (size_t i = 0; i < both.size(); ++i) {
    EXPECT_NEAR(both[i], causal_grad[i] + bidir_grad[i], 1e-6f) << "element " << i;
  }
}

// ---- forward ----------------------------------------------------------------------------------

// Relative to the largest reference value: fp32 accumulations over D and T of O(1) terms leave
// errors of a few 1e-7 of the output scale.
constexpr double kForwardRelTol = 1e-5;

TEST_F(AttentionTest, ForwardMatchesNaiveReference) {
  const Dims shapes[] = {{2, 33, 32, 4}, {1, 100, 16, 2}};  // one query block, two blocks
  uint32_t seed = 10;
  for (const Dims& d : shapes) {
    for (bool causal : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "T=" << d.seq << " causal=" << causal);
      Tensor qkv = qkv_for(d, seed++);
      NoGradScope no_grad;
      Tensor out = attention(qkv, d.heads, causal);
      ASSERT_EQ(out.shape(), (Shape{d.batch, d.seq, d.channels}));
      expect_matches_reference(out.to_vector(), reference_attention(qkv.to_vector(), d, causal),
                               kForwardRelTol);
    }
  }
}

TEST_F(AttentionTest, ForwardWithKeyPaddingMatchesReference) {
  const Dims d{4, 33, 32, 4};
  const std::vector<int32_t> lengths = {33, 17, 0, 1};
  Tensor qkv = qkv_for(d, 20);
  for (bool causal : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "causal=" << causal);
    Tensor out = attention(qkv, d.heads, causal, lengths_tensor(lengths));
    const std::vector<float> values = out.to_vector();
    expect_matches_reference(values, reference_attention(qkv.to_vector(), d, causal, lengths),
                             kForwardRelTol);
    // The all-padding sequence gives exact zeros (not NaN).
    const size_t per_seq = static_cast<size_t>(d.seq * d.channels);
    for (size_t i = 2 * per_seq; i < 3 * per_seq; ++i) ASSERT_EQ(values[i], 0.0f) << i;
  }
}

TEST_F(AttentionTest, LargeLogitsStayFinite) {
  // |q|, |k| up to 30 and D = 8: logits up to ~2500, where a softmax without the max shift
  // overflows. fp32 logits that large carry ~1e-4 absolute rounding, hence the looser tolerance.
  const Dims d{1, 9, 16, 2};
  Tensor qkv = qkv_for(d, 30, 30.0f);
  for (bool causal : {true, false}) {
    Tensor out = attention(qkv, d.heads, causal);
    std::vector<double> ref = reference_attention(qkv.to_vector(), d, causal);
    expect_matches_reference(out.to_vector(), ref, 1e-3);
  }
}

// Changing the q, k and v of tokens >= cut leaves the outputs of tokens < cut bit-identical.
TEST_F(AttentionTest, CausalOutputsIgnoreFutureTokensExactly) {
  const Dims d{2, 100, 32, 4};  // two query blocks; cuts inside the first and second block
  for (int64_t cut : {1, 20, 63, 64, 70}) {
    Tensor qkv = qkv_for(d, 40);
    const std::vector<float> before = attention(qkv, d.heads, true).to_vector();
    std::vector<float> changed = qkv.to_vector();
    std::mt19937 gen(static_cast<uint32_t>(cut));
    std::uniform_real_distribution<float> dist(-5.0f, 5.0f);
    const int64_t ld = 3 * d.channels;
    for (int64_t b = 0; b < d.batch; ++b) {
      for (int64_t t = cut; t < d.seq; ++t) {
        for (int64_t c = 0; c < ld; ++c) changed[b * d.seq * ld + t * ld + c] = dist(gen);
      }
    }
    qkv.copy_from(changed);
    const std::vector<float> after = attention(qkv, d.heads, true).to_vector();
    for (int64_t b = 0; b < d.batch; ++b) {
      for (int64_t i = 0; i < cut * d.channels; ++i) {
        const size_t at = static_cast<size_t>(b * d.seq * d.channels + i);
        ASSERT_EQ(before[at], after[at]) << "cut " << cut << " batch " << b << " element " << i;
      }
    }
  }
}

// Changing the k and v of padded keys changes no output at all (queries at padded positions too).
TEST_F(AttentionTest, PaddedKeysAreIgnoredExactly) {
  const Dims d{2, 33, 16, 2};
  const std::vector<int32_t> lengths = {20, 33};
  Tensor lengths_t = lengths_tensor(lengths);
  for (bool causal : {true, false}) {
    Tensor qkv = qkv_for(d, 50);
    const std::vector<float> before = attention(qkv, d.heads, causal, lengths_t).to_vector();
    std::vector<float> changed = qkv.to_vector();
    const int64_t ld = 3 * d.channels;
    for (int64_t t = lengths[0]; t < d.seq; ++t) {
      for (int64_t c = d.channels; c < ld; ++c) changed[t * ld + c] = 3.0f + 0.01f * c;
    }
    qkv.copy_from(changed);
    const std::vector<float> after = attention(qkv, d.heads, causal, lengths_t).to_vector();
    ASSERT_EQ(before, after) << "causal " << causal;
  }
}

// ---- memory and threads -----------------------------------------------------------------------

TEST_F(AttentionTest, WorkspaceIsPerThreadNotPerHead) {
  const int threads = cpu::intra_op_threads();
  for (const Dims& d : {Dims{2, 33, 32, 4}, Dims{2, 200, 16, 4}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << d.seq << " threads=" << threads);
    const size_t T = static_cast<size_t>(d.seq);
    const size_t rows = std::min<size_t>(T, 64);  // the query block of attention.cc
    Tensor qkv = qkv_for(d, 60);
    tracker_.reset_peaks();
    const size_t before = tracker_.current(MemoryCategory::kWorkspace);
    Tensor out = attention(qkv, d.heads, true);
    const size_t forward_peak = tracker_.peak(MemoryCategory::kWorkspace) - before;
    // fp32 input: the only workspace is one block of scores per thread (the lse is saved, so it
    // is an activation). The contract: at most threads × T × T × 4 bytes.
    // attention.cc runs small problems on fewer threads, each still owning one block.
    EXPECT_LE(forward_peak, threads * T * T * 4 + 256);
    EXPECT_LE(forward_peak, threads * rows * T * 4);
    EXPECT_EQ(forward_peak % (rows * T * 4), 0u);
    EXPECT_GT(forward_peak, 0u);
    EXPECT_EQ(tracker_.current(MemoryCategory::kWorkspace), before);
    // Saved for backward besides qkv and out: the fp32 lse [B, H, T].
    tracker_.reset_peaks();
    seed_and_backward({out}, {random_values(static_cast<size_t>(out.numel()), 3)});
    const size_t backward_peak = tracker_.peak(MemoryCategory::kWorkspace) - before;
    EXPECT_LE(backward_peak, threads * 2 * rows * T * 4);
    EXPECT_EQ(backward_peak % (2 * rows * T * 4), 0u);
    EXPECT_GT(backward_peak, 0u);
  }
}

TEST_F(AttentionTest, ResultsDoNotDependOnThreadCount) {
  // Large enough (about 4M multiply-adds) that attention.cc splits the pairs over two threads;
  // T = 130 spans three query blocks.
  const Dims d{2, 130, 64, 4};
  const std::vector<float> dout =
      random_values(static_cast<size_t>(d.batch * d.seq * d.channels), 5);
  for (bool causal : {true, false}) {
    std::vector<float> outs[2], grads[2];
    for (int threads : {1, 2}) {
      cpu::IntraOpThreadsScope scope(threads);  // omp_set_num_threads for this thread
      Tensor qkv = qkv_for(d, 70);
      tracker_.reset_peaks();
      outs[threads - 1] = attention(qkv, d.heads, causal).to_vector();
      // One 64 × T score block per thread: proves the pairs really were split `threads` ways.
      EXPECT_EQ(tracker_.peak(MemoryCategory::kWorkspace),
                static_cast<size_t>(threads * 64 * d.seq * 4));
      grads[threads - 1] = qkv_grad(qkv, d.heads, causal, dout);
    }
    EXPECT_EQ(outs[0], outs[1]) << "causal " << causal;
    EXPECT_EQ(grads[0], grads[1]) << "causal " << causal;
  }
}

// ---- fp16 / bf16 ------------------------------------------------------------------------------

// The 16-bit path converts qkv exactly to fp32, runs the fp32 kernels, and rounds the result once.
// Against the fp32 op on the same (rounded) values the forward therefore differs only by that
// rounding: |y16 − y32| <= u·|y32| (+ fp16 subnormal spacing), u = 2^-11 (fp16) or 2^-8 (bf16).
// The gradient also sees the saved output rounded to 16 bits inside delta = rowsum(dO ⊙ O): with
// all of |q|, |k|, |v|, |dO| <= 1, |Δdelta| <= u·D, which moves dQ by at most scale·u·D·max|k| =
// u·sqrt(D) and dK by at most u·sqrt(D)·Σ_i P_ij <= u·sqrt(D)·T; plus the final rounding u·|g|.
TEST_F(AttentionTest, HalfAndBFloat16MatchFp32) {
  const Dims d{2, 7, 8, 2};
  const int64_t D = d.channels / d.heads;
  const Shape qkv_shape{d.batch, d.seq, 3 * d.channels};
  const std::vector<float> raw = random_values(static_cast<size_t>(shape_numel(qkv_shape)), 80);
  const std::vector<float> raw_dout =
      random_values(static_cast<size_t>(d.batch * d.seq * d.channels), 81);
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const double u = dtype == DType::kF16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    for (bool causal : {true, false}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " causal=" << causal);
      Tensor qkv16 = tensor_of(qkv_shape, dtype, raw);
      qkv16.set_requires_grad(true);
      const std::vector<float> rounded = qkv16.to_vector();
      const std::vector<float> dout = tensor_of({d.batch, d.seq, d.channels}, dtype, raw_dout)
                                          .to_vector();  // the 16-bit seed's exact values
      Tensor qkv32 = tensor_of(qkv_shape, DType::kF32, rounded);
      qkv32.set_requires_grad(true);

      Tensor out16 = attention(qkv16, d.heads, causal);
      EXPECT_EQ(out16.dtype(), dtype);
      const std::vector<float> y16 = out16.to_vector();
      const std::vector<float> y32 = attention(qkv32, d.heads, causal).to_vector();
      for (size_t i = 0; i < y16.size(); ++i) {
        EXPECT_NEAR(y16[i], y32[i], u * std::fabs(y32[i]) + 3e-8) << "output " << i;
      }

      const std::vector<float> g16 = qkv_grad(qkv16, d.heads, causal, dout);
      EXPECT_EQ(qkv16.grad().dtype(), dtype);
      const std::vector<float> g32 = qkv_grad(qkv32, d.heads, causal, dout);
      const double delta_bound = u * std::sqrt(static_cast<double>(D)) * d.seq;
      for (size_t i = 0; i < g16.size(); ++i) {
        EXPECT_NEAR(g16[i], g32[i], u * std::fabs(g32[i]) + delta_bound + 1e-6) << "grad " << i;
      }
    }
  }
}

TEST_F(AttentionTest, EmptyBatchOrSequenceGivesEmptyOutput) {
  for (const Shape& shape : {Shape{0, 5, 18}, Shape{2, 0, 18}}) {
    Tensor out = attention(Tensor::empty(shape, DType::kF32, allocator_), 2, true);
    EXPECT_EQ(out.shape(), (Shape{shape[0], shape[1], 6}));
  }
}

// ---- ops/math/softmax.h -----------------------------------------------------------------------

TEST(SoftmaxMathTest, ExpApproxIsWithinTwoUlpOfExp) {
  double worst = 0;
  for (float x = -87.3f; x < 88.3f; x += 0.01f + 1e-3f * std::fabs(x)) {
    const double ref = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(math::exp_approx(x) - ref) / ref);
  }
  EXPECT_LT(worst, 2 * 5.97e-8);  // 2 ulp at the bottom of a binade (2^-24 relative per ulp)
  EXPECT_EQ(math::exp_approx(0.0f), 1.0f);
  EXPECT_EQ(math::exp_approx(-INFINITY), 0.0f);
  EXPECT_EQ(math::exp_approx(-100.0f), 0.0f);
  EXPECT_EQ(math::exp_approx(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(math::exp_approx(NAN)));
}

TEST(SoftmaxMathTest, RowSoftmaxStatsAndBackward) {
  std::vector<float> row = {0.5f, -3.0f, 2.0f, 1000.0f, 999.0f, -1e30f, 7.0f, 0.0f, 1.0f, 2.0f,
                            3.0f, 4.0f,  5.0f, 6.0f,    7.0f,   8.0f,   9.0f, 10.f, 11.f, 12.f};
  const int64_t n = static_cast<int64_t>(row.size());  // more than one block of reduction lanes
  double max = -1e300, sum = 0;
  for (float x : row) max = std::max(max, static_cast<double>(x));
  for (float x : row) sum += std::exp(x - max);
  const double lse = max + std::log(sum);
  // Streaming statistics, in two halves merged, agree with the direct log-sum-exp.
  math::SoftmaxStats first = math::softmax_stats_empty(), second = math::softmax_stats_empty();
  for (int64_t j = 0; j < n; ++j) {
    math::SoftmaxStats& half = j < n / 2 ? first : second;
    half = math::softmax_stats_add(half, row[static_cast<size_t>(j)]);
  }
  EXPECT_NEAR(math::softmax_stats_lse(math::softmax_stats_merge(first, second)), lse, 1e-4);
  EXPECT_EQ(math::softmax_stats_lse(math::softmax_stats_empty()), -INFINITY);
  std::vector<float> probs = row;
  EXPECT_NEAR(math::softmax_row_inplace(probs.data(), n), lse, 1e-4);
  for (int64_t j = 0; j < n; ++j) {
    const float x = row[static_cast<size_t>(j)];
    EXPECT_NEAR(probs[static_cast<size_t>(j)], std::exp(x - lse), 1e-6) << j;
    // From an fp32 lse: exact up to exp's rounding given that lse (ulp(1000) = 6e-5 dominates).
    const float lse32 = static_cast<float>(lse);
    EXPECT_NEAR(math::softmax_prob_from_lse(x, lse32), std::exp(x - static_cast<double>(lse32)),
                1e-6);
  }
  EXPECT_EQ(math::softmax_row_inplace(probs.data(), 0), -INFINITY);
  EXPECT_EQ(math::masked_row_length(3, true, 10), 4);
  EXPECT_EQ(math::masked_row_length(3, true, 2), 2);
  EXPECT_EQ(math::masked_row_length(3, false, 10), 10);
  EXPECT_EQ(math::softmax_backward(0.0f, 5.0f, 1.0f), 0.0f);
  EXPECT_FLOAT_EQ(math::softmax_backward(0.25f, 3.0f, 1.0f), 0.5f);
}

// ---- argument checks --------------------------------------------------------------------------

TEST_F(AttentionTest, RejectsBadShapesAndDtypes) {
  Tensor qkv = qkv_for({2, 5, 6, 2}, 90);  // [2, 5, 18]
  EXPECT_NO_THROW(attention(qkv, 2, true));
  EXPECT_THROW(attention(qkv, 0, true), InvalidArgument);
  EXPECT_THROW(attention(qkv, -1, false), InvalidArgument);
  EXPECT_THROW(attention(qkv, 4, true), InvalidArgument);  // 18 is not a multiple of 12
  EXPECT_THROW(attention(random_tensor({5, 18}, allocator_, 1), 2, true), InvalidArgument);
  EXPECT_THROW(attention(random_tensor({1, 2, 5, 18}, allocator_, 1), 2, true), InvalidArgument);
  EXPECT_THROW(attention(Tensor::empty({2, 5, 0}, DType::kF32, allocator_), 1, true),
               InvalidArgument);
  EXPECT_THROW(attention(random_tensor({2, 5, 17}, allocator_, 1), 1, true), InvalidArgument);
  Tensor ints = Tensor::zeros({2, 5, 18}, DType::kI32, allocator_, "ints");
  EXPECT_THROW(attention(ints, 2, true), InvalidArgument);
  EXPECT_THROW(attention(Tensor(), 2, true), InvalidArgument);

  EXPECT_NO_THROW(attention(qkv, 2, false, lengths_tensor({5, 0})));
  EXPECT_THROW(attention(qkv, 2, false, lengths_tensor({5})), InvalidArgument);      // [1] != [B]
  EXPECT_THROW(attention(qkv, 2, false, lengths_tensor({5, 6})), InvalidArgument);   // > T
  EXPECT_THROW(attention(qkv, 2, false, lengths_tensor({-1, 3})), InvalidArgument);  // < 0
  EXPECT_THROW(attention(qkv, 2, false, random_tensor({2}, allocator_, 1, 0, 5, false)),
               InvalidArgument);  // fp32 lengths
}

}  // namespace
}  // namespace zs::ops
