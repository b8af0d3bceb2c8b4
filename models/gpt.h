// A GPT-style causal language model written as Modules: token and position embeddings,
// pre-LN Blocks, a final LayerNorm and an LM head tied to the token embedding (one parameter,
// one gradient). Parameter names follow "wte", "wpe", "blocks.<i>.…", "ln_f.…".
//
// Set `causal = false` for a bidirectional encoder of the same shape. Not thread-safe: one
// instance per rank.
#pragma once

#include <cstdint>
#include <string>

#include "models/layers.h"
#include "models/module.h"

namespace zs::models {

struct GptConfig {
  int64_t vocab_size = 256;
  int64_t context = 64;
  int64_t width = 64;  // C
  int64_t n_head = 4;
  int64_t n_layer = 2;
  bool causal = true;
};

// "layers 12, width 768, heads 12, vocab 50257, context 1024", for logs and messages.
std::string describe(const GptConfig& config);

class Gpt : public Module {
 public:
  explicit Gpt(const GptConfig& config);

  // Mean next-token cross-entropy: ids and targets [B, T] int32 (targets -100 = ignore). The
  // head and the loss are fused (ops/linear_cross_entropy.h): the logits are never held whole.
  // The loss equals cross_entropy of the logits operator() returns; the gradients are the
  // unfused ones where B·T fits one chunk, and close to them otherwise.
  Tensor loss(const Tensor& ids, const Tensor& targets);
  Sequential& blocks() { return blocks_; }
  const GptConfig& config() const { return config_; }
  // FLOPs of one forward+backward over batch × seq tokens (matmuls and attention).
  double train_flops(int64_t batch, int64_t seq) const;

 protected:
  // Logits [B·T, vocab] for ids [B, T] (int32); the loss [1] when called from loss().
  Tensor forward(const Tensor& ids) override;

 private:
  GptConfig config_;
  Parameter& wte_;
  Parameter& wpe_;
  Sequential& blocks_;
  LayerNorm& ln_f_;
  Tensor loss_targets_;  // set by loss() for the forward it runs, then cleared
};

}  // namespace zs::models
