// Evaluator: the loop part that scores the held-out data at each evaluation point.
//
// Each rank scores its share of the held-out items (rows past the end are padding that is not
// scored, so every rank runs the same number of forwards, as stage 3 needs); the sums are added
// over ranks in rank order, so every rank knows the loss. At most config.eval_batches batches
// per rank (0: every held-out item), of config.micro_batch rows each, or once per size of
// config.eval_micro_batches. Rank 0 logs each result and records it. Issues collectives:
// every rank must reach the same evaluation points. One rank's thread.
//
// Each EvalRecord also says where this rank's evaluation time went: predict (the forwards and
// the outputs' trip to the host), metric (the task turning outputs into loss and correct counts,
// EvalSums::metric_seconds) and broadcast (the sum over ranks that gives every rank the result;
// it includes waiting for slower ranks). zs-study scaling charts the three.
#pragma once

#include "train/loop.h"
#include "train/rank_context.h"

namespace zs::train {

// Held-out items evaluated out of `total` with `eval_batches` batches per rank (0: all) of
// `rows` rows on `world` ranks.
int64_t evaluated_items(int64_t total, int64_t eval_batches, int64_t rows, int64_t world);

class Evaluator final : public TrainerPart {
 public:
  explicit Evaluator(const RankContext& rank) : rank_(rank) {}
  void on_eval(int64_t completed_steps) override;

 private:
  // One evaluation of the held-out set with `rows` rows per forward.
  void evaluate(int64_t after_steps, int64_t rows);

  const RankContext& rank_;
};

}  // namespace zs::train
