// zs-train's flags that decide the ZeRO stage: --strategy, --zero-stage and the DeepSpeed
// config's zero_optimization.stage. Flags that restate one stage agree; any two of them that
// disagree are an error naming both values.
// And --ddp-sync, stage 0's gradient sync; activation checkpointing's flags and DeepSpeed keys.
#include "train/cli.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/error.h"
#include "tests/support/error_text.h"
#include "tests/support/scratch.h"
#include "train/config.h"

namespace zs::train {
namespace {

using zs::testing::error_message;
using zs::testing::ScratchDir;
using zs::testing::write_text;

TrainConfig parse(std::vector<const char*> args) {
  args.insert(args.begin(), "zs-train");
  args.push_back("--text");
  args.push_back("unused.txt");  // no data flags would select the built-in demo
  TrainConfig c;
  EXPECT_FALSE(parse_train_args(static_cast<int>(args.size()), args.data(), c, nullptr, nullptr));
  return c;
}

std::string parse_error(std::vector<const char*> args) {
  args.insert(args.begin(), "zs-train");
  args.push_back("--text");
  args.push_back("unused.txt");
  return error_message<InvalidArgument>([&] {
    TrainConfig c;
    parse_train_args(static_cast<int>(args.size()), args.data(), c, nullptr, nullptr);
  });
}

TEST(TrainCli, CommTimeoutTakesPositiveSeconds) {
  EXPECT_EQ(parse({}).comm_timeout_s, 0.0);  // unset: ZS_COMM_TIMEOUT_S, else 600 s
  EXPECT_EQ(parse({"--comm-timeout", "2.5"}).comm_timeout_s, 2.5);
  for (const char* bad : {"0", "-3", "soon"}) {
    const std::string message = parse_error({"--comm-timeout", bad});
    EXPECT_NE(message.find("--comm-timeout"), std::string::npos) << bad << ": " << message;
  }
}

TEST(TrainCliStage, StrategyAndZeroStageThatAgreeAreAccepted) {
  EXPECT_EQ(parse({"--strategy", "zero1", "--zero-stage", "1"}).stage, 1);
  EXPECT_EQ(parse({"--strategy", "ddp", "--zero-stage", "0"}).stage, 0);
  EXPECT_EQ(parse({"--strategy", "zero2"}).stage, 2);
  EXPECT_EQ(parse({"--zero-stage", "0"}).stage, 0);
  EXPECT_EQ(parse({"--strategy", "hybrid", "--hybrid-group", "2", "--zero-stage", "3"}).stage, 3);
  EXPECT_EQ(parse({}).stage, 3);  // the default
}

TEST(TrainCliStage, StrategyAndZeroStageThatDisagreeAreAnErrorNamingBoth) {
  const std::string zero1 = parse_error({"--strategy", "zero1", "--zero-stage", "3"});
  EXPECT_NE(zero1.find("--strategy zero1"), std::string::npos) << zero1;
  EXPECT_NE(zero1.find("stage 1"), std::string::npos) << zero1;
  EXPECT_NE(zero1.find("--zero-stage is 3"), std::string::npos) << zero1;
  const std::string ddp = parse_error({"--zero-stage", "2", "--strategy", "ddp"});
  EXPECT_NE(ddp.find("--strategy ddp"), std::string::npos) << ddp;
  EXPECT_NE(ddp.find("--zero-stage is 2"), std::string::npos) << ddp;
  const std::string hybrid =
      parse_error({"--strategy", "hybrid", "--hybrid-group", "2", "--zero-stage", "2"});
  EXPECT_NE(hybrid.find("--strategy hybrid"), std::string::npos) << hybrid;
  EXPECT_NE(hybrid.find("--zero-stage is 2"), std::string::npos) << hybrid;
  EXPECT_NE(parse_error({"--strategy", "hybrid"}).find("--hybrid-group"), std::string::npos);
  EXPECT_NE(parse_error({"--strategy", "zero4"}).find("zero4"), std::string::npos);
}

TEST(TrainCliStage, AStageFlagThatDisagreesWithTheDeepSpeedStageIsAnErrorNamingBoth) {
  ScratchDir dir;
  const std::string ds = dir.path("ds.json");
  write_text(ds, R"({"zero_optimization": {"stage": 2}})");
  EXPECT_EQ(parse({"--deepspeed", ds.c_str()}).stage, 2);
  EXPECT_EQ(parse({"--deepspeed", ds.c_str(), "--zero-stage", "2"}).stage, 2);
  EXPECT_EQ(parse({"--deepspeed", ds.c_str(), "--strategy", "zero2"}).stage, 2);
  const std::string zero_stage = parse_error({"--deepspeed", ds.c_str(), "--zero-stage", "1"});
  EXPECT_NE(zero_stage.find("--zero-stage 1"), std::string::npos) << zero_stage;
  EXPECT_NE(zero_stage.find("zero_optimization.stage 2"), std::string::npos) << zero_stage;
  const std::string ddp = parse_error({"--deepspeed", ds.c_str(), "--strategy", "ddp"});
  EXPECT_NE(ddp.find("--strategy ddp (ZeRO stage 0)"), std::string::npos) << ddp;
  EXPECT_NE(ddp.find("zero_optimization.stage 2"), std::string::npos) << ddp;
  // The flags still have to agree with each other.
  EXPECT_NE(parse_error({"--deepspeed", ds.c_str(), "--strategy", "zero2", "--zero-stage", "1"})
                .find("--zero-stage is 1"),
            std::string::npos);
  // A file without a stage leaves the default.
  const std::string no_stage = dir.path("no_stage.json");
  write_text(no_stage, R"({"train_micro_batch_size_per_gpu": 2})");
  EXPECT_EQ(parse({"--deepspeed", no_stage.c_str()}).stage, 3);
}

TEST(TrainCliStage, ResolveStageTakesTheGivenValueAndNamesBothOfTwoThatDisagree) {
  EXPECT_EQ(resolve_stage("", 2, -1, 0), 2);
  EXPECT_EQ(resolve_stage("zero3", -1, 3, 0), 3);
  EXPECT_EQ(resolve_stage("", -1, 1, 0), 1);
  const std::string file = error_message<InvalidArgument>([] { resolve_stage("zero3", -1, 1, 0); });
  EXPECT_NE(file.find("--strategy zero3 (ZeRO stage 3)"), std::string::npos) << file;
  EXPECT_NE(file.find("zero_optimization.stage 1"), std::string::npos) << file;
  const std::string flags =
      error_message<InvalidArgument>([] { resolve_stage("zero3", 0, -1, 0); });
  EXPECT_NE(flags.find("--strategy zero3"), std::string::npos) << flags;
  EXPECT_NE(flags.find("--zero-stage is 0"), std::string::npos) << flags;
}

// --ddp-sync: the three spellings reach the ShardingConfig through translate(); other stages,
// gather-scatter on a GPU and bad names are refused with an error naming the flag.
TEST(DdpSyncFlag, EachSyncReachesTheShardingConfig) {
  struct Case {
    const char* flag;
    sharding::DdpSync sync;
  };
  for (Case k : {Case{"bucketed", sharding::DdpSync::kBucketed},
                 Case{"per-tensor", sharding::DdpSync::kPerTensor},
                 Case{"gather-scatter", sharding::DdpSync::kGatherScatter},
                 Case{"per_tensor", sharding::DdpSync::kPerTensor}}) {
    const TrainConfig c = parse({"--strategy", "ddp", "--ddp-sync", k.flag});
    EXPECT_EQ(c.ddp_sync, k.sync) << k.flag;
    EXPECT_NO_THROW(validate(c, 2)) << k.flag;
    EXPECT_EQ(translate(c, 1, 2).sharding.ddp_sync, k.sync) << k.flag;
  }
  EXPECT_EQ(parse({}).ddp_sync, sharding::DdpSync::kBucketed);  // the default
  EXPECT_EQ(ddp_sync_flag(sharding::DdpSync::kGatherScatter), "gather-scatter");
}

TEST(DdpSyncFlag, NaiveSyncsNeedStageZeroAndGatherScatterTheCpu) {
  for (const char* sync : {"per-tensor", "gather-scatter"}) {
    for (const char* stage : {"1", "2", "3"}) {
      const TrainConfig c = parse({"--zero-stage", stage, "--ddp-sync", sync});
      const std::string message = zs::testing::invalid_argument_message([&] { validate(c, 2); });
      EXPECT_NE(message.find(std::string("--ddp-sync ") + sync), std::string::npos) << message;
      EXPECT_NE(message.find("stage 0"), std::string::npos) << message;
    }
  }
  EXPECT_NO_THROW(validate(parse({"--zero-stage", "3", "--ddp-sync", "bucketed"}), 2));
  TrainConfig gpu = parse({"--zero-stage", "0", "--ddp-sync", "gather-scatter"});
  gpu.device = "cuda";
  gpu.backend = "nccl";
  const std::string message = zs::testing::invalid_argument_message([&] { validate(gpu, 2); });
  EXPECT_NE(message.find("CPU only"), std::string::npos) << message;
  const std::string bad = zs::testing::invalid_argument_message([&] { parse_ddp_sync("ring"); });
  EXPECT_NE(bad.find("'ring' is not one of bucketed, per-tensor, gather-scatter"),
            std::string::npos)
      << bad;
}

TEST(ActivationCheckpointingFlags, EveryUnitOrEveryKthReachesTheShardingConfig) {
  EXPECT_EQ(parse({}).checkpoint_every, 0);  // off by default
  EXPECT_EQ(parse({"--activation-checkpointing"}).checkpoint_every, 1);
  EXPECT_EQ(parse({"--checkpoint-every", "3"}).checkpoint_every, 3);
  EXPECT_EQ(parse({"--activation-checkpointing", "--checkpoint-every", "2"}).checkpoint_every, 2);
  const TrainConfig c = parse({"--checkpoint-every", "2"});
  EXPECT_NO_THROW(validate(c, 1));
  EXPECT_EQ(translate(c, 0, 1).sharding.checkpoint_every, 2);
  EXPECT_NE(describe(c).find("activation checkpointing every 2 units"), std::string::npos)
      << describe(c);
  const std::string negative = parse_error({"--checkpoint-every", "-1"});
  EXPECT_NE(negative.find("--checkpoint-every"), std::string::npos) << negative;
}

TEST(ActivationCheckpointingFlags, TheDeepSpeedSectionTurnsItOnAndExplainsItsKeys) {
  TrainConfig c;
  std::vector<std::string> notes;
  apply_deepspeed_json(R"({"activation_checkpointing": {"partition_activations": true,
                           "cpu_checkpointing": true, "contiguous_memory_optimization": false,
                           "number_checkpoints": 12, "synchronize_checkpoint_boundary": false,
                           "profile": false}})",
                       "ds.json", c, &notes);
  EXPECT_EQ(c.checkpoint_every, 1);
  std::string all;
  for (const std::string& note : notes) all += note + "\n";
  EXPECT_EQ(all.find("not implemented"), std::string::npos) << all;
  for (const char* key : {"partition_activations", "cpu_checkpointing = true: not available",
                          "contiguous_memory_optimization", "number_checkpoints",
                          "synchronize_checkpoint_boundary", "profile"}) {
    EXPECT_NE(all.find(std::string("activation_checkpointing.") + key), std::string::npos)
        << key << "\n"
        << all;
  }
  // An unknown key inside is an error naming it; a wrong type too.
  TrainConfig d;
  const std::string unknown = error_message<InvalidArgument>([&] {
    apply_deepspeed_json(R"({"activation_checkpointing": {"partition_activation": true}})",
                         "ds.json", d, nullptr);
  });
  EXPECT_NE(unknown.find("activation_checkpointing.partition_activation"), std::string::npos)
      << unknown;
  const std::string wrong = error_message<InvalidArgument>([&] {
    apply_deepspeed_json(R"({"activation_checkpointing": {"number_checkpoints": "all"}})",
                         "ds.json", d, nullptr);
  });
  EXPECT_NE(wrong.find("activation_checkpointing.number_checkpoints"), std::string::npos) << wrong;
  // The flag chooses fewer units than the section's every unit.
  ScratchDir dir;
  const std::string ds = dir.path("ds.json");
  write_text(ds, R"({"activation_checkpointing": {}})");
  EXPECT_EQ(parse({"--deepspeed", ds.c_str()}).checkpoint_every, 1);
  EXPECT_EQ(parse({"--deepspeed", ds.c_str(), "--checkpoint-every", "4"}).checkpoint_every, 4);
  EXPECT_EQ(parse({"--deepspeed", ds.c_str(), "--checkpoint-every", "0"}).checkpoint_every, 0);
}

}  // namespace
}  // namespace zs::train
