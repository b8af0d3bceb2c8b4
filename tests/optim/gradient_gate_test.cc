// The gradient gate of a shard view (runtime/shard_view.h) as optim's consumers use it: an
// optimizer asks every gate before it updates anything (so a refused step changes no master and
// no step count), asks each gate once, and reports the step afterwards; clipping and norms ask
// for read access, and so does the loss scaler's unscaling; slice_view keeps the gate; views
// without a gate are not checked.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/loss_scaler.h"
#include "optim/sgd.h"
#include "optim/shard_view.h"
#include "optim_test_util.h"
#include "runtime/allocator.h"
#include "runtime/error.h"

namespace zs::optim {
namespace {

using testing::flat;

// Opens or closes each use, and counts what it was asked.
struct FakeGate : GradientGate {
  bool readable = true, steppable = true;
  mutable int checks = 0;
  mutable std::vector<std::string> consumers;
  int steps = 0;
  void check(GradientUse use, const char* consumer) const override {
    ++checks;
    consumers.push_back(consumer);
    ZS_CHECK(use == GradientUse::kStep ? steppable : readable, consumer, ": gate closed");
  }
  void stepped() override { ++steps; }
};

struct GatedViews {
  GatedViews(CpuAllocator& allocator, const std::string& prefix)
      : gate(std::make_shared<FakeGate>()) {
    for (int i = 0; i < 3; ++i) {
      const std::string name = prefix + std::to_string(i);
      ShardView view(name, flat(allocator, 8, name + " master"), flat(allocator, 8, name + " grad"),
                     {{0, 8, true}}, gate);
      view.master.fill(1.0f);
      view.grad.fill(0.5f);
      views.push_back(view);
    }
  }
  std::shared_ptr<FakeGate> gate;
  std::vector<ShardView> views;
};

TEST(GradientGate, AnOptimizerAsksEachGateOnceBeforeUpdatingAndReportsTheStep) {
  CpuAllocator allocator(nullptr);
  GatedViews a(allocator, "a"), b(allocator, "b");
  std::vector<ShardView> views = a.views;
  views.insert(views.end(), b.views.begin(), b.views.end());
  AdamW adam(views, AdamWOptions{});
  adam.step(0.1f);
  EXPECT_EQ(a.gate->checks, 1);
  EXPECT_EQ(b.gate->checks, 1);
  EXPECT_EQ(a.gate->steps, 1);
  EXPECT_EQ(b.gate->steps, 1);
  EXPECT_EQ(a.gate->consumers, (std::vector<std::string>{"AdamW"}));
  EXPECT_NE(a.views[0].master.to_vector()[0], 1.0f);

  // The second gate refuses: nothing changes, not even the first gate's views.
  const std::vector<float> before = a.views[0].master.to_vector();
  b.gate->steppable = false;
  EXPECT_THROW(adam.step(0.1f), InvalidArgument);
  EXPECT_EQ(adam.steps(), 1);
  EXPECT_EQ(a.views[0].master.to_vector(), before);
  EXPECT_EQ(a.gate->steps, 1);

  Sgd sgd(a.views, SgdOptions{});
  a.gate->steppable = false;
  EXPECT_THROW(sgd.step(0.1f), InvalidArgument);
  EXPECT_EQ(sgd.steps(), 0);
}

TEST(GradientGate, ClippingAsksToReadAndSliceViewKeepsTheGate) {
  CpuAllocator allocator(nullptr);
  GatedViews a(allocator, "a");
  EXPECT_DOUBLE_EQ(grad_sum_of_squares(a.views), 3 * 8 * 0.25);
  scale_grads(a.views, 0.5f);
  EXPECT_EQ(a.views[0].grad.to_vector()[0], 0.25f);
  const ShardView slice = slice_view(a.views[0], 2, 6);
  EXPECT_EQ(slice.gate, a.views[0].gate);
  a.gate->readable = false;
  EXPECT_THROW(grad_sum_of_squares(slice), InvalidArgument);
  EXPECT_THROW(grad_sum_of_squares(a.views), InvalidArgument);
  EXPECT_THROW(scale_grads(a.views, 0.5f), InvalidArgument);
  EXPECT_EQ(a.views[0].grad.to_vector()[0], 0.25f);
  // Without a gate nothing is asked.
  ShardView plain = a.views[0];
  plain.gate = nullptr;
  EXPECT_DOUBLE_EQ(grad_sum_of_squares(plain), 8 * 0.0625);
}

TEST(GradientGate, LossScalerUnscalingAsksToReadFirst) {
  CpuAllocator allocator(nullptr);
  GatedViews a(allocator, "a");
  EXPECT_FALSE(unscale_and_check(a.views, 0.5f));
  EXPECT_EQ(a.views[0].grad.to_vector()[0], 0.25f);
  EXPECT_EQ(a.gate->consumers, (std::vector<std::string>{"unscale_and_check"}));
  a.gate->readable = false;
  EXPECT_THROW(unscale_and_check(a.views, 0.5f), InvalidArgument);
  EXPECT_EQ(a.views[0].grad.to_vector()[0], 0.25f);  // refused before touching anything
}

}  // namespace
}  // namespace zs::optim
