// Optimizer offload to the host tier (zs-train --offload-optimizer host, DeepSpeed's
// offload_optimizer.device "cpu") through the engine on local ranks: the runs equal the runs
// without offload bit for bit (every step's loss, gradient norm and loss scale, and the final
// parameters written with --save-weights) at stages 1–3 in fp32, bf16 and fp16, on two ranks and
// on one (where every stage runs as stage 0), hybrid on four, and with SGD's momentum; the masters
// and the optimizer state leave the device's categories and the host tier holds what zs-mem
// --offload optimizer says, exactly; a host tier over --host-memory-budget is an OutOfMemory naming
// the tier; checkpoints saved with offload resume bit for bit, with and without offload;
// --profile-memory writes the host tier's timeline too; and the flags and DeepSpeed keys are taken
// or refused with the reason.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "models/gpt_presets.h"
#include "runtime/error.h"
#include "tests/support/corpus.h"
#include "tests/support/scratch.h"
#include "tests/support/short_run.h"
#include "tests/support/step_bits.h"
#include "tests/support/zs_mem.h"
#include "train/cli.h"
#include "train/config.h"
#include "train/engine.h"
#include "train/memory_model.h"

namespace zs::train {
namespace {

using zs::testing::error_message;
using zs::testing::expect_same_steps;
using zs::testing::file_exists;
using zs::testing::learnable_corpus;
using zs::testing::read_bytes;
using zs::testing::ScratchDir;
using zs::testing::write_text;

// zs-mem's estimate of the run `c` (the tiny preset with c's shape) on two ranks at `stage`.
MemoryEstimate zs_mem_estimate(const TrainConfig& c, int stage) {
  return zs::testing::zs_mem_estimate(c, 2, stage);
}

class OptimizerOffload : public ::testing::Test {
 protected:
  OptimizerOffload() { write_text(corpus, learnable_corpus()); }
  // short_gpt_run: micro-batch 2 × 2 accumulated, clipping at 1, AdamW with weight decay.
  TrainConfig run(int ranks, int stage, DType precision, bool offload) const {
    TrainConfig c = zs::testing::short_gpt_run(corpus, ranks, stage, precision);
    if (offload) c.offload_optimizer = OffloadTarget::kHost;
    return c;
  }
  ScratchDir dir;
  const std::string corpus = dir.path("corpus.txt");
};

TEST_F(OptimizerOffload, EveryStageAndPrecisionGivesTheBitsOfTheRunWithout) {
  struct Case {
    int ranks;
    int stage;
    int hybrid_group = 0;
    const char* optimizer = "adamw";
    int grad_accum = 1;  // with > 1: gradients summed locally and reduced once per step
  };
  for (const Case k : {Case{2, 1}, Case{2, 2}, Case{2, 3}, Case{1, 2}, Case{4, 3, 2},
                       Case{2, 2, 0, "sgd"}, Case{2, 1, 0, "adamw", 3}}) {
    for (const DType precision : {DType::kF32, DType::kBF16, DType::kF16}) {
      const std::string what = std::to_string(k.ranks) + " ranks, stage " +
                               std::to_string(k.stage) + " hybrid " +
                               std::to_string(k.hybrid_group) + " " + k.optimizer + " accum " +
                               std::to_string(k.grad_accum) + " " + dtype_name(precision);
      TrainConfig in_memory = run(k.ranks, k.stage, precision, false);
      TrainConfig offloaded = run(k.ranks, k.stage, precision, true);
      for (TrainConfig* c : {&in_memory, &offloaded}) {
        c->hybrid_group = k.hybrid_group;
        c->optimizer = k.optimizer;
        if (k.grad_accum > 1) {
          c->grad_accum = k.grad_accum;
          c->grad_sync = sharding::GradSync::kPerStep;
        }
      }
      in_memory.save_weights = dir.path("in_memory.safetensors");
      offloaded.save_weights = dir.path("offloaded.safetensors");
      const TrainResult a = run_training(in_memory);
      const TrainResult b = run_training(offloaded);
      expect_same_steps(a, b, what);
      const std::vector<uint8_t> weights = read_bytes(in_memory.save_weights);
      EXPECT_GT(weights.size(), 4u * 30000) << what;  // the model's fp32 parameters and more
      EXPECT_TRUE(weights == read_bytes(offloaded.save_weights))
          << what << ": the final parameters differ";
      EXPECT_TRUE(a.host_peak_max.empty()) << what;
      ASSERT_EQ(b.host_peak_max.size(), static_cast<size_t>(kNumMemoryCategories)) << what;
    }
  }
}

// The device's master_weights and optimizer_state are empty and the host tier holds what zs-mem
// says; the other device categories are as zs-mem says for the offloaded run (the engine_test
// checks the same without offload).
TEST_F(OptimizerOffload, ZsMemsDeviceAndHostSplitIsWhatTheRunMeasures) {
  for (const DType precision : {DType::kF32, DType::kBF16}) {
    for (int stage = 1; stage <= 3; ++stage) {
      TrainConfig c = run(2, stage, precision, true);
      c.steps = 3;
      const TrainResult r = run_training(c);
      const MemoryEstimate e = zs_mem_estimate(c, stage);
      const std::string what = "stage " + std::to_string(stage) + " " + dtype_name(precision);
      EXPECT_EQ(e.config.offload, OffloadKind::kOptimizer);
      for (const MemoryCategory cat : {MemoryCategory::kParameters, MemoryCategory::kMasterWeights,
                                       MemoryCategory::kOptimizerState}) {
        EXPECT_EQ(r.peak_max[static_cast<int>(cat)], e.peak[cat]) << category_name(cat) << what;
      }
      EXPECT_EQ(r.peak_max[static_cast<int>(MemoryCategory::kMasterWeights)], 0u) << what;
      EXPECT_EQ(r.peak_max[static_cast<int>(MemoryCategory::kOptimizerState)], 0u) << what;
      const uint64_t grads = r.peak_max[static_cast<int>(MemoryCategory::kGradients)];
      EXPECT_GE(grads, e.peak_low[MemoryCategory::kGradients]) << what;
      EXPECT_LE(grads, e.peak_high[MemoryCategory::kGradients]) << what;
      ASSERT_EQ(r.host_peak_max.size(), static_cast<size_t>(kNumMemoryCategories)) << what;
      for (int cat = 0; cat < kNumMemoryCategories; ++cat) {
        EXPECT_EQ(r.host_peak_max[cat], e.host[static_cast<MemoryCategory>(cat)])
            << "host " << category_name(static_cast<MemoryCategory>(cat)) << ", " << what;
        EXPECT_EQ(r.host_peak_min[cat], r.host_peak_max[cat]) << what;  // equal shards
      }
      EXPECT_EQ(r.host_peak_total_max, e.host.total()) << what;
      EXPECT_GT(e.host[MemoryCategory::kMasterWeights], 0u);
      EXPECT_NE(r.memory_table.find("host tier per rank"), std::string::npos) << r.memory_table;
    }
  }
}

TEST_F(OptimizerOffload, AHostTierOverItsBudgetIsAnOutOfMemoryNamingIt) {
  TrainConfig c = run(2, 2, DType::kBF16, true);
  c.host_memory_budget = 4096;
  const std::string message = error_message<OutOfMemory>([&] { run_training(c); });
  EXPECT_NE(message.find("host tier"), std::string::npos) << message;
  EXPECT_NE(message.find("--host-memory-budget 4.0 KiB"), std::string::npos) << message;
  EXPECT_NE(message.find("raise --host-memory-budget"), std::string::npos) << message;
  // zs-mem's host figure is the tier's size exactly: a budget of that many bytes runs (the tier
  // itself would refuse a byte more, offload/host_pool.h), one byte less is refused up front.
  const uint64_t host = zs_mem_estimate(c, 2).host.total();
  c.host_memory_budget = host;
  EXPECT_EQ(run_training(c).steps.size(), 6u);
  c.host_memory_budget = host - 1;
  EXPECT_NE(error_message<OutOfMemory>([&] { run_training(c); }).find(std::to_string(host)),
            std::string::npos);
}

TEST_F(OptimizerOffload, CheckpointsSavedWithOffloadResumeBitForBit) {
  for (const DType precision : {DType::kF32, DType::kF16}) {
    TrainConfig full = run(2, 3, precision, true);
    full.checkpoint_dir = dir.path(std::string("ckpt_") + dtype_name(precision));
    full.checkpoint_interval = 3;
    full.save_weights = dir.path("full.safetensors");
    const TrainResult a = run_training(full);
    // Where the state lived is not part of the checkpoint: resumed with and without offload.
    for (const bool offload : {true, false}) {
      TrainConfig resumed = run(2, 3, precision, offload);
      resumed.resume = full.checkpoint_dir + "/step-000003";
      resumed.save_weights = dir.path("resumed.safetensors");
      const TrainResult b = run_training(resumed);
      ASSERT_EQ(b.steps.size(), 3u);
      TrainResult tail;
      tail.steps.assign(a.steps.begin() + 3, a.steps.end());
      expect_same_steps(tail, b,
                        std::string("resumed ") + (offload ? "with" : "without") + " offload, " +
                            dtype_name(precision));
      EXPECT_GT(read_bytes(full.save_weights).size(), 4u * 30000);
      EXPECT_TRUE(read_bytes(full.save_weights) == read_bytes(resumed.save_weights))
          << "resumed " << (offload ? "with" : "without") << " offload, " << dtype_name(precision);
    }
  }
}

TEST_F(OptimizerOffload, ProfileMemoryWritesTheHostTierToo) {
  TrainConfig c = run(2, 3, DType::kBF16, true);
  c.steps = 2;
  c.profile_memory = dir.path("memory.json");
  run_training(c);
  for (int r = 0; r < 2; ++r) {
    const std::string json = dir.path("memory.rank" + std::to_string(r) + ".host.json");
    ASSERT_TRUE(file_exists(json)) << json;
    ASSERT_TRUE(file_exists(dir.path("memory.rank" + std::to_string(r) + ".host.svg")));
    const std::vector<uint8_t> bytes = read_bytes(json);
    const std::string text(bytes.begin(), bytes.end());
    EXPECT_NE(text.find("host tier"), std::string::npos) << text.substr(0, 200);
    EXPECT_NE(text.find("\"optimizer_state\": "), std::string::npos);
  }
}

TEST(OptimizerOffloadConfig, FlagsAndDeepSpeedKeys) {
  TrainConfig c;
  const char* flags[] = {"zs-train", "--offload-optimizer", "host", "--host-memory-budget", "2GiB"};
  ASSERT_FALSE(parse_train_args(5, flags, c, nullptr, nullptr));
  EXPECT_EQ(c.offload_optimizer, OffloadTarget::kHost);
  EXPECT_EQ(c.host_memory_budget, size_t{2} << 30);
  EXPECT_EQ(translate(c, 0, 2).offload_optimizer, true);
  EXPECT_EQ(memory_model_config(c, 2, 3).offload, OffloadKind::kOptimizer);

  // NVMe (tests/train/nvme_offload_test.cc runs it): the flag alone is refused at validation,
  // naming the missing swap directory.
  TrainConfig n;
  const char* nvme[] = {"zs-train", "--offload-optimizer", "nvme", "--zero-stage", "1"};
  ASSERT_FALSE(parse_train_args(5, nvme, n, nullptr, nullptr));
  EXPECT_EQ(n.offload_optimizer, OffloadTarget::kNvme);
  const std::string no_path = error_message<InvalidArgument>([&] { validate(n, 2); });
  EXPECT_NE(no_path.find("needs --nvme-path DIR"), std::string::npos) << no_path;

  // DeepSpeed: device cpu is the host tier; pin_memory is accepted with a note; buffer_count is
  // the NVMe tier's (taken).
  TrainConfig d;
  std::vector<std::string> notes;
  apply_deepspeed_json(R"({"zero_optimization": {"stage": 2, "offload_optimizer":
                           {"device": "cpu", "pin_memory": true, "buffer_count": 4}}})",
                       "ds.json", d, &notes);
  EXPECT_EQ(d.offload_optimizer, OffloadTarget::kHost);
  EXPECT_EQ(d.stage, 2);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("pin_memory"), std::string::npos) << notes[0];
  EXPECT_EQ(d.nvme_buffer_count, 4);
  apply_deepspeed_json(R"({"zero_optimization": {"offload_optimizer": {"device": "none"}}})",
                       "ds.json", d, nullptr);
  EXPECT_EQ(d.offload_optimizer, OffloadTarget::kNone);
  for (const char* refused :
       {R"({"zero_optimization": {"offload_optimizer": {"device": "cpu", "ratio": 0.5}}})"}) {
    const std::string message = error_message<InvalidArgument>(
        [&] { apply_deepspeed_json(refused, "ds.json", d, nullptr); });
    EXPECT_NE(message.find("not implemented"), std::string::npos) << refused << "\n" << message;
  }
  // Parameter offload (stage 3): cpu is the host tier, nvme the NVMe tier; other devices name
  // the key.
  apply_deepspeed_json(R"({"zero_optimization": {"offload_param": {"device": "cpu"}}})", "ds.json",
                       d, nullptr);
  EXPECT_EQ(d.offload_param, OffloadTarget::kHost);
  apply_deepspeed_json(
      R"({"zero_optimization": {"offload_param": {"device": "nvme", "nvme_path": "/x",
                                                   "buffer_count": 6, "buffer_size": 1e8}}})",
      "ds.json", d, nullptr);
  EXPECT_EQ(d.offload_param, OffloadTarget::kNvme);
  EXPECT_EQ(d.param_buffer_count, 6);
  EXPECT_EQ(d.nvme_paths, std::vector<std::string>{"/x"});
  const std::string gpu = error_message<InvalidArgument>([&] {
    apply_deepspeed_json(R"({"zero_optimization": {"offload_param": {"device": "gpu"}}})",
                         "ds.json", d, nullptr);
  });
  EXPECT_NE(gpu.find("zero_optimization.offload_param.device"), std::string::npos) << gpu;

  // Stage 0 has no sharded optimizer to move.
  TrainConfig ddp;
  ddp.stage = 0;
  ddp.offload_optimizer = OffloadTarget::kHost;
  const std::string stage0 = error_message<InvalidArgument>([&] { validate(ddp, 2); });
  EXPECT_NE(stage0.find("needs ZeRO stage 1, 2 or 3"), std::string::npos) << stage0;
  ddp.stage = 1;
  validate(ddp, 2);
  EXPECT_NE(describe(ddp).find("optimizer offloaded to the host"), std::string::npos);
}

}  // namespace
}  // namespace zs::train
