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
// Rank 0 logs every log_interval steps (step, loss, lr, tokens/s over the interval, step ms,
// ETA, model FLOP utilization on the CPU, grad norm, loss scale, peak memory). Evaluation is
// distributed: every rank scores its share of the held-out windows and the sums are all-reduced, so
// every rank knows the loss. At the end rank 0 prints the per-rank memory table (min/max over
// ranks), the last step's traffic next to the stage's formula, and with profile_memory writes each
// rank's JSON timeline and an SVG chart of one step.
#pragma once

#include "train/config.h"
#include "train/records.h"

namespace zs::train {

// Runs the configured training. For the local backend, returns rank 0's result; under MPI, this
// process's rank's result (the printed reports come from rank 0). Throws InvalidArgument for a
// bad configuration or data, OutOfMemory when the budget is too small (with the estimate of
// what would fit), NumericalError on a non-finite loss, CommError/CommTimeout on a lost rank.
// With config.max_restarts > 0 (rank threads only) a failed attempt whose error a restart can
// cure is run again from the newest checkpoint (train/restarts.h); the error that ends the run
// is the last attempt's.
TrainResult run_training(const TrainConfig& config);

}  // namespace zs::train
