// zs-study scaling at small sizes: every configuration runs, the evaluation's time split is
// measured, rows survive their TSV and merge by key, speedup is against the 1-rank row, and the
// table and charts carry them.
#include "study/scaling_study.h"

#include <gtest/gtest.h>

#include <string>

#include "runtime/error.h"

namespace zs::study {
namespace {

TEST(ScalingStudy, RunsEveryConfigurationAndSplitsTheEvaluation) {
  ScalingStudyOptions o;
  o.setup.shape = classifier_shape(1, 16, 2, 16);
  o.setup.examples = 64;
  o.setup.threads = 1;
  o.ranks = {1, 2};
  o.precisions = {DType::kF32, DType::kBF16};
  o.batch_sizes = {4};
  o.steps = 3;
  const std::vector<ScalingRow> rows = run_scaling_study(o);
  ASSERT_EQ(rows.size(), 4u);
  for (const ScalingRow& r : rows) {
    EXPECT_GT(r.step_ms, 0);
    EXPECT_GT(r.examples_per_s_per_rank, 0);
    EXPECT_GT(r.predict_ms, 0);
    EXPECT_GT(r.metric_ms, 0);
    EXPECT_GE(r.broadcast_ms, 0);
    EXPECT_EQ(r.eval_examples, 16);  // a quarter of 64
    EXPECT_GE(r.accuracy, 0);
    EXPECT_LE(r.accuracy, 1);
  }
  EXPECT_EQ(rows[0].ranks, 1);
  EXPECT_EQ(rows[2].ranks, 2);
  const std::string md =
      scaling_markdown(merge_scaling_rows({}, rows), "setup", "zs-study scaling");
  EXPECT_NE(md.find("| 2 | bf16 | 4 |"), std::string::npos) << md;
}

// --eval-batch-sizes: one row per evaluation batch size of each configuration, the training
// figures shared, every row scoring all the held-out pairs.
TEST(ScalingStudy, EvaluatesOncePerEvaluationBatchSize) {
  ScalingStudyOptions o;
  o.setup.shape = classifier_shape(1, 16, 2, 16);
  o.setup.examples = 64;
  o.setup.threads = 1;
  o.ranks = {1};
  o.precisions = {DType::kF32};
  o.batch_sizes = {4};
  o.eval_batch_sizes = {2, 16};
  o.steps = 2;
  const std::vector<ScalingRow> rows = run_scaling_study(o);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].eval_batch, 2);
  EXPECT_EQ(rows[1].eval_batch, 16);
  EXPECT_DOUBLE_EQ(rows[0].step_ms, rows[1].step_ms);
  for (const ScalingRow& r : rows) {
    EXPECT_EQ(r.eval_examples, 16);
    EXPECT_GT(r.predict_ms, 0);
  }
  const std::vector<ScalingRow> merged = merge_scaling_rows({}, rows);
  EXPECT_EQ(merged.size(), 2u);  // the evaluation batch is part of the key
  const std::string md = scaling_markdown(merged, "setup", "zs-study scaling");
  EXPECT_NE(md.find("| 1 | fp32 | 4 |"), std::string::npos) << md;
  EXPECT_NE(scaling_eval_svg(merged).find(">eval 16<"), std::string::npos);
  // A table written before the column existed: its rows evaluated with the training batch.
  const std::vector<ScalingRow> old = read_scaling_rows(
      "ranks\tprecision\tbatch\tdevice\tstep_ms\texamples_per_s_per_rank\tpredict_ms\tmetric_ms"
      "\tbroadcast_ms\teval_examples\taccuracy\n1\tfp32\t8\tcpu\t10\t800\t1\t0.1\t0.1\t16\t0.5\n",
      "old.tsv");
  ASSERT_EQ(old.size(), 1u);
  EXPECT_EQ(old[0].eval_batch, 8);
}

TEST(ScalingStudy, RowsRoundTripMergeAndGiveTheSpeedup) {
  ScalingRow one;
  one.ranks = 1;
  one.precision = "fp32";
  one.batch = 16;
  one.device = "cpu";
  one.step_ms = 100;
  one.examples_per_s_per_rank = 160;
  one.predict_ms = 5;
  one.metric_ms = 0.5;
  one.broadcast_ms = 0.25;
  one.eval_examples = 256;
  one.accuracy = 0.75;
  ScalingRow two = one;
  two.ranks = 2;
  two.examples_per_s_per_rank = 120;
  const std::vector<ScalingRow> rows = read_scaling_rows(scaling_rows_tsv({one, two}), "test");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].ranks, 2);
  EXPECT_EQ(rows[1].precision, "fp32");
  EXPECT_DOUBLE_EQ(rows[0].accuracy, 0.75);
  EXPECT_DOUBLE_EQ(speedup(rows[1], rows), 1.5);  // 2 x 120 / 160
  EXPECT_DOUBLE_EQ(speedup(rows[0], rows), 1.0);
  ScalingRow newer = two;
  newer.step_ms = 50;
  const std::vector<ScalingRow> merged = merge_scaling_rows(rows, {newer});
  ASSERT_EQ(merged.size(), 2u);
  EXPECT_DOUBLE_EQ(merged[1].step_ms, 50);
  EXPECT_THROW(read_scaling_rows("header\n1\tfp32\tx\n", "bad.tsv"), InvalidArgument);
  for (const std::string& svg : {scaling_throughput_svg(rows), scaling_speedup_svg(rows),
                                 scaling_step_time_svg(rows), scaling_eval_svg(rows)}) {
    EXPECT_EQ(svg.rfind("<svg", 0), 0u);
    EXPECT_NE(svg.find("</svg>"), std::string::npos);
  }
  EXPECT_NE(scaling_speedup_svg(rows).find(">ideal</text>"), std::string::npos);
  EXPECT_NE(scaling_eval_svg(rows).find(">broadcast</text>"), std::string::npos);
}

}  // namespace
}  // namespace zs::study
