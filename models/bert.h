// A BERT-style encoder classifier written as Modules: token and learned position embeddings,
// pre-LN encoder Blocks whose bidirectional attention ignores each sequence's padding, a final
// LayerNorm, [CLS] pooling (position 0), a pooler (Linear + tanh) and a classification head
// Linear(width, num_classes). Parameter names: "tok_emb", "pos_emb", "blocks.<i>.ln1.…",
// "blocks.<i>.attn.qkv.…", "blocks.<i>.attn.proj.…", "blocks.<i>.ln2.…", "blocks.<i>.mlp.fc.…",
// "blocks.<i>.mlp.proj.…", "ln_f.…", "pooler.…", "head.…" (the block layout is GPT's).
//
// Padding: a batch is ids [B, T] int32 plus valid lengths [B] int32 (1 <= lengths[b] <= T). In
// sequence b only keys t < lengths[b] get attention weight, and every other op is per position,
// so the tokens after a sequence's length do not change its logits. The model pools position 0,
// so put the [CLS] token there; the tokenizer decides its id (examples/classifier_finetune.cc
// uses a control byte).
//
// Sharding: the encoder layers are models::Block (bidirectional), so ShardingConfig's default
// wrap policy makes every block a unit and the root (BertClassifier) takes the embeddings, ln_f,
// pooler and head. Under stage 3 the root's parameters are gathered for exactly the root's
// forward, so logits() and loss() compute everything that reads a parameter inside it.
// Module::operator() carries a single tensor, so the lengths reach the attention of every block
// through a PaddingState (models/layers.h) the model shares with its blocks: each forward
// installs its lengths there, and they stay until the next forward, so that a block recomputed
// during backward (activation checkpointing) sees the same ones. Not thread-safe, like any
// Module: one instance per rank.
#pragma once

#include <cstdint>
#include <memory>

#include "models/layers.h"
#include "models/module.h"

namespace zs::models {

struct BertConfig {
  int64_t vocab_size = 256;
  int64_t context = 64;  // the longest sequence (learned positions)
  int64_t width = 64;    // C
  int64_t n_head = 4;
  int64_t n_layer = 2;
  int64_t num_classes = 2;
  int32_t pad_id = 0;  // for lengths_from_padding() when no lengths are given
};

class BertClassifier : public Module {
 public:
  explicit BertClassifier(const BertConfig& config);

  // Class logits [B, num_classes] (fp32 unless computing in fp16/bf16) for ids [B, T] int32
  // and lengths [B] int32 in [1, T]; undefined lengths: lengths_from_padding(ids, pad_id).
  Tensor logits(const Tensor& ids, const Tensor& lengths);
  // Mean cross-entropy over the batch; labels [B] int32 in [0, num_classes).
  Tensor loss(const Tensor& ids, const Tensor& lengths, const Tensor& labels);

  Sequential& blocks() { return blocks_; }
  const BertConfig& config() const { return config_; }

 protected:
  // Logits for ids with the lengths logits() installed, or, when called directly through
  // operator(), with lengths_from_padding(ids, pad_id).
  Tensor forward(const Tensor& ids) override;

 private:
  BertConfig config_;
  std::shared_ptr<PaddingState> padding_;
  bool lengths_given_ = false;  // logits() installed this forward's lengths
  Parameter& tok_emb_;
  Parameter& pos_emb_;
  Sequential& blocks_;
  LayerNorm& ln_f_;
  Linear& pooler_;
  Linear& head_;
};

// lengths[b] = 1 + the last position of row b whose id is not pad_id (1 if the row is all
// padding: position 0 is always kept, it is the one pooled). int32 [B] on ids' allocator.
Tensor lengths_from_padding(const Tensor& ids, int32_t pad_id);

// The number of rows whose arg-max logit (the first one on ties) equals the label: logits
// [B, K] floating, labels [B] int32. For accuracy over ranks, all-reduce the counts.
int64_t count_correct(const Tensor& logits, const Tensor& labels);

}  // namespace zs::models
