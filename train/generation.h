// TextGeneration: the loop part that continues config.sample_prompt by config.sample_tokens
// tokens at the end of a language-modelling run (greedy at temperature 0, else top-40
// sampling with counter-based random numbers, the same on every rank). Every rank runs the same
// forwards (stage 3 gathers collectively); rank 0 logs and records the text. One rank's thread.
#pragma once

#include <cstdint>

#include "runtime/rng.h"
#include "train/loop.h"
#include "train/rank_context.h"

namespace zs::train {

// The next token from a row of `vocab` logits: the arg-max (temperature <= 0), or a draw from
// softmax(logits / temperature) restricted to the 40 most likely tokens, with the random
// number of `key`.
int32_t pick_token(const float* logits, int64_t vocab, float temperature, const RngKey& key);

class TextGeneration final : public TrainerPart {
 public:
  explicit TextGeneration(const RankContext& rank) : rank_(rank) {}
  void on_end(int64_t steps) override;

 private:
  const RankContext& rank_;
};

}  // namespace zs::train
