// zs-mem's estimate of a train test's run: the units of the tiny GPT preset with the run's shape
// (layers, width, heads, context), as zs-mem would plan them. Header-only; pure.
#pragma once

#include <vector>

#include "models/gpt_presets.h"
#include "train/config.h"
#include "train/memory_model.h"

namespace zs::testing {

inline std::vector<train::MemoryUnit> tiny_gpt_units(const train::TrainConfig& c) {
  models::GptConfig shape = models::gpt_preset("tiny");
  shape.n_layer = c.n_layer;
  shape.width = c.width;
  shape.n_head = c.n_head;
  shape.context = c.context;
  return train::gpt_memory_units(shape);
}

// The estimate of `c` on `world` ranks at `stage`, with everything else as zs-train plans it.
inline train::MemoryEstimate zs_mem_estimate(const train::TrainConfig& c, int world, int stage) {
  return train::estimate_memory(tiny_gpt_units(c), train::memory_model_config(c, world, stage));
}

}  // namespace zs::testing
