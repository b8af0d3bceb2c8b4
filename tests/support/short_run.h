// The short fixed training run whose bits the train tests pin: a 2-layer GPT (width 32, 2 heads,
// context 32) on a text corpus, micro-batch 2 × 2 accumulated, 6 steps of AdamW at lr 3e-3 with
// 2 warmup steps and clipping at 1, one compute thread per rank, no progress line. Used by
// param_hash_test.cc (the final parameters at every stage) and checkpoint_test.cc (a resumed run
// equals it bit for bit). Header-only; a pure function.
#pragma once

#include <string>

#include "runtime/dtype.h"
#include "train/config.h"

namespace zs::testing {

inline train::TrainConfig short_gpt_run(const std::string& corpus, int ranks, int stage,
                                        DType precision) {
  train::TrainConfig c;
  c.text = {corpus};
  c.model = "tiny";
  c.n_layer = 2;
  c.width = 32;
  c.n_head = 2;
  c.context = 32;
  c.micro_batch = 2;
  c.grad_accum = 2;
  c.ranks = ranks;
  c.stage = stage;
  c.precision = precision;
  c.threads = 1;
  c.steps = 6;
  c.lr = 3e-3f;
  c.warmup_steps = 2;
  c.clip = 1.0f;
  c.log_interval = 1000;
  c.eval_batches = 1;
  c.progress = false;
  return c;
}

}  // namespace zs::testing
