// The small transformer: parameter setup and the forward pass as a sequence of ops.
#include "models/transformer.h"

#include <cmath>
#include <vector>

#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gelu.h"
#include "ops/layernorm.h"
#include "ops/linear.h"
#include "runtime/rng.h"

namespace zs::models {

Tensor& Transformer::add_param(const std::string& name, const Shape& shape, float init_std,
                               float init_const, bool decay, Allocator& allocator) {
  Tensor t = Tensor::empty(shape, config_.dtype, allocator, MemoryCategory::kParameters, name);
  std::vector<float> values(static_cast<size_t>(t.numel()), init_const);
  if (init_std > 0) {
    fill_normal(values.data(), 0, values.size(), rng_key(config_.seed, name), 0.0f, init_std);
  }
  t.copy_from(values);
  t.set_requires_grad(true);
  params_.push_back({name, t, decay});
  return params_.back().tensor;
}

Transformer::Transformer(const TransformerConfig& config, Allocator& allocator) : config_(config) {
  const int64_t c = config.width;
  ZS_CHECK(config.n_head > 0 && c % config.n_head == 0, "transformer: width ", c,
           " must be divisible by n_head ", config.n_head);
  ZS_CHECK(config.vocab_size > 0 && config.context > 0 && config.n_layer >= 0,
           "transformer: vocab_size, context must be positive and n_layer non-negative");
  params_.reserve(4 + 12 * static_cast<size_t>(config.n_layer));
  // GPT-2 initialization: N(0, 0.02), residual projections scaled by 1/sqrt(2·layers).
  const float std = 0.02f;
  const float residual_std =
      config.n_layer > 0 ? std / std::sqrt(2.0f * static_cast<float>(config.n_layer)) : std;
  wte_ = add_param("wte", {config.vocab_size, c}, std, 0, true, allocator);
  wpe_ = add_param("wpe", {config.context, c}, std, 0, true, allocator);
  for (int64_t l = 0; l < config.n_layer; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    Block b;
    b.ln1_g = add_param(p + "ln1.weight", {c}, 0, 1, false, allocator);
    b.ln1_b = add_param(p + "ln1.bias", {c}, 0, 0, false, allocator);
    b.qkv_w = add_param(p + "attn.qkv.weight", {3 * c, c}, std, 0, true, allocator);
    b.qkv_b = add_param(p + "attn.qkv.bias", {3 * c}, 0, 0, false, allocator);
    b.proj_w = add_param(p + "attn.proj.weight", {c, c}, residual_std, 0, true, allocator);
    b.proj_b = add_param(p + "attn.proj.bias", {c}, 0, 0, false, allocator);
    b.ln2_g = add_param(p + "ln2.weight", {c}, 0, 1, false, allocator);
    b.ln2_b = add_param(p + "ln2.bias", {c}, 0, 0, false, allocator);
    b.fc_w = add_param(p + "mlp.fc.weight", {4 * c, c}, std, 0, true, allocator);
    b.fc_b = add_param(p + "mlp.fc.bias", {4 * c}, 0, 0, false, allocator);
    b.out_w = add_param(p + "mlp.proj.weight", {c, 4 * c}, residual_std, 0, true, allocator);
    b.out_b = add_param(p + "mlp.proj.bias", {c}, 0, 0, false, allocator);
    blocks_.push_back(b);
  }
  lnf_g_ = add_param("ln_f.weight", {c}, 0, 1, false, allocator);
  lnf_b_ = add_param("ln_f.bias", {c}, 0, 0, false, allocator);
}

int64_t Transformer::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p.tensor.numel();
  return n;
}

Tensor Transformer::forward(const Tensor& ids) const {
  ZS_CHECK(ids.dim() == 2 && ids.dtype() == DType::kI32,
           "transformer: ids must be int32 [B, T], got ", ids.describe());
  const int64_t batch = ids.size(0);
  const int64_t seq = ids.size(1);
  ZS_CHECK(seq <= config_.context, "transformer: sequence length ", seq, " exceeds the context of ",
           config_.context, "; shorten the sequences or raise context");
  // Position ids 0..T-1 for every sequence; the position table's gradient is a scatter-add.
  Tensor positions = Tensor::empty({batch, seq}, DType::kI32, ids.allocator(),
                                   MemoryCategory::kWorkspace, "positions");
  int32_t* pos = positions.data<int32_t>();
  for (int64_t i = 0; i < batch * seq; ++i) pos[i] = static_cast<int32_t>(i % seq);
  Tensor x = ops::add(ops::embedding(wte_, ids), ops::embedding(wpe_, positions));
  for (size_t layer = 0; layer < blocks_.size(); ++layer) x = block_forward(layer, x);
  x = ops::layernorm(x, lnf_g_, lnf_b_);
  return ops::linear(x.view({batch * seq, config_.width}), wte_);  // tied LM head
}

Tensor Transformer::block_forward(size_t layer, const Tensor& x) const {
  ZS_CHECK(layer < blocks_.size(), "transformer: block ", layer, " of ", blocks_.size());
  const Block& b = blocks_[layer];
  Tensor a = ops::linear(ops::layernorm(x, b.ln1_g, b.ln1_b), b.qkv_w, b.qkv_b);
  a = ops::attention(a, config_.n_head, config_.causal);
  Tensor h = ops::add(x, ops::linear(a, b.proj_w, b.proj_b));
  Tensor m = ops::gelu(ops::linear(ops::layernorm(h, b.ln2_g, b.ln2_b), b.fc_w, b.fc_b));
  return ops::add(h, ops::linear(m, b.out_w, b.out_b));
}

Tensor Transformer::loss(const Tensor& ids, const Tensor& targets) const {
  ZS_CHECK(targets.shape() == ids.shape() && targets.dtype() == DType::kI32,
           "transformer: targets ", targets.describe(), " must match ids ", ids.describe());
  Tensor logits = forward(ids);
  return ops::cross_entropy(logits, targets.view({-1}));
}

double Transformer::train_flops(int64_t batch, int64_t seq) const {
  const double tokens = static_cast<double>(batch * seq);
  const double c = static_cast<double>(config_.width);
  // Per layer and token: qkv 3C², proj C², MLP 8C² multiply-adds = 12C²; attention scores and
  // weighted values 2·T·C (T/2 on average when causal, but the kernel computes full rows).
  const double per_layer =
      2 * tokens * (12 * c * c) + 2 * 2 * tokens * static_cast<double>(seq) * c;
  const double head = 2 * tokens * c * static_cast<double>(config_.vocab_size);
  return 3 * (per_layer * static_cast<double>(config_.n_layer) + head);
}

}  // namespace zs::models
