// The small transformer end to end: a 2-layer model fits a tiny fixed batch (the loss falls to
// near zero) in fp32, and its parameter initialization is a pure function of (seed, name).
#include "models/transformer.h"

#include <gtest/gtest.h>

#include "optim/adamw.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/rng.h"

namespace zs::models {
namespace {

TEST(Transformer, TwoLayersFitATinyFixedBatch) {
  MemoryTracker tracker;
  CpuAllocator allocator(&tracker);
  TransformerConfig config;
  config.vocab_size = 32;
  config.context = 12;
  config.width = 32;
  config.n_head = 4;
  config.n_layer = 2;
  Transformer model(config, allocator);
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
  for (const auto& p : model.parameters()) {
    params.push_back(p.tensor);
    decay.push_back(p.decay);
  }
  optim::AdamWOptions options;
  optim::AdamW adam(params, decay, options);
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
  // Tied head: the token embedding received gradient from both uses (one buffer).
  EXPECT_EQ(model.parameters()[0].name, "wte");
  EXPECT_TRUE(model.parameters()[0].tensor.grad().defined());
}

TEST(Transformer, InitIsAPureFunctionOfSeedAndName) {
  CpuAllocator allocator(nullptr);
  TransformerConfig config;
  config.n_layer = 1;
  Transformer a(config, allocator), b(config, allocator);
  config.seed = 2;
  Transformer c(config, allocator);
  const Tensor& qa = a.parameters()[4].tensor;  // blocks.0.attn.qkv.weight
  EXPECT_EQ(a.parameters()[4].name, "blocks.0.attn.qkv.weight");
  EXPECT_EQ(qa.to_vector(), b.parameters()[4].tensor.to_vector());
  EXPECT_NE(qa.to_vector(), c.parameters()[4].tensor.to_vector());
  // Element i equals normal(key, i) * 0.02 on its own: any slice can be generated alone.
  const std::vector<float> values = qa.to_vector();
  for (uint64_t i : {uint64_t{0}, uint64_t{17}, uint64_t{values.size() - 1}}) {
    EXPECT_EQ(values[i], normal(rng_key(1, "blocks.0.attn.qkv.weight"), i, 0.0f, 0.02f));
  }
}

TEST(Transformer, RejectsBadConfigsAndInputs) {
  CpuAllocator allocator(nullptr);
  TransformerConfig config;
  config.width = 30;
  config.n_head = 4;
  EXPECT_THROW(Transformer(config, allocator), InvalidArgument);
  config.width = 32;
  config.context = 4;
  Transformer model(config, allocator);
  Tensor ids = Tensor::zeros({1, 5}, DType::kI32, allocator, "ids");
  EXPECT_THROW(model.forward(ids), InvalidArgument);  // longer than the context
  Tensor fids = Tensor::zeros({1, 3}, DType::kF32, allocator, "ids");
  EXPECT_THROW(model.forward(fids), InvalidArgument);
}

}  // namespace
}  // namespace zs::models
