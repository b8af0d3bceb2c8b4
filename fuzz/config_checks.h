// What the configuration targets do with a TrainConfig that parsed: the checks and translations
// zs-train runs on it before training (validate, translate, the memory model's settings), so a
// parsed value that breaks the arithmetic behind them (an overflow, a division by zero) is found
// too. Throws zs::Error where the configuration is refused.
#pragma once

#include <algorithm>

#include "train/config.h"

namespace zs::fuzz {

inline void check_parsed_config(const train::TrainConfig& config) {
  (void)train::describe(config);
  const int world = std::max(1, config.ranks);
  train::validate(config, world);
  (void)train::translate(config, world - 1, world);
  (void)train::memory_model_config(config, world, config.stage);
}

}  // namespace zs::fuzz
