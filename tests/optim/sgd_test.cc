// SGD (plain, momentum, Nesterov) against closed-form first steps, a plain per-element loop bit
// for bit, the thread count, and sharding into 1, 2 and 3 ranks; state only with momentum.
#include "optim/sgd.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <limits>

#include "optim_test_util.h"
#include "runtime/allocator.h"

namespace zs::optim {
namespace {

using testing::bits;
using testing::fill_normal;
using testing::flat;

SgdOptions make_options(float momentum, bool nesterov, float weight_decay) {
  SgdOptions o;
  o.momentum = momentum;
  o.nesterov = nesterov;
  o.weight_decay = weight_decay;
  return o;
}

TEST(Sgd, FirstStepsMatchTheClosedForm) {
  CpuAllocator allocator(nullptr);
  const float w0[2] = {1.0f, -2.0f}, g1[2] = {0.5f, 0.25f}, g2[2] = {-1.0f, 0.75f};
  const float lr = 0.1f, mu = 0.9f, wd = 0.01f;
  for (int variant = 0; variant < 3; ++variant) {
    const bool momentum = variant > 0, nesterov = variant == 2;
    Tensor master = flat(allocator, 2, "master"), grad = flat(allocator, 2, "grad");
    master.copy_from({w0[0], w0[1]});
    // Element 0 decays, element 1 does not.
    Sgd sgd({ShardView{"u", master, grad, {{0, 1, true}, {1, 2, false}}}},
            make_options(momentum ? mu : 0.0f, nesterov, wd));
    EXPECT_EQ(sgd.state_names().size(), momentum ? 1u : 0u);
    grad.copy_from({g1[0], g1[1]});
    sgd.step(lr);
    grad.copy_from({g2[0], g2[1]});
    sgd.step(lr);
    const std::vector<float> w = master.to_vector();
    for (int i = 0; i < 2; ++i) {
      const double decay = i == 0 ? wd : 0.0;
      double x = w0[i], buffer = 0;
      for (const double g_raw : {double(g1[i]), double(g2[i])}) {
        const double g = g_raw + decay * x;
        double d = g;
        if (momentum) {
          buffer = mu * buffer + g;  // the first step gives buffer = g
          d = nesterov ? g + mu * buffer : buffer;
        }
        x -= lr * d;
      }
      EXPECT_NEAR(w[i], x, 1e-6) << "variant " << variant << " element " << i;
    }
  }
}

TEST(Sgd, MatchesAPlainPerElementLoopBitwiseForEveryVariant) {
  CpuAllocator allocator(nullptr);
  const int64_t n = 70001;
  const std::vector<Segment> segments = {
      {3, 30000, true}, {30000, 30001, false}, {30001, 50000, false}, {50010, 70000, true}};
  std::vector<char> covered(n, 0), decay(n, 0);
  for (const Segment& s : segments) {
    for (int64_t i = s.begin; i < s.end; ++i) covered[i] = 1, decay[i] = s.decay;
  }
  for (int variant = 0; variant < 3; ++variant) {
    const SgdOptions o = make_options(variant > 0 ? 0.9f : 0.0f, variant == 2, 0.05f);
    Tensor master = flat(allocator, n, "master"), grad = flat(allocator, n, "grad");
    fill_normal(master, 1, "master");
    std::vector<float> w(master.data<float>(), master.data<float>() + n), buffer(n, 0.0f);
    Sgd sgd({ShardView{"u", master, grad, segments}}, o);
    for (int t = 0; t < 3; ++t) {
      fill_normal(grad, 20 + t, "grad", 0.1f);
      for (int64_t i = 0; i < n; ++i) {
        if (!covered[i]) grad.data<float>()[i] = std::numeric_limits<float>::quiet_NaN();
      }
      const float lr = 0.01f * (t + 1);
      const ops::math::SgdStep s{lr, o.momentum, o.weight_decay};
      for (int64_t i = 0; i < n; ++i) {
        if (!covered[i]) continue;
        if (variant == 0) {
          ops::math::sgd_update(w[i], grad.data<float>()[i], s, decay[i]);
        } else {
          ops::math::sgd_momentum_update(w[i], grad.data<float>()[i], buffer[i], s, decay[i],
                                         o.nesterov);
        }
      }
      sgd.step(lr);
    }
    const std::vector<uint32_t> expected(reinterpret_cast<const uint32_t*>(w.data()),
                                         reinterpret_cast<const uint32_t*>(w.data()) + n);
    EXPECT_TRUE(bits(master) == expected) << "variant " << variant;
    if (variant > 0) {
      const std::vector<uint32_t> expected_buffer(
          reinterpret_cast<const uint32_t*>(buffer.data()),
          reinterpret_cast<const uint32_t*>(buffer.data()) + n);
      EXPECT_TRUE(bits(sgd.state(0)[0]) == expected_buffer) << "variant " << variant;
    }
  }
}

TEST(Sgd, ResultIsIndependentOfTheThreadCount) {
  CpuAllocator allocator(nullptr);
  for (int variant = 0; variant < 3; ++variant) {
    std::vector<std::vector<uint32_t>> results;
    for (int threads : {1, 2}) {
      const int saved = omp_get_max_threads();
      omp_set_num_threads(threads);
      Tensor master = flat(allocator, 90001, "master"), grad = flat(allocator, 90001, "grad");
      fill_normal(master, 1, "master");
      Sgd sgd({ShardView{"u", master, grad, {{1, 45000, true}, {45000, 90000, false}}}},
              make_options(variant > 0 ? 0.9f : 0.0f, variant == 2, 0.1f));
      for (int t = 0; t < 3; ++t) {
        fill_normal(grad, 30 + t, "grad");
        sgd.step(0.01f);
      }
      omp_set_num_threads(saved);
      results.push_back(bits(master));
    }
    EXPECT_TRUE(results[0] == results[1]) << "variant " << variant;
  }
}

TEST(Sgd, ShardsOfOneTwoAndThreeRanksEqualTheUnshardedUpdateBitwise) {
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    const SgdOptions o = make_options(variant > 0 ? 0.9f : 0.0f, variant == 2, 0.1f);
    testing::expect_sharding_invariant(
        testing::model_like_layout(), 3,
        [&](std::vector<ShardView> views) { return std::make_unique<Sgd>(std::move(views), o); },
        [&](std::vector<Tensor> params, std::vector<bool> decay) {
          return std::make_unique<Sgd>(std::move(params), std::move(decay), o);
        });
  }
}

TEST(Sgd, MomentumStateIsEagerAndPlainSgdHasNone) {
  MemoryTracker tracker;
  CpuAllocator allocator(&tracker);
  Tensor master = flat(allocator, 10, "master"), grad = flat(allocator, 10, "grad");
  {
    Sgd plain({ShardView{"u", master, grad, {{0, 10, true}}}}, SgdOptions{});
    EXPECT_EQ(tracker.current(MemoryCategory::kOptimizerState), 0u);
    EXPECT_TRUE(plain.state_dict().empty());
  }
  Sgd momentum({ShardView{"u", master, grad, {{0, 10, true}}}}, make_options(0.9f, true, 0));
  EXPECT_EQ(tracker.current(MemoryCategory::kOptimizerState), 40u);
  ASSERT_EQ(momentum.state_dict().size(), 1u);
  EXPECT_EQ(momentum.state_dict()[0].first, "u.momentum_buffer");
}

TEST(Sgd, RejectsNesterovWithoutMomentum) {
  CpuAllocator allocator(nullptr);
  Tensor master = flat(allocator, 4, "master"), grad = flat(allocator, 4, "grad");
  try {
    Sgd sgd({ShardView{"u", master, grad, {}}}, make_options(0.0f, true, 0.0f));
    FAIL() << "nesterov without momentum was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("nesterov needs momentum"), std::string::npos);
  }
}

}  // namespace
}  // namespace zs::optim
