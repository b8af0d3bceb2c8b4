// Building-block modules over the ops: Linear, LayerNorm, Sequential, causal/bidirectional
// self-attention, the GELU MLP and the pre-LN transformer Block. Each is a plain Module: it
// declares its parameters and computes forward from them; wrap policies match type names
// ("Block", "Linear", ...).
#pragma once

#include <cstdint>
#include <memory>

#include "models/module.h"

namespace zs::models {

// y = x·Wᵀ + b with W [out, in] (GPT-2 init: N(0, init_std)), bias zeros and not decayed.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, float init_std = 0.02f);
  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }

 protected:
  Tensor forward(const Tensor& x) override;

 private:
  Parameter* weight_;
  Parameter* bias_ = nullptr;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t width, float eps = 1e-5f);

 protected:
  Tensor forward(const Tensor& x) override;

 private:
  Parameter* weight_;
  Parameter* bias_;
  float eps_;
};

// Calls its children in order; children are named "0", "1", ….
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  template <typename M>
  M& append(std::unique_ptr<M> child) {
    return add(std::to_string(children().size()), std::move(child));
  }

 protected:
  Tensor forward(const Tensor& x) override;
};

// Multi-head self-attention on x [B, T, C]: fused qkv projection, attention, output projection.
class SelfAttention : public Module {
 public:
  SelfAttention(int64_t width, int64_t n_head, bool causal, float residual_std);

 protected:
  Tensor forward(const Tensor& x) override;

 private:
  Linear& qkv_;
  Linear& proj_;
  int64_t n_head_;
  bool causal_;
};

class Mlp : public Module {
 public:
  Mlp(int64_t width, int64_t hidden, float residual_std);

 protected:
  Tensor forward(const Tensor& x) override;

 private:
  Linear& fc_;
  Linear& proj_;
};

// Pre-LN block: x + attn(ln1(x)), then + mlp(ln2(·)).
class Block : public Module {
 public:
  Block(int64_t width, int64_t n_head, bool causal, float residual_std);

 protected:
  Tensor forward(const Tensor& x) override;

 private:
  LayerNorm& ln1_;
  SelfAttention& attn_;
  LayerNorm& ln2_;
  Mlp& mlp_;
};

}  // namespace zs::models
