// Building-block modules over the ops: Linear, LayerNorm, Sequential, causal/bidirectional
// self-attention (optionally ignoring each sequence's padding), the GELU MLP and the pre-LN
// transformer Block. Each is a plain Module: it declares its parameters and computes forward from
// them; wrap policies match type names ("Block", "Linear", ...).
//
// Padding. Module::operator() carries one tensor, so per-sequence lengths reach the attention
// through a PaddingState that the model owns and shares (std::shared_ptr<const PaddingState>)
// with its SelfAttention modules, directly or through Block: the model sets the lengths before
// each forward and leaves them installed until the next one, so that a module recomputed during
// backward (activation checkpointing) sees the same lengths. Without a PaddingState (the
// default) attention sees every position, and results are bit for bit those of ops::attention
// without lengths. Like any Module, not thread-safe: one instance per rank.
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

// The valid lengths of a padded batch, shared by a model and its attention modules (see the
// file comment). In sequence b only keys t < lengths[b] get attention weight (ops/attention.h).
struct PaddingState {
  Tensor lengths;  // int32 [B], or undefined: no padding
};

// Multi-head self-attention on x [B, T, C]: fused qkv projection, attention, output projection.
// With `padding`, every forward passes padding->lengths (as it is at that moment) to
// ops::attention as the key lengths; without it (null) only causality (if set) masks keys.
class SelfAttention : public Module {
 public:
  SelfAttention(int64_t width, int64_t n_head, bool causal, float residual_std,
                std::shared_ptr<const PaddingState> padding = nullptr);

 protected:
  Tensor forward(const Tensor& x) override;

 private:
  Linear& qkv_;
  Linear& proj_;
  int64_t n_head_;
  bool causal_;
  std::shared_ptr<const PaddingState> padding_;  // null: no key padding
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

// Pre-LN block: x + attn(ln1(x)), then + mlp(ln2(·)). `padding` goes to its SelfAttention.
class Block : public Module {
 public:
  Block(int64_t width, int64_t n_head, bool causal, float residual_std,
        std::shared_ptr<const PaddingState> padding = nullptr);

 protected:
  Tensor forward(const Tensor& x) override;

 private:
  LayerNorm& ln1_;
  SelfAttention& attn_;
  LayerNorm& ln2_;
  Mlp& mlp_;
};

}  // namespace zs::models
