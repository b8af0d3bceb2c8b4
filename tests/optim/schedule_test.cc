// Learning-rate schedules at warmup start and end, mid-decay and the end, in closed form.
#include "optim/schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "runtime/error.h"

namespace zs::optim {
namespace {

TEST(Schedule, WarmupThenCosine) {
  const LrSchedule s = LrSchedule::warmup_cosine(1.0f, 0.1f, 10, 110);
  EXPECT_FLOAT_EQ(s.lr(0), 0.1f);  // peak·1/warmup
  EXPECT_FLOAT_EQ(s.lr(4), 0.5f);
  EXPECT_FLOAT_EQ(s.lr(9), 1.0f);   // warmup ends at the peak
  EXPECT_FLOAT_EQ(s.lr(10), 1.0f);  // decay starts at the peak
  EXPECT_NEAR(s.lr(35), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 4)), 1e-6);
  EXPECT_NEAR(s.lr(60), 0.55f, 1e-6);  // halfway: (peak + min)/2
  EXPECT_NEAR(s.lr(109), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 99 / 100)), 1e-6);
  EXPECT_FLOAT_EQ(s.lr(110), 0.1f);
  EXPECT_FLOAT_EQ(s.lr(500), 0.1f);
}

TEST(Schedule, WarmupThenLinear) {
  const LrSchedule s = LrSchedule::warmup_linear(2.0f, 0.0f, 4, 104);
  EXPECT_FLOAT_EQ(s.lr(0), 0.5f);
  EXPECT_FLOAT_EQ(s.lr(3), 2.0f);
  EXPECT_FLOAT_EQ(s.lr(4), 2.0f);
  EXPECT_FLOAT_EQ(s.lr(29), 1.5f);  // a quarter of the way
  EXPECT_FLOAT_EQ(s.lr(54), 1.0f);  // halfway
  EXPECT_FLOAT_EQ(s.lr(103), 0.02f);
  EXPECT_FLOAT_EQ(s.lr(104), 0.0f);
}

TEST(Schedule, ConstantWithAndWithoutWarmup) {
  const LrSchedule flat = LrSchedule::constant(3e-4f);
  EXPECT_FLOAT_EQ(flat.lr(0), 3e-4f);
  EXPECT_FLOAT_EQ(flat.lr(1000000), 3e-4f);
  const LrSchedule warm = LrSchedule::constant(1.0f, 5);
  EXPECT_FLOAT_EQ(warm.lr(0), 0.2f);
  EXPECT_FLOAT_EQ(warm.lr(4), 1.0f);
  EXPECT_FLOAT_EQ(warm.lr(5), 1.0f);
  EXPECT_FLOAT_EQ(warm.lr(99999), 1.0f);
}

TEST(Schedule, NoWarmupStartsAtThePeak) {
  const LrSchedule s = LrSchedule::warmup_cosine(1.0f, 0.0f, 0, 10);
  EXPECT_FLOAT_EQ(s.lr(0), 1.0f);
  EXPECT_NEAR(s.lr(5), 0.5f, 1e-7);
  EXPECT_FLOAT_EQ(s.lr(10), 0.0f);
}

TEST(Schedule, TheOldFunctionIsAThinWrapper) {
  EXPECT_FLOAT_EQ(warmup_cosine_lr(0, 10, 110, 1.0f, 0.1f), 0.1f);
  EXPECT_FLOAT_EQ(warmup_cosine_lr(9, 10, 110, 1.0f, 0.1f), 1.0f);
  EXPECT_FLOAT_EQ(warmup_cosine_lr(10, 10, 110, 1.0f, 0.1f), 1.0f);
  EXPECT_NEAR(warmup_cosine_lr(60, 10, 110, 1.0f, 0.1f), 0.55f, 1e-6);
  EXPECT_FLOAT_EQ(warmup_cosine_lr(110, 10, 110, 1.0f, 0.1f), 0.1f);
  EXPECT_FLOAT_EQ(warmup_cosine_lr(500, 10, 110, 1.0f, 0.1f), 0.1f);
  // A run shorter than its warmup never leaves warmup (as before).
  EXPECT_FLOAT_EQ(warmup_cosine_lr(4, 20, 10, 1.0f, 0.1f), 0.25f);
}

TEST(Schedule, RejectsInconsistentSettings) {
  EXPECT_THROW(LrSchedule::warmup_cosine(1.0f, 2.0f, 0, 10), InvalidArgument);   // min > peak
  EXPECT_THROW(LrSchedule::warmup_linear(1.0f, 0.0f, 20, 10), InvalidArgument);  // total < warmup
  EXPECT_THROW(LrSchedule::constant(-1.0f), InvalidArgument);
  EXPECT_THROW(LrSchedule::constant(1.0f).lr(-1), InvalidArgument);
}

}  // namespace
}  // namespace zs::optim
