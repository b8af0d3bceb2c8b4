// zs-study sync at small sizes: the three syncs give identical losses at 2 and 3 ranks, every
// iteration's gradient traffic (from the call log, itself checked against CommStats inside the
// study) equals the closed form of sharding/sharded_model.h on rank 0 and on the other ranks,
// per iteration and per epoch, and does not change with the batch size; the calls have the
// expected kinds and counts; the report and charts carry the figures.
#include "study/sync_study.h"

#include <gtest/gtest.h>

#include <string>

#include "study/synthetic_data.h"
#include "train/svg_chart.h"

namespace zs::study {
namespace {

using sharding::DdpSync;

SyncStudyOptions tiny(int ranks) {
  SyncStudyOptions o;
  o.setup.shape = classifier_shape(1, 16, 2, 16);
  o.setup.examples = 48;
  o.setup.threads = 1;
  o.ranks = ranks;
  o.batch_sizes = {4, 2};
  o.iterations = 3;
  return o;
}

TEST(SyncStudy, SyncsGiveIdenticalLossesAndTheFormulasTraffic) {
  for (int ranks : {2, 3}) {
    const SyncStudy study = run_sync_study(tiny(ranks));
    EXPECT_TRUE(study.identical()) << ranks << " ranks";
    ASSERT_EQ(study.runs.size(), 6u);
    uint64_t per_iteration[3][2] = {};
    for (size_t i = 0; i < study.runs.size(); ++i) {
      const SyncRun& r = study.runs[i];
      const std::string what = std::string(ddp_sync_name(r.sync)) + " batch " +
                               std::to_string(r.batch) + " ranks " + std::to_string(ranks);
      // An epoch of 48 examples; the run covered it.
      EXPECT_EQ(r.iterations_per_epoch, 48 / (r.batch * ranks)) << what;
      EXPECT_GE(r.losses.size(), static_cast<size_t>(r.iterations_per_epoch)) << what;
      for (int rank : {0, 1}) {
        EXPECT_GT(r.sent_per_iteration[rank], 0u) << what;
        EXPECT_EQ(r.sent_per_iteration[rank], r.formula_per_iteration[rank]) << what;
        EXPECT_EQ(r.epoch_sent[rank],
                  r.formula_per_iteration[rank] * static_cast<uint64_t>(r.iterations_per_epoch))
            << what;
      }
      // The same bytes per iteration at every batch size.
      const size_t s = i % 3;
      if (i < 3) {
        per_iteration[s][0] = r.sent_per_iteration[0];
        per_iteration[s][1] = r.sent_per_iteration[1];
      } else {
        EXPECT_EQ(r.sent_per_iteration[0], per_iteration[s][0]) << what;
        EXPECT_EQ(r.sent_per_iteration[1], per_iteration[s][1]) << what;
      }
      size_t expected_calls = 0;
      comm::CollectiveKind kind = comm::CollectiveKind::kAllReduce;
      switch (r.sync) {
        case DdpSync::kBucketed:
          expected_calls = study.units;
          break;
        case DdpSync::kPerTensor:
          expected_calls = study.tensors;
          break;
        case DdpSync::kGatherScatter:
          expected_calls = 2 * study.units;
          kind = comm::CollectiveKind::kGather;
          break;
      }
      ASSERT_EQ(r.sync_calls.size(), expected_calls) << what;
      EXPECT_EQ(r.sync_calls.front().kind, kind) << what;
      EXPECT_EQ(r.sync_calls.front().dtype, DType::kF32) << what;
      EXPECT_FALSE(r.other_calls.empty()) << what;  // the logged loss
    }
    // Gather-scatter loads rank 0 with N-1 times what each other rank sends.
    const SyncRun& gs = study.runs[0];
    ASSERT_EQ(gs.sync, DdpSync::kGatherScatter);
    EXPECT_EQ(gs.sent_per_iteration[0],
              static_cast<uint64_t>(ranks - 1) * gs.sent_per_iteration[1]);
  }
}

TEST(SyncStudy, FormulaInClosedForm) {
  // Two units of 32 and 48 padded elements, parameters of 30 and 40 elements, fp32, 4 ranks.
  const std::vector<int64_t> units{32, 48}, params{30, 40};
  EXPECT_EQ(sync_bytes_sent(DdpSync::kBucketed, units, params, 4, 4, 1),
            2 * 3 * 128 / 4 + 2 * 3 * 192 / 4);
  EXPECT_EQ(sync_bytes_sent(DdpSync::kPerTensor, units, params, 4, 4, 0),
            2 * 3 * 120 / 4 + 2 * 3 * 160 / 4);
  EXPECT_EQ(sync_bytes_sent(DdpSync::kGatherScatter, units, params, 4, 4, 0), 3u * (128 + 192));
  EXPECT_EQ(sync_bytes_sent(DdpSync::kGatherScatter, units, params, 4, 4, 2), 128u + 192);
  EXPECT_EQ(sync_bytes_sent(DdpSync::kBucketed, units, params, 4, 1, 0), 0u);
}

TEST(SyncStudy, ReportAndChartsCarryTheFigures) {
  SyncStudyOptions o = tiny(2);
  o.batch_sizes = {2};
  const SyncStudy study = run_sync_study(o);
  const std::string md = sync_markdown(study, "zs-study sync --test");
  for (const char* part : {"| gather-scatter | 2 |", "| per-tensor | 2 |", "| bucketed | 2 |",
                           "identical bit for bit", "gradients of", "gradient of"}) {
    EXPECT_NE(md.find(part), std::string::npos) << part << "\n" << md;
  }
  for (const std::string& svg : {sync_time_svg(study), sync_traffic_svg(study)}) {
    EXPECT_EQ(svg.rfind("<svg", 0), 0u);
    EXPECT_NE(svg.find("batch size per rank"), std::string::npos);
    EXPECT_NE(svg.find(">per-tensor</text>"), std::string::npos);
    EXPECT_NE(svg.find("</svg>"), std::string::npos);
  }
  EXPECT_NE(sync_traffic_svg(study).find(">formula</text>"), std::string::npos);
}

TEST(SyntheticData, LinesAreLabelledPairs) {
  int entailed = 0;
  for (uint64_t i = 0; i < 200; ++i) {
    const std::string line = entailment_line(7, i);
    EXPECT_NE(line.find(" | "), std::string::npos) << line;
    const bool yes = line.find("\tentailment\n") != std::string::npos;
    EXPECT_TRUE(yes || line.find("\tnot_entailment\n") != std::string::npos) << line;
    entailed += yes;
  }
  EXPECT_GT(entailed, 70);
  EXPECT_LT(entailed, 130);
  EXPECT_EQ(entailment_line(7, 3), entailment_line(7, 3));
}

TEST(SvgChart, TicksAreNiceAndCoverTheMaximum) {
  const std::vector<double> t = train::nice_ticks(37);
  EXPECT_EQ(t.front(), 0);
  EXPECT_GE(t.back(), 37);
  EXPECT_LE(t.size(), 11u);
  EXPECT_EQ(train::tick_label(1500000), "1.5M");
  EXPECT_EQ(train::tick_label(0.25), "0.25");
}

}  // namespace
}  // namespace zs::study
