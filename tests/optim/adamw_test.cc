// AdamW over whole parameters and over flat shards: closed-form first steps, bitwise agreement
// with a plain per-element loop, decay masks at segment boundaries, untouched padding, thread-
// count independence, sharded == unsharded bit for bit, eager state and its read/write access.
#include "optim/adamw.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "optim_test_util.h"
#include "runtime/allocator.h"

namespace zs::optim {
namespace {

using testing::bits;
using testing::fill_normal;
using testing::flat;

TEST(AdamW, FirstStepMovesEachWeightByLrTimesSign) {
  // At t = 1, m̂ = g and v̂ = g², so the update is lr·g/(|g| + eps) ≈ lr·sign(g).
  CpuAllocator allocator(nullptr);
  Tensor w = Tensor::zeros({3}, DType::kF32, allocator, "w").set_requires_grad(true);
  Tensor b = Tensor::zeros({1}, DType::kF32, allocator, "b").set_requires_grad(true);
  w.copy_from({1, 1, 1});
  b.copy_from({1});
  w.set_grad(Tensor::zeros({3}, DType::kF32, allocator, "gw"));
  b.set_grad(Tensor::zeros({1}, DType::kF32, allocator, "gb"));
  w.grad().copy_from({0.5f, -2.0f, 0.0f});
  b.grad().copy_from({3.0f});
  AdamWOptions options;
  options.weight_decay = 0.1f;
  AdamW adam({w, b}, {true, false}, options);
  adam.step(0.01f);
  std::vector<float> wv = w.to_vector();
  // Decay applies to w (masked on), not to b: w -= lr·(sign(g) + wd·w).
  EXPECT_NEAR(wv[0], 1 - 0.01f * (1 + 0.1f), 1e-6);
  EXPECT_NEAR(wv[1], 1 - 0.01f * (-1 + 0.1f), 1e-6);
  EXPECT_NEAR(wv[2], 1 - 0.01f * 0.1f, 1e-6);  // zero gradient: decay only
  EXPECT_NEAR(b.item(), 1 - 0.01f, 1e-6);
  adam.zero_grad();
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(adam.steps(), 1);
}

TEST(AdamW, FirstTwoStepsMatchTheClosedForm) {
  CpuAllocator allocator(nullptr);
  Tensor master = flat(allocator, 4, "master");
  Tensor grad = flat(allocator, 4, "grad");
  const std::vector<float> w0 = {0.5f, -1.5f, 2.0f, 0.25f};
  master.copy_from(w0);
  AdamWOptions o;
  o.beta1 = 0.8f;
  o.beta2 = 0.9f;
  o.eps = 1e-3f;  // large enough to matter in the closed form
  o.weight_decay = 0.05f;
  AdamW adam({ShardView{"unit", master, grad, {{0, 2, true}, {2, 4, false}}}}, o);
  const std::vector<float> g1 = {0.3f, -0.7f, 1.1f, -0.02f}, g2 = {-0.4f, -0.2f, 0.5f, 0.9f};
  const float lr1 = 0.1f, lr2 = 0.05f;
  grad.copy_from(g1);
  adam.step(lr1);
  grad.copy_from(g2);
  adam.step(lr2);
  const std::vector<float> w2 = master.to_vector();
  const std::vector<float> m2 = adam.state(0)[0].to_vector(), v2 = adam.state(0)[1].to_vector();
  for (int i = 0; i < 4; ++i) {
    const double b1 = o.beta1, b2 = o.beta2, eps = o.eps, wd = i < 2 ? o.weight_decay : 0.0;
    double w = w0[i], m = 0, v = 0;
    const double gs[2] = {g1[i], g2[i]}, lrs[2] = {lr1, lr2};
    for (int t = 1; t <= 2; ++t) {
      const double g = gs[t - 1], lr = lrs[t - 1];
      m = b1 * m + (1 - b1) * g;
      v = b2 * v + (1 - b2) * g * g;
      const double m_hat = m / (1 - std::pow(b1, t)), v_hat = v / (1 - std::pow(b2, t));
      w = w * (1 - lr * wd) - lr * m_hat / (std::sqrt(v_hat) + eps);
    }
    EXPECT_NEAR(m2[i], m, 1e-6) << i;
    EXPECT_NEAR(v2[i], v, 1e-6) << i;
    EXPECT_NEAR(w2[i], w, 2e-6) << i;
  }
}

// A 100003-element shard with gaps (padding in the middle and at the end) and alternating decay.
std::vector<Segment> gapped_segments() {
  return {{0, 5, true},          {5, 9, false},         {9, 12, true},       {20, 40001, true},
          {40001, 40002, false}, {40002, 70000, false}, {70003, 99990, true}};
}

TEST(AdamW, MatchesAPlainPerElementLoopBitwiseAndLeavesPaddingAlone) {
  CpuAllocator allocator(nullptr);
  const int64_t n = 100003;
  Tensor master = flat(allocator, n, "master");
  Tensor grad = flat(allocator, n, "grad");
  fill_normal(master, 1, "master");
  const std::vector<Segment> segments = gapped_segments();
  std::vector<char> covered(n, 0), decay(n, 0);
  for (const Segment& s : segments) {
    for (int64_t i = s.begin; i < s.end; ++i) covered[i] = 1, decay[i] = s.decay;
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!covered[i]) master.data<float>()[i] = 0.0f;
  }
  AdamWOptions o;
  o.weight_decay = 0.1f;
  o.beta2 = 0.95f;
  AdamW adam({ShardView{"unit", master, grad, segments}}, o);

