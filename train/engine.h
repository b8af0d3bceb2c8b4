// The training engine: one call runs a whole TrainConfig — every rank of it — and returns what
// happened. This is what zs-train is a command line for.
//
// A run: the world (`local`: config.ranks threads of this process; `mpi`: this process is one
// rank of the mpirun/srun job), the data (token files, or raw text encoded byte-level, the tail
// held out for evaluation), the model (a GPT preset with overrides) wrapped in a ShardedModel
// at the configured stage and precision, the optimizer over the local shards, and the loop:
// per step, grad_accum micro-batches of forward + backward (fp16: seeded with the loss scale),
// the loss-scale check agreed by all ranks (an overflowing step is skipped and logged), global
// grad-norm clipping, the optimizer step at the schedule's learning rate, after_step. A
// non-finite loss or gradient norm outside fp16's loss scaling stops the run with a
// NumericalError naming the step.
//
// Rank 0 logs every log_interval steps (step, loss, lr, tokens/s, step ms, grad norm, loss
// scale, peak memory). Evaluation is distributed: every rank scores its share of the held-out
// windows and the sums are all-reduced, so every rank knows the loss. At the end rank 0 prints
// the per-rank memory table (min/max over ranks), the last step's traffic next to the stage's
// formula, and with profile_memory writes each rank's JSON timeline and an SVG chart of one step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/config.h"

namespace zs::train {

struct StepRecord {
  int64_t step = 0;
  float loss = 0;  // mean over ranks and micro-batches
  float lr = 0;
  float grad_norm = 0;  // before clipping
  float loss_scale = 1;
  bool skipped = false;  // fp16 overflow: no update
  double ms = 0;
  double tokens_per_s = 0;
};

struct EvalRecord {
  int64_t step = 0;       // evaluated after this many optimizer steps
  double loss = 0;        // mean over the held-out tokens (language modelling) or examples
  double perplexity = 0;  // language modelling
  int64_t tokens = 0;     // held-out tokens, or examples (classification)
  int64_t correct = 0;    // classification: examples whose arg-max logit is the label
  double accuracy = 0;    // classification: correct / examples
};

struct TrainResult {
  int world = 1;
  int64_t parameters = 0;
  int64_t tokens_per_step = 0;
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
  std::string sample;  // greedy continuation of sample_prompt (when sample_tokens > 0)
  std::string memory_table;
  std::string traffic_table;
  // Per category: peak bytes on the rank with the least and the most (index = MemoryCategory).
  std::vector<size_t> peak_min;
  std::vector<size_t> peak_max;
  size_t peak_total_max = 0;
  // Last step, this rank: bytes sent by the collectives vs the stage's formula.
  uint64_t bytes_sent = 0;
  uint64_t formula_bytes_sent = 0;
};

// Runs the configured training. For the local backend, returns rank 0's result; under MPI, this
// process's rank's result (the printed reports come from rank 0). Throws InvalidArgument for a
// bad configuration or data, OutOfMemory when the budget is too small (with the estimate of
// what would fit), NumericalError on a non-finite loss, CommError/CommTimeout on a lost rank.
TrainResult run_training(const TrainConfig& config);

}  // namespace zs::train
