// The short GPT run of short_run.h placed on a number of ranks at a stage (or hybrid group), with
// one global micro-batch at every world size — micro-batch kReshardGlobalMicroBatch / ranks — so
// that runs at different world sizes see the same global batches and a checkpoint of one resumes
// at another (train/checkpoints.h refuses another global batch). Used by the resharding tests
// (tests/train/reshard_test.cc, reshard_reference_test.cc). Header-only; pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/dtype.h"
#include "tests/support/short_run.h"
#include "train/config.h"

namespace zs::testing {

// Divisible by every world size the resharding tests use (1, 2, 3, 4).
constexpr int64_t kReshardGlobalMicroBatch = 12;

struct Placement {
  int ranks;
  int stage;
  int hybrid_group = 0;
};

// "2ranks_stage3", "4ranks_stage3_hybrid2": usable in a test name.
inline std::string placement_name(const Placement& p) {
  return std::to_string(p.ranks) + "ranks_stage" + std::to_string(p.stage) +
         (p.hybrid_group > 0 ? "_hybrid" + std::to_string(p.hybrid_group) : "");
}

inline train::TrainConfig placed_run(const std::string& corpus, const Placement& p,
                                     const char* optimizer, DType precision = DType::kF32) {
  train::TrainConfig c = short_gpt_run(corpus, p.ranks, p.stage, precision);
  c.hybrid_group = p.hybrid_group;
  c.micro_batch = kReshardGlobalMicroBatch / p.ranks;
  c.optimizer = optimizer;
  return c;
}

}  // namespace zs::testing
