// The building-block modules: each forward is a few ops.
#include "models/layers.h"

#include <utility>

#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/gelu.h"
#include "ops/layernorm.h"
#include "ops/linear.h"

namespace zs::models {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, float init_std)
    : Module("Linear") {
  ZS_CHECK(in_features > 0 && out_features > 0, "Linear: features must be positive, got in ",
           in_features, ", out ", out_features);
  weight_ = &declare("weight", {out_features, in_features}, InitRule::normal(init_std));
  if (bias) bias_ = &declare("bias", {out_features}, InitRule::zeros(), /*decay=*/false);
}

Tensor Linear::forward(const Tensor& x) {
  return ops::linear(x, weight_->tensor(), bias_ ? bias_->tensor() : Tensor());
}

LayerNorm::LayerNorm(int64_t width, float eps) : Module("LayerNorm"), eps_(eps) {
  weight_ = &declare("weight", {width}, InitRule::ones(), /*decay=*/false);
  bias_ = &declare("bias", {width}, InitRule::zeros(), /*decay=*/false);
}

Tensor LayerNorm::forward(const Tensor& x) {
  return ops::layernorm(x, weight_->tensor(), bias_->tensor(), eps_);
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (Module* child : children()) h = (*child)(h);
  return h;
}

SelfAttention::SelfAttention(int64_t width, int64_t n_head, bool causal, float residual_std,
                             std::shared_ptr<const PaddingState> padding)
    : Module("SelfAttention"),
      qkv_(emplace<Linear>("qkv", width, 3 * width)),
      proj_(emplace<Linear>("proj", width, width, true, residual_std)),
      n_head_(n_head),
      causal_(causal),
      padding_(std::move(padding)) {
  ZS_CHECK(n_head > 0 && width % n_head == 0, "SelfAttention: width ", width,
           " must be divisible by n_head ", n_head);
}

Tensor SelfAttention::forward(const Tensor& x) {
  Tensor qkv = qkv_(x);
  Tensor attended = padding_ ? ops::attention(qkv, n_head_, causal_, padding_->lengths)
                             : ops::attention(qkv, n_head_, causal_);
  return proj_(attended);
}

Mlp::Mlp(int64_t width, int64_t hidden, float residual_std)
    : Module("Mlp"),
      fc_(emplace<Linear>("fc", width, hidden)),
      proj_(emplace<Linear>("proj", hidden, width, true, residual_std)) {}

Tensor Mlp::forward(const Tensor& x) { return proj_(ops::gelu(fc_(x))); }

Block::Block(int64_t width, int64_t n_head, bool causal, float residual_std,
             std::shared_ptr<const PaddingState> padding)
    : Module("Block"),
      ln1_(emplace<LayerNorm>("ln1", width)),
      attn_(
          emplace<SelfAttention>("attn", width, n_head, causal, residual_std, std::move(padding))),
      ln2_(emplace<LayerNorm>("ln2", width)),
      mlp_(emplace<Mlp>("mlp", width, 4 * width, residual_std)) {}

Tensor Block::forward(const Tensor& x) {
  Tensor h = ops::add(x, attn_(ln1_(x)));
  return ops::add(h, mlp_(ln2_(h)));
}

}  // namespace zs::models
