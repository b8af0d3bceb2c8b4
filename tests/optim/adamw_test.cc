// AdamW over whole parameters against the closed-form first steps, decay masks, and the
// warmup + cosine schedule.
#include "optim/adamw.h"

#include <gtest/gtest.h>

#include <cmath>

#include "runtime/allocator.h"

namespace zs::optim {
namespace {

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

TEST(AdamW, StateIsChargedAsOptimizerState) {
  MemoryTracker tracker;
  CpuAllocator allocator(&tracker);
  Tensor w = Tensor::zeros({100}, DType::kF32, allocator, "w").set_requires_grad(true);
  w.set_grad(Tensor::zeros({100}, DType::kF32, allocator, "gw"));
  AdamW adam({w}, {true}, AdamWOptions{});
  adam.step(1e-3f);
  EXPECT_EQ(tracker.current(MemoryCategory::kOptimizerState), 800u);  // m and v, fp32
}

TEST(AdamW, RejectsMismatchedMasksAndLowPrecisionParams) {
  CpuAllocator allocator(nullptr);
  Tensor w = Tensor::zeros({2}, DType::kF32, allocator, "w");
  Tensor h = Tensor::zeros({2}, DType::kF16, allocator, "h");
  EXPECT_THROW(AdamW({w}, {true, false}, AdamWOptions{}), InvalidArgument);
  EXPECT_THROW(AdamW({h}, {true}, AdamWOptions{}), InvalidArgument);
}

TEST(Schedule, WarmupThenCosine) {
  EXPECT_FLOAT_EQ(warmup_cosine_lr(0, 10, 110, 1.0f, 0.1f), 0.1f);
  EXPECT_FLOAT_EQ(warmup_cosine_lr(9, 10, 110, 1.0f, 0.1f), 1.0f);
  EXPECT_FLOAT_EQ(warmup_cosine_lr(10, 10, 110, 1.0f, 0.1f), 1.0f);
  EXPECT_NEAR(warmup_cosine_lr(60, 10, 110, 1.0f, 0.1f), 0.55f, 1e-6);
  EXPECT_FLOAT_EQ(warmup_cosine_lr(110, 10, 110, 1.0f, 0.1f), 0.1f);
  EXPECT_FLOAT_EQ(warmup_cosine_lr(500, 10, 110, 1.0f, 0.1f), 0.1f);
}

}  // namespace
}  // namespace zs::optim