  // The reference: the per-element function in a plain loop over copies.
  std::vector<float> w(master.data<float>(), master.data<float>() + n), m(n, 0.0f), v(n, 0.0f);
  for (int t = 1; t <= 3; ++t) {
    fill_normal(grad, 2 + t, "grad", 1e-2f);
    for (int64_t i = 0; i < n; ++i) {
      if (!covered[i]) grad.data<float>()[i] = std::numeric_limits<float>::quiet_NaN();
    }
    const float lr = 1e-3f * t;
    const ops::math::AdamWStep s = adamw_step_scalars(o, lr, t);
    for (int64_t i = 0; i < n; ++i) {
      if (covered[i]) ops::math::adamw_update(w[i], grad.data<float>()[i], m[i], v[i], s, decay[i]);
    }
    adam.step(lr);
  }
  const auto same_bits = [](const std::vector<float>& expected, const Tensor& actual) {
    return bits(actual) ==
           std::vector<uint32_t>(
               reinterpret_cast<const uint32_t*>(expected.data()),
               reinterpret_cast<const uint32_t*>(expected.data()) + expected.size());
  };
  EXPECT_TRUE(same_bits(w, master));
  EXPECT_TRUE(same_bits(m, adam.state(0)[0]));
  EXPECT_TRUE(same_bits(v, adam.state(0)[1]));
  // Padding (NaN gradients there) stayed exactly 0 in the master and the state.
  for (int64_t i = 0; i < n; ++i) {
    if (covered[i]) continue;
    ASSERT_EQ(bits(master)[i], 0u) << i;
    ASSERT_EQ(adam.state(0)[0].data<float>()[i], 0.0f) << i;
    ASSERT_EQ(adam.state(0)[1].data<float>()[i], 0.0f) << i;
  }
}

TEST(AdamW, DecayMaskFollowsSegmentBoundariesExactly) {
  // Zero gradients: m = v = 0, so decayed elements become w·(1 − lr·wd) and the others keep
  // their exact bits; padding keeps its sentinel.
  CpuAllocator allocator(nullptr);
  Tensor master = flat(allocator, 16, "master");
  Tensor grad = flat(allocator, 16, "grad");
  for (int i = 0; i < 16; ++i) master.data<float>()[i] = 1.0f + 0.125f * i;
  for (int i = 12; i < 16; ++i) master.data<float>()[i] = 7.0f;
  const std::vector<float> before = master.to_vector();
  AdamWOptions o;
  o.weight_decay = 0.5f;
  AdamW adam({ShardView{"unit", master, grad, {{0, 5, true}, {5, 9, false}, {9, 12, true}}}}, o);
  adam.step(0.1f);
  const float factor = adamw_step_scalars(o, 0.1f, 1).decay_factor;
  EXPECT_EQ(factor, 0.95f);
  const std::vector<float> after = master.to_vector();
  for (int i = 0; i < 16; ++i) {
    const bool decayed = i < 5 || (i >= 9 && i < 12);
    EXPECT_EQ(after[i], decayed ? before[i] * factor : before[i]) << "element " << i;
  }
}

TEST(AdamW, ResultIsIndependentOfTheThreadCount) {
  CpuAllocator allocator(nullptr);
  std::vector<std::vector<uint32_t>> results;
  for (int threads : {1, 2, 3}) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    Tensor master = flat(allocator, 100003, "master");
    Tensor grad = flat(allocator, 100003, "grad");
    fill_normal(master, 1, "master");
    AdamWOptions o;
    o.weight_decay = 0.1f;
    AdamW adam({ShardView{"unit", master, grad, gapped_segments()}}, o);
    for (int t = 1; t <= 3; ++t) {
      fill_normal(grad, 10 + t, "grad", 1e-2f);
      adam.step(1e-3f);
    }
    omp_set_num_threads(saved);
    std::vector<uint32_t> all = bits(master);
    for (const Tensor& s : adam.state(0)) {
      const std::vector<uint32_t> b = bits(s);
      all.insert(all.end(), b.begin(), b.end());
    }
    results.push_back(all);
  }
  EXPECT_TRUE(results[0] == results[1]) << "1 vs 2 threads";
  EXPECT_TRUE(results[0] == results[2]) << "1 vs 3 threads";
}

