// The GPT model end to end, unsharded: a 2-layer model fits a tiny fixed batch (the loss falls
// to near zero) in fp32, and bad inputs are clear errors.
#include "models/gpt.h"

#include <gtest/gtest.h>

#include <cmath>

#include "optim/adamw.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/rng.h"

namespace zs::models {
namespace {

TEST(Gpt, TwoLayersFitATinyFixedBatch) {
  MemoryTracker tracker;
  CpuAllocator allocator(&tracker);
  GptConfig config;
  config.vocab_size = 32;
  config.context = 12;
  config.width = 32;
  config.n_head = 4;
  config.n_layer = 2;
  Gpt model(config);
  materialize(model, allocator, 1);
  const int64_t batch = 3, seq = 11;  // odd sizes on purpose
  Tensor ids = Tensor::empty({batch, seq}, DType::kI32, allocator, "ids");
  Tensor targets = Tensor::empty({batch, seq}, DType::kI32, allocator, "targets");
  for (int64_t i = 0; i < batch * seq; ++i) {
    ids.data<int32_t>()[i] = static_cast<int32_t>(random_bits(rng_key(3, "ids"), i) % 32);
    targets.data<int32_t>()[i] = static_cast<int32_t>(random_bits(rng_key(3, "targets"), i) % 32);
  }
  targets.data<int32_t>()[5] = -100;  // an ignored position
  std::vector<Tensor> params;
  std::vector<bool> decay;
  for (Parameter* p : model.parameters()) {
    params.push_back(p->tensor());
    decay.push_back(p->decay());
  }
  optim::AdamW adam(params, decay, optim::AdamWOptions{});
  float first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    adam.zero_grad();
    Tensor loss = model.loss(ids, targets);
    backward(loss);
    adam.step(1e-2f);
    last = loss.item();
    if (step == 0) first = last;
  }
  EXPECT_NEAR(first, std::log(32.0f), 0.3f);  // near-uniform predictions at init
  EXPECT_LT(last, 0.05f) << "first loss " << first;
  EXPECT_EQ(current_tape().size(), 0u);
  EXPECT_EQ(tracker.current(MemoryCategory::kActivations), 0u);  // all freed after backward
}

TEST(Gpt, RejectsBadInputs) {
  CpuAllocator allocator(nullptr);
  GptConfig config;
  config.width = 32;
  config.context = 4;
  Gpt model(config);
  materialize(model, allocator, 1);
  Tensor long_ids = Tensor::zeros({1, 5}, DType::kI32, allocator, "ids");
  EXPECT_THROW(model.loss(long_ids, long_ids), InvalidArgument);  // longer than the context
  Tensor float_ids = Tensor::zeros({1, 3}, DType::kF32, allocator, "ids");
  Tensor int_ids = Tensor::zeros({1, 3}, DType::kI32, allocator, "ids");
  EXPECT_THROW(model.loss(float_ids, int_ids), InvalidArgument);
  Tensor short_targets = Tensor::zeros({1, 2}, DType::kI32, allocator, "targets");
  EXPECT_THROW(model.loss(int_ids, short_targets), InvalidArgument);
  current_tape().clear();
}

}  // namespace
}  // namespace zs::models
