// zs-train --ddp-sync: the flag's three spellings reach the ShardingConfig through translate(),
// other stages and bad names are refused with an error naming the flag, and whole engine runs of
// a small GPT at stage 0 give the same losses bit for bit with each sync at 2 and 3 ranks (every
// backend reduces element-wise in rank order, sharding/sharded_model.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/error.h"
#include "tests/support/corpus.h"
#include "tests/support/error_text.h"
#include "tests/support/scratch.h"
#include "tests/support/short_run.h"
#include "train/cli.h"
#include "train/config.h"
#include "train/engine.h"

namespace zs::train {
namespace {

using sharding::DdpSync;
using zs::testing::invalid_argument_message;

TrainConfig parse(std::vector<const char*> args) {
  args.insert(args.begin(), "zs-train");
  args.push_back("--text");
  args.push_back("unused.txt");  // no data flags would select the built-in demo
  TrainConfig c;
  EXPECT_FALSE(parse_train_args(static_cast<int>(args.size()), args.data(), c, nullptr, nullptr));
  return c;
}

TEST(DdpSyncFlag, EachSyncReachesTheShardingConfig) {
  struct Case {
    const char* flag;
    DdpSync sync;
  };
  for (Case k :
       {Case{"bucketed", DdpSync::kBucketed}, Case{"per-tensor", DdpSync::kPerTensor},
        Case{"gather-scatter", DdpSync::kGatherScatter}, Case{"per_tensor", DdpSync::kPerTensor}}) {
    const TrainConfig c = parse({"--strategy", "ddp", "--ddp-sync", k.flag});
    EXPECT_EQ(c.ddp_sync, k.sync) << k.flag;
    EXPECT_NO_THROW(validate(c, 2)) << k.flag;
    EXPECT_EQ(translate(c, 1, 2).sharding.ddp_sync, k.sync) << k.flag;
  }
  EXPECT_EQ(parse({}).ddp_sync, DdpSync::kBucketed);  // the default
  EXPECT_EQ(ddp_sync_flag(DdpSync::kGatherScatter), "gather-scatter");
}

TEST(DdpSyncFlag, NaiveSyncsNeedStageZeroAndGatherScatterTheCpu) {
  for (const char* sync : {"per-tensor", "gather-scatter"}) {
    for (const char* stage : {"1", "2", "3"}) {
      const TrainConfig c = parse({"--zero-stage", stage, "--ddp-sync", sync});
      const std::string message = invalid_argument_message([&] { validate(c, 2); });
      EXPECT_NE(message.find(std::string("--ddp-sync ") + sync), std::string::npos) << message;
      EXPECT_NE(message.find("stage 0"), std::string::npos) << message;
    }
  }
  EXPECT_NO_THROW(validate(parse({"--zero-stage", "3", "--ddp-sync", "bucketed"}), 2));
  TrainConfig gpu = parse({"--zero-stage", "0", "--ddp-sync", "gather-scatter"});
  gpu.device = "cuda";
  gpu.backend = "nccl";
  const std::string message = invalid_argument_message([&] { validate(gpu, 2); });
  EXPECT_NE(message.find("CPU only"), std::string::npos) << message;
  const std::string bad = invalid_argument_message([&] { parse_ddp_sync("ring"); });
  EXPECT_NE(bad.find("'ring' is not one of bucketed, per-tensor, gather-scatter"),
            std::string::npos)
      << bad;
}

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