TEST(AdamW, ShardsOfOneTwoAndThreeRanksEqualTheUnshardedUpdateBitwise) {
  AdamWOptions o;
  o.weight_decay = 0.1f;
  testing::expect_sharding_invariant(
      testing::model_like_layout(), 3,
      [&](std::vector<ShardView> views) { return std::make_unique<AdamW>(std::move(views), o); },
      [&](std::vector<Tensor> params, std::vector<bool> decay) {
        return std::make_unique<AdamW>(std::move(params), std::move(decay), o);
      });
}

TEST(AdamW, StateIsEagerChargedAsOptimizerStateAndReadWrite) {
  MemoryTracker tracker;
  CpuAllocator allocator(&tracker);
  Tensor w = Tensor::zeros({100}, DType::kF32, allocator, "w").set_requires_grad(true);
  w.set_grad(Tensor::zeros({100}, DType::kF32, allocator, "gw"));
  AdamW adam({w}, {true}, AdamWOptions{});
  EXPECT_EQ(tracker.current(MemoryCategory::kOptimizerState), 800u);  // m and v, fp32, eager
  adam.step(1e-3f);
  EXPECT_EQ(tracker.current(MemoryCategory::kOptimizerState), 800u);

  ASSERT_EQ(adam.state_names(), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
  const auto dict = adam.state_dict();
  ASSERT_EQ(dict.size(), 2u);
  EXPECT_EQ(dict[0].first, "w.exp_avg");
  EXPECT_EQ(dict[1].first, "w.exp_avg_sq");
  EXPECT_EQ(dict[0].second.shape(), w.shape());

  // Restoring state through the handles and the step count reproduces an uninterrupted run.
  CpuAllocator plain(nullptr);
  Tensor master_a = flat(plain, 64, "a"), grad_a = flat(plain, 64, "ga");
  Tensor master_b = flat(plain, 64, "b"), grad_b = flat(plain, 64, "gb");
  fill_normal(master_a, 5, "master");
  fill_normal(master_b, 5, "master");
  AdamW a({ShardView{"u", master_a, grad_a, {{0, 64, true}}}}, AdamWOptions{});
  for (int t = 0; t < 2; ++t) {
    fill_normal(grad_a, 6 + t, "grad");
    a.step(1e-2f);
  }
  AdamW b({ShardView{"u", master_b, grad_b, {{0, 64, true}}}}, AdamWOptions{});
  std::memcpy(master_b.raw_data(), master_a.raw_data(), master_a.nbytes());
  for (const auto& [name, tensor] : a.state_dict()) {
    for (const auto& [other_name, other] : b.state_dict()) {
      if (other_name == name) std::memcpy(other.raw_data(), tensor.raw_data(), tensor.nbytes());
    }
  }
  b.set_steps(a.steps());
  fill_normal(grad_a, 8, "grad");
  fill_normal(grad_b, 8, "grad");
  a.step(1e-2f);
  b.step(1e-2f);
  EXPECT_EQ(bits(master_a), bits(master_b));
  EXPECT_EQ(bits(a.state(0)[1]), bits(b.state(0)[1]));
}

TEST(AdamW, SkipsWholeParametersWithoutAGradientAndReadsSwappedGradients) {
  CpuAllocator allocator(nullptr);
  Tensor w = Tensor::zeros({2}, DType::kF32, allocator, "w").set_requires_grad(true);
  w.copy_from({1, 2});
  AdamW adam({w}, {false}, AdamWOptions{});
  adam.step(0.1f);  // no gradient yet: untouched
  EXPECT_EQ(w.to_vector(), (std::vector<float>{1, 2}));
  EXPECT_TRUE(adam.grad_views().empty());
  Tensor g = flat(allocator, 2, "g");
  g.copy_from({1, -1});
  w.set_grad(g);  // now reads `g`, the parameter's gradient
  ASSERT_EQ(adam.grad_views().size(), 1u);
  adam.step(0.1f);
  // The step count is global (one per optimizer step, the same for every view): this view's
  // first update runs at t = 2, with m = 0.1·g, v = 0.001·g².
  EXPECT_EQ(adam.steps(), 2);
  const double move = 0.1 * (0.1 / (1 - 0.81)) / std::sqrt(0.001 / (1 - 0.998001));
  EXPECT_NEAR(w.to_vector()[0], 1 - move, 1e-6);
  EXPECT_NEAR(w.to_vector()[1], 2 + move, 1e-6);
}

TEST(AdamW, RejectsBadViewsAndOptionsWithClearMessages) {
  CpuAllocator allocator(nullptr);
  Tensor w = Tensor::zeros({2}, DType::kF32, allocator, "w");
  Tensor h = Tensor::zeros({2}, DType::kF16, allocator, "h");
  EXPECT_THROW(AdamW({w}, {true, false}, AdamWOptions{}), InvalidArgument);
  EXPECT_THROW(AdamW({h}, {true}, AdamWOptions{}), InvalidArgument);

  Tensor master = flat(allocator, 8, "master"), grad = flat(allocator, 8, "grad");
  Tensor short_grad = flat(allocator, 7, "short");
  const auto message = [&](std::vector<ShardView> views, AdamWOptions o = {}) {
    try {
      AdamW adam(std::move(views), o);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"u", master, short_grad, {{0, 8, true}}}}).find("7 elements"),
            std::string::npos);
  EXPECT_NE(message({{"u", master, grad, {{0, 5, true}, {4, 8, false}}}}).find("overlap"),
            std::string::npos);
  EXPECT_NE(message({{"u", master, grad, {{0, 9, true}}}}).find("not inside"), std::string::npos);
  EXPECT_NE(message({{"u", master, master, {{0, 8, true}}}}).find("same memory"),
            std::string::npos);
  EXPECT_NE(message({{"u", master, grad, {}}, {"u", master, grad, {}}}).find("unique"),
            std::string::npos);
  AdamWOptions bad;
  bad.beta2 = 1.0f;
  EXPECT_NE(message({{"u", master, grad, {}}}, bad).find("betas"), std::string::npos);
  AdamW adam({ShardView{"u", master, grad, {{0, 8, true}}}}, AdamWOptions{});
  EXPECT_THROW(adam.step(std::numeric_limits<float>::quiet_NaN()), InvalidArgument);
}

