// A small GPT-style transformer written directly against the ops (no Module API yet): token
// and position embeddings, pre-LN blocks (causal self-attention + GELU MLP, residuals), a final
// layernorm and an LM head tied to the token embedding.
//
// It exists for the foundation's tests, benchmarks and the README's demo; the Module-based
// models of models/ (GPT-2 family, BERT-style classifier) replace it as the front door.
// Parameters are initialized from the counter-based RNG keyed by (seed, parameter name), so
// any slice of a parameter can be generated alone. Not thread-safe: one model per rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace zs::models {

struct TransformerConfig {
  int64_t vocab_size = 256;
  int64_t context = 64;
  int64_t width = 64;  // C
  int64_t n_head = 4;
  int64_t n_layer = 2;
  bool causal = true;
  uint64_t seed = 1;
  DType dtype = DType::kF32;
};

struct NamedParameter {
  std::string name;
  Tensor tensor;
  bool decay;  // weight decay applies (matrices), or not (biases, norms)
};

class Transformer {
 public:
  // Allocates and initializes the parameters on `allocator` (category parameters).
  Transformer(const TransformerConfig& config, Allocator& allocator);

  // Logits [B·T, vocab] for token ids [B, T] (int32).
  Tensor forward(const Tensor& ids) const;
  // Mean cross-entropy of next-token prediction: targets [B, T] (int32, -100 = ignore).
  Tensor loss(const Tensor& ids, const Tensor& targets) const;

  // One pre-LN block on x [B, T, C] (exposed for benchmarks and tests).
  Tensor block_forward(size_t layer, const Tensor& x) const;

  const std::vector<NamedParameter>& parameters() const { return params_; }
  int64_t num_parameters() const;
  const TransformerConfig& config() const { return config_; }

  // FLOPs of one forward+backward over B·T tokens (matmuls and attention; 3× forward).
  double train_flops(int64_t batch, int64_t seq) const;

 private:
  struct Block {
    Tensor ln1_g, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_g, ln2_b, fc_w, fc_b, out_w, out_b;
  };
  Tensor& add_param(const std::string& name, const Shape& shape, float init_std, float init_const,
                    bool decay, Allocator& allocator);

  TransformerConfig config_;
  std::vector<NamedParameter> params_;
  Tensor wte_, wpe_, lnf_g_, lnf_b_;
  std::vector<Block> blocks_;
};

}  // namespace zs::models
