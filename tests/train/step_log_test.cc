// The helpers of the log a user reads (train/step_log.h, train/evaluator.h): throughput over the
// last log interval rather than since the start, model FLOPs per token and durations for the ETA,
// and the bounded default evaluation.
#include "train/step_log.h"

#include <gtest/gtest.h>

#include "train/config.h"
#include "train/evaluator.h"

namespace zs::train {
namespace {

TEST(TrainLog, TokensPerSecondIsTheLastIntervalsRate) {
  IntervalRate rate;
  EXPECT_EQ(rate.rate(), 0);
  rate.add(1000, 1.0);  // a slow first interval
  rate.add(1000, 1.0);
  EXPECT_DOUBLE_EQ(rate.rate(), 1000);
  EXPECT_DOUBLE_EQ(rate.seconds_per_step(), 1.0);
  rate.restart();
  rate.add(1000, 0.25);  // the next interval is 4x faster: the average since start is not shown
  rate.add(1000, 0.25);
  EXPECT_DOUBLE_EQ(rate.rate(), 4000);
  EXPECT_DOUBLE_EQ(rate.seconds_per_step(), 0.25);
}

TEST(TrainLog, ModelFlopsAndDurations) {
  // 6N + 12·L·T·C: GPT-2 small at T = 1024.
  EXPECT_DOUBLE_EQ(model_flops_per_token(124'000'000, 12, 1024, 768),
                   6.0 * 124e6 + 12.0 * 12 * 1024 * 768);
  EXPECT_GT(measure_gemm_peak(0.001), 0);
  EXPECT_EQ(format_duration(42), "42s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(3720), "1h02m");
}

TEST(TrainLog, EvaluationIsBoundedByDefault) {
  EXPECT_EQ(TrainConfig{}.eval_batches, 20);
  // 20 batches per rank of 4 rows on 2 ranks: at most 160 of 10000 held-out windows.
  EXPECT_EQ(evaluated_items(10000, TrainConfig{}.eval_batches, 4, 2), 160);
  EXPECT_EQ(evaluated_items(100, 20, 4, 2), 100);     // fewer held out than the cap
  EXPECT_EQ(evaluated_items(10000, 0, 4, 2), 10000);  // 0: everything
}

}  // namespace
}  // namespace zs::train
