// BERT-style classifier forward: embeddings, padded bidirectional blocks (models::Block with the
// model's PaddingState), [CLS] pooling (ops::select of position 0), pooler (Linear + ops::tanh),
// head. Host code never dereferences a tensor here: values the host needs (lengths, labels, ids
// for lengths_from_padding) are copied out, and the ids' positions are written on their device.
#include "models/bert.h"

#include <cmath>
#include <vector>

#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/select.h"

namespace zs::models {
namespace {

const BertConfig& checked(const BertConfig& config) {
  ZS_CHECK(config.n_head > 0 && config.width % config.n_head == 0, "bert: width ", config.width,
           " must be divisible by n_head ", config.n_head);
  ZS_CHECK(config.vocab_size > 0 && config.context > 0 && config.n_layer >= 0,
           "bert: vocab_size and context must be positive and n_layer non-negative, got ",
           config.vocab_size, ", ", config.context, ", ", config.n_layer);
  ZS_CHECK(config.num_classes >= 2, "bert: num_classes must be at least 2, got ",
           config.num_classes);
  ZS_CHECK(config.pad_id >= 0 && config.pad_id < config.vocab_size, "bert: pad_id ", config.pad_id,
           " must be a token id in [0, ", config.vocab_size, ")");
  return config;
}

float residual_std(const BertConfig& config) {
  // As GPT-2: residual projections scaled by 1/sqrt(2·layers).
  return config.n_layer > 0 ? 0.02f / std::sqrt(2.0f * static_cast<float>(config.n_layer)) : 0.02f;
}

// The int32 values of t on the host: a copy, so t may be on any device (a GPU's synchronous
// download; exact, unlike to_vector's floats above 2^24).
std::vector<int32_t> host_int32(const Tensor& t) {
  t.check_dtype(DType::kI32);
  std::vector<int32_t> values(static_cast<size_t>(t.numel()));
  t.copy_to_host(values.data());
  return values;
}

void check_lengths(const Tensor& lengths, int64_t batch, int64_t seq) {
  ZS_CHECK(lengths.dtype() == DType::kI32 && lengths.dim() == 1 && lengths.size(0) == batch,
           "bert: lengths ", lengths.describe(), " must be int32 [", batch, "]");
  const std::vector<int32_t> values = host_int32(lengths);
  for (int64_t b = 0; b < batch; ++b) {
    ZS_CHECK(values[b] >= 1 && values[b] <= seq, "bert: lengths[", b, "] = ", values[b],
             " must be in [1, ", seq, "] (position 0, the pooled [CLS], is always valid)");
  }
}

}  // namespace

BertClassifier::BertClassifier(const BertConfig& config)
    : Module("BertClassifier"),
      config_(checked(config)),
      padding_(std::make_shared<PaddingState>()),
      tok_emb_(declare("tok_emb", {config.vocab_size, config.width}, InitRule::normal(0.02f))),
      pos_emb_(declare("pos_emb", {config.context, config.width}, InitRule::normal(0.02f))),
      blocks_(emplace<Sequential>("blocks")),
      ln_f_(emplace<LayerNorm>("ln_f", config.width)),
      pooler_(emplace<Linear>("pooler", config.width, config.width)),
      head_(emplace<Linear>("head", config.width, config.num_classes)) {
  for (int64_t l = 0; l < config.n_layer; ++l) {
    blocks_.append(std::make_unique<Block>(config.width, config.n_head, /*causal=*/false,
                                           residual_std(config), padding_));
  }
}

Tensor BertClassifier::logits(const Tensor& ids, const Tensor& lengths) {
  ZS_CHECK(ids.dim() == 2 && ids.dtype() == DType::kI32, "bert: ids must be int32 [B, T], got ",
           ids.describe());
  const Tensor valid = lengths.defined() ? lengths : lengths_from_padding(ids, config_.pad_id);
  check_lengths(valid, ids.size(0), ids.size(1));
  padding_->lengths = valid;
  lengths_given_ = true;  // consumed by forward()
  struct Consume {
    bool& flag;
    ~Consume() { flag = false; }  // also when the forward throws before reading it
  } consume{lengths_given_};
  return (*this)(ids);  // through operator(): the sharding hooks gather the root's parameters
}

Tensor BertClassifier::loss(const Tensor& ids, const Tensor& lengths, const Tensor& labels) {
  ZS_CHECK(labels.dtype() == DType::kI32 && labels.dim() == 1 && ids.dim() >= 1 &&
               labels.size(0) == ids.size(0),
           "bert: labels ", labels.describe(), " must be int32 [B] for ids ", ids.describe());
  return ops::cross_entropy(logits(ids, lengths), labels);
}

Tensor BertClassifier::forward(const Tensor& ids) {
  ZS_CHECK(ids.dim() == 2 && ids.dtype() == DType::kI32, "bert: ids must be int32 [B, T], got ",
           ids.describe());
  const int64_t batch = ids.size(0);
  const int64_t seq = ids.size(1);
  ZS_CHECK(seq >= 1 && seq <= config_.context, "bert: sequence length ", seq, " must be in [1, ",
           config_.context, "] (the context); shorten the sequences or raise the context");
  // Called directly (not through logits()): the lengths come from the padding id. Either way
  // they stay installed after this forward, for a recomputation of a block in backward.
  if (!lengths_given_) padding_->lengths = lengths_from_padding(ids, config_.pad_id);
  lengths_given_ = false;
  check_lengths(padding_->lengths, batch, seq);

  // On the ids' device (position t of every sequence is t); on a GPU a kernel writes them.
  Tensor positions = Tensor::empty({batch, seq}, DType::kI32, ids.allocator(),
                                   MemoryCategory::kWorkspace, "positions");
  fill_index_mod(positions, seq);
  Tensor x = ops::add(ops::embedding(tok_emb_.tensor(), ids),
                      ops::embedding(pos_emb_.tensor(), positions));
  x = blocks_(x);
  // LayerNorm is per position, so normalizing only the pooled row is the same as normalizing all.
  Tensor cls = ln_f_(ops::select(x, /*dim=*/1, /*index=*/0));
  return head_(ops::tanh(pooler_(cls)));
}

Tensor lengths_from_padding(const Tensor& ids, int32_t pad_id) {
  ZS_CHECK(ids.dim() == 2 && ids.dtype() == DType::kI32, "bert: ids must be int32 [B, T], got ",
           ids.describe());
  const int64_t batch = ids.size(0), seq = ids.size(1);
  Tensor lengths =
      Tensor::empty({batch}, DType::kI32, ids.allocator(), MemoryCategory::kWorkspace, "lengths");
  // Computed on the host from a copy of the ids, then copied to the ids' device.
  const std::vector<int32_t> id = host_int32(ids);
  std::vector<int32_t> out(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    int64_t len = seq;
    while (len > 1 && id[static_cast<size_t>(b * seq + len - 1)] == pad_id) --len;
    out[static_cast<size_t>(b)] = static_cast<int32_t>(len);
  }
  lengths.copy_from_host(out.data());
  return lengths;
}

int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  ZS_CHECK(logits.dim() == 2 && is_floating(logits.dtype()), "count_correct: logits ",
           logits.describe(), " must be floating [B, K]");
  ZS_CHECK(labels.dtype() == DType::kI32 && labels.dim() == 1 && labels.size(0) == logits.size(0),
           "count_correct: labels ", labels.describe(), " must be int32 [", logits.size(0), "]");
  const int64_t rows = logits.size(0), classes = logits.size(1);
  const std::vector<float> values = logits.to_vector();
  const std::vector<int32_t> label = host_int32(labels);
  int64_t correct = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = values.data() + r * classes;
    int64_t best = 0;
    for (int64_t k = 1; k < classes; ++k) {
      if (row[k] > row[best]) best = k;
    }
    correct += best == label[r] ? 1 : 0;
  }
  return correct;
}

}  // namespace zs::models
