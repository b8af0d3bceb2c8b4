// The dynamic loss scaler: growth after the interval, backoff with hysteresis, the min/max
// clamps, one agreed decision for every rank (an overflow on one rank skips the step on all),
// checkpoint state; and the fused unscale + inf/NaN check.
#include "optim/loss_scaler.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "comm/local/local_backend.h"
#include "optim_test_util.h"
#include "runtime/allocator.h"

namespace zs::optim {
namespace {

using comm::Communicator;
using comm::run_local_ranks;
using testing::bits;
using testing::fill_normal;
using testing::flat;

LossScalerOptions small_options() {
  LossScalerOptions o;
  o.growth_interval = 3;
  o.hysteresis = 2;
  return o;
}

TEST(DynamicLossScaler, DefaultsAreTheUsualOnes) {
  const LossScalerOptions o;
  EXPECT_EQ(o.initial_scale, 65536.0f);
  EXPECT_EQ(o.growth_factor, 2.0f);
  EXPECT_EQ(o.backoff_factor, 0.5f);
  EXPECT_EQ(o.growth_interval, 2000);
  EXPECT_EQ(o.hysteresis, 2);
  DynamicLossScaler scaler;
  EXPECT_EQ(scaler.scale(), 65536.0f);
  EXPECT_EQ(scaler.inv_scale(), 1.0f / 65536.0f);
}

TEST(DynamicLossScaler, GrowsAfterTheIntervalOfGoodSteps) {
  run_local_ranks(1, [](Communicator& comm) {
    DynamicLossScaler scaler(small_options());
    EXPECT_FALSE(scaler.update(false, comm));
    EXPECT_FALSE(scaler.update(false, comm));
    EXPECT_EQ(scaler.scale(), 65536.0f);
    EXPECT_FALSE(scaler.update(false, comm));  // third good step: grows
    EXPECT_EQ(scaler.scale(), 131072.0f);
    for (int i = 0; i < 3; ++i) scaler.update(false, comm);
    EXPECT_EQ(scaler.scale(), 262144.0f);
    // An overflow restarts the run of good steps.
    scaler.update(false, comm);
    scaler.update(false, comm);
    EXPECT_TRUE(scaler.update(true, comm));
    scaler.update(false, comm);
    scaler.update(false, comm);
    EXPECT_EQ(scaler.scale(), 262144.0f);
    scaler.update(false, comm);
    EXPECT_EQ(scaler.scale(), 524288.0f);
  });
}

TEST(DynamicLossScaler, BacksOffAfterHysteresisConsecutiveOverflows) {
  run_local_ranks(1, [](Communicator& comm) {
    DynamicLossScaler scaler(small_options());
    EXPECT_TRUE(scaler.update(true, comm));  // first overflow: skipped, scale kept
    EXPECT_EQ(scaler.scale(), 65536.0f);
    EXPECT_TRUE(scaler.update(true, comm));  // second consecutive: backs off
    EXPECT_EQ(scaler.scale(), 32768.0f);
    EXPECT_TRUE(scaler.update(true, comm));  // still overflowing: backs off again
    EXPECT_EQ(scaler.scale(), 16384.0f);
    EXPECT_FALSE(scaler.update(false, comm));  // a good step resets the count
    EXPECT_TRUE(scaler.update(true, comm));
    EXPECT_EQ(scaler.scale(), 16384.0f);
    EXPECT_FALSE(scaler.update(false, comm));
    EXPECT_EQ(scaler.state().skipped_steps, 4);
  });
}

TEST(DynamicLossScaler, HysteresisOneBacksOffAtOnceAndScalesStayInTheirBounds) {
  run_local_ranks(1, [](Communicator& comm) {
    LossScalerOptions o = small_options();
    o.hysteresis = 1;
    o.initial_scale = 4.0f;
    o.min_scale = 2.0f;
    o.max_scale = 8.0f;
    o.growth_interval = 1;
    DynamicLossScaler scaler(o);
    EXPECT_TRUE(scaler.update(true, comm));
    EXPECT_EQ(scaler.scale(), 2.0f);
    EXPECT_TRUE(scaler.update(true, comm));
    EXPECT_EQ(scaler.scale(), 2.0f);  // min_scale
    scaler.update(false, comm);
    scaler.update(false, comm);
    scaler.update(false, comm);
    EXPECT_EQ(scaler.scale(), 8.0f);  // max_scale
  });
}

TEST(DynamicLossScaler, AnOverflowOnOneRankMakesEveryRankSkip) {
  constexpr int kWorld = 3;
  for (int culprit = 0; culprit < kWorld; ++culprit) {
    std::vector<std::vector<char>> skipped(kWorld);
    std::vector<std::vector<float>> scales(kWorld);
    run_local_ranks(kWorld, [&](Communicator& comm) {
      DynamicLossScaler scaler(small_options());
      const int r = comm.rank();
      // Steps 1 and 2 overflow on `culprit` only; step 4 on every rank.
      for (int step = 0; step < 6; ++step) {
        const bool local_inf = (step == 1 || step == 2) ? r == culprit : step == 4;
        const uint64_t before = comm.calls_issued();
        skipped[r].push_back(scaler.update(local_inf, comm));
        EXPECT_EQ(comm.calls_issued() - before, 1u) << "one collective per update";
        scales[r].push_back(scaler.scale());
      }
    });
    const std::vector<char> expected_skips = {0, 1, 1, 0, 1, 0};
    const std::vector<float> expected_scales = {65536, 65536, 32768, 32768, 32768, 32768};
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_EQ(skipped[r], expected_skips) << "rank " << r << ", overflow on rank " << culprit;
      EXPECT_EQ(scales[r], expected_scales) << "rank " << r << ", overflow on rank " << culprit;
    }
  }
}

TEST(DynamicLossScaler, StateRoundTripsAndBadStateIsRejected) {
  run_local_ranks(1, [](Communicator& comm) {
    DynamicLossScaler a(small_options());
    a.update(false, comm);
    a.update(true, comm);
    a.update(false, comm);
    DynamicLossScaler b(small_options());
    b.load_state(a.state());
    for (const bool inf : {false, false, true, true, false}) {
      EXPECT_EQ(a.update(inf, comm), b.update(inf, comm));
      EXPECT_EQ(a.scale(), b.scale());
    }
    LossScalerState bad = a.state();
    bad.scale = 0.0f;
    EXPECT_THROW(b.load_state(bad), InvalidArgument);
  });
  LossScalerOptions bad;
  bad.backoff_factor = 1.5f;
  EXPECT_THROW(DynamicLossScaler{bad}, InvalidArgument);
  bad = LossScalerOptions{};
  bad.hysteresis = 0;
  EXPECT_THROW(DynamicLossScaler{bad}, InvalidArgument);
}

TEST(UnscaleAndCheck, UnscalesCoveredElementsAndFindsInfAndNaN) {
  CpuAllocator allocator(nullptr);
  Tensor master = flat(allocator, 12, "master"), grad = flat(allocator, 12, "grad");
  for (int i = 0; i < 12; ++i) grad.data<float>()[i] = 1024.0f * (i + 1);
  grad.data<float>()[11] = std::numeric_limits<float>::quiet_NaN();  // padding: ignored
  const ShardView view{"u", master, grad, {{0, 4, true}, {4, 10, false}}};
  EXPECT_FALSE(unscale_and_check(view, 1.0f / 1024.0f));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(grad.data<float>()[i], i + 1.0f);
  EXPECT_EQ(grad.data<float>()[10], 11.0f * 1024.0f);  // padding untouched
  grad.data<float>()[7] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(unscale_and_check(view, 0.5f));
  grad.data<float>()[7] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(unscale_and_check(view, 0.5f));
  // A finite gradient that overflows when unscaled by more than 1 counts too.
  grad.data<float>()[7] = 3e38f;
  EXPECT_TRUE(unscale_and_check(view, 4.0f));
}

TEST(UnscaleAndCheck, IsIndependentOfTheThreadCount) {
  CpuAllocator allocator(nullptr);
  for (const int64_t bad_at : {int64_t{-1}, int64_t{0}, int64_t{77777}, int64_t{99998}}) {
    std::vector<std::vector<uint32_t>> results;
    std::vector<bool> found;
    for (int threads : {1, 2}) {
      const int saved = omp_get_max_threads();
      omp_set_num_threads(threads);
      Tensor master = flat(allocator, 100000, "master"), grad = flat(allocator, 100000, "grad");
      fill_normal(grad, 3, "grad", 1000.0f);
      if (bad_at >= 0) grad.data<float>()[bad_at] = std::numeric_limits<float>::infinity();
      found.push_back(unscale_and_check(
          {{"u", master, grad, {{0, 50000, true}, {50000, 99999, false}}}}, 1.0f / 65536.0f));
      omp_set_num_threads(saved);
      results.push_back(bits(grad));
    }
    EXPECT_EQ(found[0], bad_at >= 0) << bad_at;
    EXPECT_EQ(found[0], found[1]) << bad_at;
    EXPECT_TRUE(results[0] == results[1]) << bad_at;
  }
}

}  // namespace
}  // namespace zs::optim
