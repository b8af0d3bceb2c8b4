// GPT forward: embeddings, blocks, final norm, tied head.
#include "models/gpt.h"

#include <cmath>

#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/linear_cross_entropy.h"

namespace zs::models {
namespace {

const GptConfig& checked(const GptConfig& config) {
  ZS_CHECK(config.n_head > 0 && config.width % config.n_head == 0, "gpt: width ", config.width,
           " must be divisible by n_head ", config.n_head);
  ZS_CHECK(config.vocab_size > 0 && config.context > 0 && config.n_layer >= 0,
           "gpt: vocab_size and context must be positive and n_layer non-negative, got ",
           config.vocab_size, ", ", config.context, ", ", config.n_layer);
  return config;
}

float residual_std(const GptConfig& config) {
  // GPT-2: residual projections scaled by 1/sqrt(2·layers).
  return config.n_layer > 0 ? 0.02f / std::sqrt(2.0f * static_cast<float>(config.n_layer)) : 0.02f;
}

}  // namespace

std::string describe(const GptConfig& config) {
  return detail::concat("layers ", config.n_layer, ", width ", config.width, ", heads ",
                        config.n_head, ", vocab ", config.vocab_size, ", context ", config.context);
}

Gpt::Gpt(const GptConfig& config)
    : Module("Gpt"),
      config_(checked(config)),
      wte_(declare("wte", {config.vocab_size, config.width}, InitRule::normal(0.02f))),
      wpe_(declare("wpe", {config.context, config.width}, InitRule::normal(0.02f))),
      blocks_(emplace<Sequential>("blocks")),
      ln_f_(emplace<LayerNorm>("ln_f", config.width)) {
  for (int64_t l = 0; l < config.n_layer; ++l) {
    blocks_.append(
        std::make_unique<Block>(config.width, config.n_head, config.causal, residual_std(config)));
  }
}

Tensor Gpt::forward(const Tensor& ids) {
  ZS_CHECK(ids.dim() == 2 && ids.dtype() == DType::kI32, "gpt: ids must be int32 [B, T], got ",
           ids.describe());
  const int64_t batch = ids.size(0);
  const int64_t seq = ids.size(1);
  ZS_CHECK(seq <= config_.context, "gpt: sequence length ", seq, " exceeds the context of ",
           config_.context, "; shorten the sequences or raise the context");
  // On the ids' device (position t of every sequence is t); on a GPU a kernel writes them.
  Tensor positions = Tensor::empty({batch, seq}, DType::kI32, ids.allocator(),
                                   MemoryCategory::kWorkspace, "positions");
  fill_index_mod(positions, seq);
  Tensor x = ops::add(ops::embedding(wte_.tensor(), ids), ops::embedding(wpe_.tensor(), positions));
  const Tensor h = ln_f_(blocks_(x)).view({batch * seq, config_.width});
  // The head is tied to the token embedding. loss() asks for the loss instead of the logits: the
  // fused head then never holds the [B·T, vocab] logits (ops/linear_cross_entropy.h).
  if (loss_targets_.defined()) {
    return ops::linear_cross_entropy(h, wte_.tensor(), loss_targets_.view({-1}));
  }
  return ops::linear(h, wte_.tensor());
}

Tensor Gpt::loss(const Tensor& ids, const Tensor& targets) {
  ZS_CHECK(targets.shape() == ids.shape() && targets.dtype() == DType::kI32, "gpt: targets ",
           targets.describe(), " must match ids ", ids.describe());
  loss_targets_ = targets;  // read by forward()
  struct Consume {
    Tensor& targets;
    ~Consume() { targets = Tensor(); }  // also when the forward throws
  } consume{loss_targets_};
  // Through operator(): the sharding hooks gather the root's parameters (wte) around the head.
  return (*this)(ids);
}

double Gpt::train_flops(int64_t batch, int64_t seq) const {
  const double tokens = static_cast<double>(batch * seq);
  const double c = static_cast<double>(config_.width);
  // Per layer and token: qkv 3C², proj C², MLP 8C² multiply-adds = 12C²; attention scores and
  // weighted values 2·T·C (full rows counted even when causal).
  const double per_layer =
      2 * tokens * (12 * c * c) + 2 * 2 * tokens * static_cast<double>(seq) * c;
  const double head = 2 * tokens * c * static_cast<double>(config_.vocab_size);
  return 3 * (per_layer * static_cast<double>(config_.n_layer) + head);
}

}  // namespace zs::models