TEST(ShardView, SliceViewClipsAndShiftsSegments) {
  CpuAllocator allocator(nullptr);
  Tensor master = flat(allocator, 20, "master"), grad = flat(allocator, 20, "grad");
  ShardView view{"u", master, grad, {{0, 6, true}, {6, 13, false}, {15, 20, true}}};
  ShardView sub = slice_view(view, 5, 16);
  EXPECT_EQ(sub.master.numel(), 11);
  EXPECT_EQ(sub.master.data<float>(), master.data<float>() + 5);
  EXPECT_EQ(sub.grad.data<float>(), grad.data<float>() + 5);
  ASSERT_EQ(sub.segments.size(), 3u);
  EXPECT_EQ(sub.segments[0].begin, 0);
  EXPECT_EQ(sub.segments[0].end, 1);
  EXPECT_EQ(sub.segments[1].begin, 1);
  EXPECT_EQ(sub.segments[1].end, 8);
  EXPECT_FALSE(sub.segments[1].decay);
  EXPECT_EQ(sub.segments[2].begin, 10);
  EXPECT_EQ(sub.segments[2].end, 11);
  EXPECT_EQ(covered_numel(sub), 9);
  // normalize merges adjacent segments with the same flag and drops empty ones.
  const auto merged = normalize_segments({{4, 8, true}, {0, 4, true}, {8, 8, false}}, 8, "t");
  ASSERT_EQ(merged.size(), 1u);
  EXPECT_EQ(merged[0].end, 8);
}

}  // namespace
}  // namespace zs::optim
