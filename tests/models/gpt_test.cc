// The GPT model end to end, unsharded: a 2-layer model fits a tiny fixed batch (the loss falls
// to near zero) in fp32, loss() fuses the head over chunks of the logits (the unfused loss, close
// gradients, one chunk of logits held), and bad inputs are clear errors.
#include "models/gpt.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cross_entropy.h"
#include "ops/linear_cross_entropy.h"
#include "optim/adamw.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/rng.h"

namespace zs::models {
namespace {

// Token ids in [0, vocab) drawn from `key`, int32 of `shape`.
Tensor random_tokens(const Shape& shape, int64_t vocab, const RngKey& key, Allocator& allocator) {
  Tensor t = Tensor::empty(shape, DType::kI32, allocator, "tokens");
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.data<int32_t>()[i] = static_cast<int32_t>(random_bits(key, static_cast<uint64_t>(i)) % vocab);
  }
  return t;
}

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
  Tensor ids = random_tokens({batch, seq}, 32, rng_key(3, "ids"), allocator);
  Tensor targets = random_tokens({batch, seq}, 32, rng_key(3, "targets"), allocator);
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

TEST(Gpt, LossFusesTheHeadOverChunksOfTheLogits) {
  // A vocabulary of 131072 makes chunks of 128 rows: 192 positions are a chunk and a shorter one.
  MemoryTracker tracker;
  CpuAllocator allocator(&tracker);
  GptConfig config;
  config.vocab_size = 131072;
  config.context = 48;
  config.width = 16;
  config.n_head = 2;
  config.n_layer = 1;
  Gpt model(config);
  materialize(model, allocator, 1);
  const int64_t batch = 4, seq = 48, rows = batch * seq, vocab = config.vocab_size;
  const int64_t chunk = ops::head_chunk_rows(vocab);
  ASSERT_EQ(chunk, 128);
  Tensor ids = random_tokens({batch, seq}, vocab, rng_key(4, "ids"), allocator);
  Tensor targets = random_tokens({batch, seq}, vocab, rng_key(4, "targets"), allocator);
  targets.data<int32_t>()[40] = -100;  // an ignored position

  // Loss, every parameter's gradient and the activation peak of one forward and backward.
  struct Run {
    float loss = 0;
    std::vector<std::vector<float>> grads;
    size_t activation_peak = 0;
  };
  auto run = [&](bool fused) {
    for (Parameter* p : model.parameters()) p->tensor().set_grad(Tensor());
    tracker.reset_peaks();
    Tensor loss = fused ? model.loss(ids, targets)
                        : ops::cross_entropy(model(ids), targets.view({-1}));  // the logits
    Run r;
    r.loss = loss.item();
    backward(loss);
    r.activation_peak = tracker.peak(MemoryCategory::kActivations);
    for (Parameter* p : model.parameters()) r.grads.push_back(p->tensor().grad().to_vector());
    return r;
  };
  const Run unfused = run(false);
  const Run fused = run(true);
  // Each row's logits and the mean are computed as the unfused ops do; the tied embedding's
  // gradient is summed chunk by chunk, and what flows back from the head rounds accordingly.
  EXPECT_EQ(fused.loss, unfused.loss);
  ASSERT_EQ(fused.grads.size(), unfused.grads.size());
  for (size_t p = 0; p < fused.grads.size(); ++p) {
    float scale = 0;
    for (float g : unfused.grads[p]) scale = std::max(scale, std::fabs(g));
    for (size_t i = 0; i < fused.grads[p].size(); ++i) {
      ASSERT_NEAR(fused.grads[p][i], unfused.grads[p][i], 1e-5f * scale + 1e-9f)
          << model.parameters()[p]->name() << " element " << i;
    }
  }
  // The head is the peak either way: the unfused one holds all rows of logits and their
  // gradient, the fused one a chunk of each plus the gradient of the final layernorm's output.
  const size_t logit_row = static_cast<size_t>(vocab) * 4;
  const size_t dh = static_cast<size_t>(rows * config.width) * 4;
  EXPECT_EQ(unfused.activation_peak - fused.activation_peak,
            2 * static_cast<size_t>(rows - chunk) * logit_row - dh);
  // operator() still gives the logits once loss() is done.
  EXPECT_EQ(model(ids).shape(), (Shape{rows, vocab}));
  current_tape().clear();
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
