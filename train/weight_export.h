// WeightExport: the loop part that writes the full weights at the end of a run when
// config.save_weights names a file (GPT-2's layout: safetensors, or llm.c's .bin by
// extension). Every rank takes part in gathering each unit's masters; rank 0 writes. One rank's
// thread.
#pragma once

#include "train/loop.h"
#include "train/rank_context.h"

namespace zs::train {

class WeightExport final : public TrainerPart {
 public:
  explicit WeightExport(const RankContext& rank) : rank_(rank) {}
  void on_end(int64_t steps) override;

 private:
  const RankContext& rank_;
};

}  // namespace zs::train
