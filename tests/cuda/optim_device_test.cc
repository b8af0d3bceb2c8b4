// The optimizer-side loops of optim/ on CUDA views against the same calls on CPU views (label
// gpu; skips with "no CUDA device: skipped (compiled only)" where there is no GPU).
//
// Every comparison is bit for bit: AdamW and SGD update each element with the same fused
// operations (ops/math/adamw.h, sgd.h), the scaling and unscaling are single IEEE multiplies,
// and the gradient-norm sum of squares adds the same double terms in the same order on both
// devices (ops/math/norm.h). The views have padding between segments and a decay mask, so the
// per-segment launches and the covered ranges are exercised, and enough elements for several
// norm blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/loss_scaler.h"
#include "optim/sgd.h"
#include "runtime/rng.h"
#include "tests/cuda/cuda_test_util.h"

namespace zs {
namespace {

using optim::Segment;
using optim::ShardView;

constexpr int64_t kNumel = 3 * 4096 + 1234;  // several norm blocks, a ragged last one

std::vector<float> random_values(uint64_t seed, int64_t n, float scale) {
  std::vector<float> values(static_cast<size_t>(n));
  const RngKey key{seed, 7, 0};
  for (int64_t i = 0; i < n; ++i) {
    values[static_cast<size_t>(i)] = scale * (2.0f * uniform(key, static_cast<uint64_t>(i)) - 1.0f);
  }
  return values;
}

// Segments with a gap of padding, a decay and a no-decay part, and a tail of padding.
std::vector<Segment> segments() {
  return {{0, 5000, true}, {5000, 9001, false}, {9100, kNumel - 17, true}};
}

class OptimDeviceTest : public testing::CudaTest {
 protected:
  // The same master and gradient values as a CPU view and a CUDA view.
  void make_views(uint64_t seed) {
    const std::vector<float> master = random_values(seed, kNumel, 1.0f);
    const std::vector<float> grad = random_values(seed + 1, kNumel, 0.1f);
    cpu_ = {"cpu view", Tensor::empty({kNumel}, DType::kF32, host_allocator_),
            Tensor::empty({kNumel}, DType::kF32, host_allocator_), segments()};
    cpu_.master.copy_from(master);
    cpu_.grad.copy_from(grad);
    gpu_ = {"gpu view", upload(cpu_.master), upload(cpu_.grad), segments()};
  }
  static void expect_bits(const Tensor& cpu, const Tensor& gpu, const char* what) {
    const std::vector<float> a = cpu.to_vector();
    const std::vector<float> b = gpu.to_vector();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      uint32_t x, y;
      std::memcpy(&x, &a[i], 4);
      std::memcpy(&y, &b[i], 4);
      ASSERT_EQ(x, y) << what << " differs at element " << i << ": cpu " << a[i] << ", cuda "
                      << b[i];
    }
  }

  ShardView cpu_;
  ShardView gpu_;
};

TEST_F(OptimDeviceTest, AdamWStepsAreBitwiseEqualToTheCpu) {
  make_views(11);
  optim::AdamWOptions options;
  options.weight_decay = 0.1f;
  optim::AdamW cpu_opt({cpu_}, options);
  optim::AdamW gpu_opt({gpu_}, options);
  for (int step = 0; step < 3; ++step) {
    cpu_opt.step(1e-3f);
    gpu_opt.step(1e-3f);
  }
  expect_bits(cpu_.master, gpu_.master, "AdamW master");
}

TEST_F(OptimDeviceTest, SgdWithNesterovMomentumIsBitwiseEqualToTheCpu) {
  make_views(21);
  optim::SgdOptions options;
  options.momentum = 0.9f;
  options.nesterov = true;
  options.weight_decay = 0.01f;
  optim::Sgd cpu_opt({cpu_}, options);
  optim::Sgd gpu_opt({gpu_}, options);
  for (int step = 0; step < 3; ++step) {
    cpu_opt.step(0.05f);
    gpu_opt.step(0.05f);
  }
  expect_bits(cpu_.master, gpu_.master, "SGD master");
}

TEST_F(OptimDeviceTest, GradSumOfSquaresIsTheSameDouble) {
  make_views(31);
  const double cpu = optim::grad_sum_of_squares(cpu_);
  const double gpu = optim::grad_sum_of_squares(gpu_);
  EXPECT_EQ(cpu, gpu) << "cpu " << cpu << ", cuda " << gpu;
  // Padding is not counted: a huge value there changes nothing.
  std::vector<float> grad = cpu_.grad.to_vector();
  grad[9050] = 1e30f;
  gpu_.grad.copy_from(grad);
  EXPECT_EQ(optim::grad_sum_of_squares(gpu_), cpu);
}

TEST_F(OptimDeviceTest, ScaleGradsIsBitwiseEqualToTheCpu) {
  make_views(41);
  optim::scale_grads({cpu_}, 0.37f);
  optim::scale_grads({gpu_}, 0.37f);
  expect_bits(cpu_.grad, gpu_.grad, "scaled gradient");
}

TEST_F(OptimDeviceTest, UnscaleAndCheckAgreesOnValuesAndOverflow) {
  make_views(51);
  EXPECT_FALSE(optim::unscale_and_check(cpu_, 1.0f / 1024.0f));
  EXPECT_FALSE(optim::unscale_and_check(gpu_, 1.0f / 1024.0f));
  expect_bits(cpu_.grad, gpu_.grad, "unscaled gradient");
  std::vector<float> grad = gpu_.grad.to_vector();
  grad[4097] = std::numeric_limits<float>::infinity();
  gpu_.grad.copy_from(grad);
  EXPECT_TRUE(optim::unscale_and_check(gpu_, 0.5f));
  // Padding is neither unscaled nor checked.
  grad[4097] = 0.0f;
  grad[9050] = std::numeric_limits<float>::quiet_NaN();
  gpu_.grad.copy_from(grad);
  EXPECT_FALSE(optim::unscale_and_check(gpu_, 0.5f));
}

}  // namespace
}  // namespace zs
