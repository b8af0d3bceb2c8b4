// zs-train --ddp-sync end to end: whole engine runs of a small GPT at stage 0 give the same losses
// bit for bit with each sync at 2 and 3 ranks (every backend reduces element-wise in rank order,
// sharding/sharded_model.h). The flag itself is tested in cli_test.cc.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/corpus.h"
#include "tests/support/scratch.h"
#include "tests/support/short_run.h"
#include "train/config.h"
#include "train/engine.h"

namespace zs::train {
namespace {

using sharding::DdpSync;

TEST(DdpSyncEngine, TheThreeSyncsGiveIdenticalLosses) {
  zs::testing::ScratchDir dir;
  const std::string corpus = dir.path("corpus.txt");
  zs::testing::write_text(corpus, zs::testing::learnable_corpus());
  for (int ranks : {2, 3}) {
    std::vector<float> reference;
    for (DdpSync sync : {DdpSync::kBucketed, DdpSync::kPerTensor, DdpSync::kGatherScatter}) {
      TrainConfig c = zs::testing::short_gpt_run(corpus, ranks, /*stage=*/0, DType::kF32);
      c.ddp_sync = sync;
      const TrainResult result = run_training(c);
      std::vector<float> losses;
      for (const StepRecord& s : result.steps) losses.push_back(s.loss);
      ASSERT_EQ(losses.size(), 6u);
      if (sync == DdpSync::kBucketed) {
        reference = losses;
      } else {
        EXPECT_EQ(losses, reference) << ddp_sync_flag(sync) << " at " << ranks << " ranks";
      }
    }
  }
}

}  // namespace
}  // namespace zs::train
