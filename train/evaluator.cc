// Evaluator (train/evaluator.h).
#include "train/evaluator.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/autograd.h"
#include "runtime/clock.h"
#include "runtime/logging.h"

namespace zs::train {

int64_t evaluated_items(int64_t total, int64_t eval_batches, int64_t rows, int64_t world) {
  if (eval_batches > 0) return std::min(total, eval_batches * world * rows);
  return total;
}

void Evaluator::on_eval(int64_t after_steps) {
  if (rank_.data.eval_items() <= 0) return;
  if (rank_.config.eval_micro_batches.empty()) {
    evaluate(after_steps, rank_.config.micro_batch);
    return;
  }
  for (const int64_t rows : rank_.config.eval_micro_batches) evaluate(after_steps, rows);
}

void Evaluator::evaluate(int64_t after_steps, int64_t rows) {
  const int64_t total = rank_.data.eval_items();
  const int64_t world = rank_.comm.size();
  const int64_t items = evaluated_items(total, rank_.config.eval_batches, rows, world);
  const int64_t batches = (items + world * rows - 1) / (world * rows);
  NoGradScope no_grad;
  MemoryCategoryScope activations(MemoryCategory::kActivations);
  EvalSums mine;
  const auto predict_start = SteadyClock::now();
  for (int64_t b = 0; b < batches; ++b) {
    std::vector<int64_t> share;
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t item = (b * world + rank_.comm.rank()) * rows + i;
      if (item < items) share.push_back(item);
    }
    const EvalSums sums = rank_.task.evaluate(
        share, rows, rank_.host, [this](const Tensor& t) { return rank_.to_compute(t); });
    mine.loss_sum += sums.loss_sum;
    mine.count += sums.count;
    mine.correct += sums.correct;
    mine.metric_seconds += sums.metric_seconds;
  }
  const double evaluate_seconds = seconds_since(predict_start);
  const auto broadcast_start = SteadyClock::now();
  const std::vector<double> sums =
      sum_over_ranks(rank_.comm, rank_.compute, {mine.loss_sum, mine.count, mine.correct});
  const double broadcast_seconds = seconds_since(broadcast_start);
  const double loss_sum = sums[0], count = sums[1], correct = sums[2];
  EvalRecord e;
  e.batch = rows;
  e.predict_ms = (evaluate_seconds - mine.metric_seconds) * 1e3;
  e.metric_ms = mine.metric_seconds * 1e3;
  e.broadcast_ms = broadcast_seconds * 1e3;
  e.step = after_steps;
  e.loss = loss_sum / count;
  e.tokens = static_cast<int64_t>(std::llround(count));
  const bool classify = rank_.data.kind() == TaskKind::kClassification;
  if (classify) {
    e.correct = static_cast<int64_t>(std::llround(correct));
    e.accuracy = correct / count;
  } else {
    e.perplexity = std::exp(e.loss);
  }
  if (!rank_.lead) return;
  rank_.result.evals.push_back(e);
  // Several evaluation batches: each line says which (one batch keeps the plain line).
  const std::string batch = rank_.config.eval_micro_batches.size() > 1
                                ? " (batch " + std::to_string(rows) + ")"
                                : std::string();
  if (classify) {
    ZS_LOG_INFO("eval after step {}{}: loss {:.4f}, accuracy {:.2f}% ({} of {} held-out examples)",
                after_steps, batch, e.loss, 100 * e.accuracy, e.correct, e.tokens);
  } else {
    ZS_LOG_INFO("eval after step {}{}: loss {:.4f}, perplexity {:.2f} over {} held-out tokens",
                after_steps, batch, e.loss, e.perplexity, e.tokens);
  }
}

}  // namespace zs::train
