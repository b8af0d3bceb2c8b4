// Optimizer offload to NVMe (zs-train --offload-optimizer nvme --nvme-path DIR, DeepSpeed's
// offload_optimizer.device "nvme") through the engine on local ranks: the runs equal the runs
// without offload bit for bit (every step's record and the final parameters) at stages 1–3 in
// fp32, bf16 and fp16, on one and two ranks, with SGD's momentum, striped over two directories
// and with one host buffer; the host tier holds the masters and the state buffers, not the state;
// the swap files are gone after the run; checkpoints saved with the state on NVMe resume bit for
// bit with it on NVMe, in host memory or on the device; a missing directory and a full disk under
// the swap files stop the run with an error naming them; the DeepSpeed keys are taken.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/fault_file_system.h"
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
using zs::testing::learnable_corpus;
using zs::testing::read_bytes;
using zs::testing::ScratchDir;
using zs::testing::write_text;

class NvmeOffload : public ::testing::Test {
 protected:
  NvmeOffload() {
    write_text(corpus, learnable_corpus());
    std::filesystem::create_directories(swap_a);
    std::filesystem::create_directories(swap_b);
  }
  TrainConfig run(int ranks, int stage, DType precision, OffloadTarget offload) const {
    TrainConfig c = zs::testing::short_gpt_run(corpus, ranks, stage, precision);
    c.offload_optimizer = offload;
    if (offload == OffloadTarget::kNvme) {
      c.nvme_paths = {swap_a};
      c.nvme_direct = zs::testing::direct_io_works(swap_a);
    }
    return c;
  }
  std::vector<std::string> left_in_swap() const {
    std::vector<std::string> names;
    for (const std::string& dir : {swap_a, swap_b}) {
      for (const auto& e : std::filesystem::directory_iterator(dir)) {
        names.push_back(e.path().string());
      }
    }
    return names;
  }
  ScratchDir dir;
  const std::string corpus = dir.path("corpus.txt");
  const std::string swap_a = dir.path("nvme-a");
  const std::string swap_b = dir.path("nvme-b");
};

TEST_F(NvmeOffload, EveryStageAndPrecisionGivesTheBitsOfTheRunWithout) {
  struct Case {
    int ranks;
    int stage;
    const char* optimizer = "adamw";
    int buffers = 2;  // for 3 units: every step reads and writes some
    bool striped = false;
  };
  for (const Case k : {Case{2, 1}, Case{2, 2}, Case{2, 3}, Case{1, 2}, Case{2, 2, "sgd"},
                       Case{2, 3, "adamw", 1, true}, Case{2, 2, "adamw", 3}}) {
    for (const DType precision : {DType::kF32, DType::kBF16, DType::kF16}) {
      const std::string what = std::to_string(k.ranks) + " ranks, stage " +
                               std::to_string(k.stage) + " " + k.optimizer + ", " +
                               std::to_string(k.buffers) + " buffers" +
                               (k.striped ? ", striped" : "") + " " + dtype_name(precision);
      TrainConfig in_memory = run(k.ranks, k.stage, precision, OffloadTarget::kNone);
      TrainConfig on_nvme = run(k.ranks, k.stage, precision, OffloadTarget::kNvme);
      for (TrainConfig* c : {&in_memory, &on_nvme}) {
        c->optimizer = k.optimizer;
        if (std::string(k.optimizer) == "sgd") c->momentum = 0.9f;
      }
      on_nvme.nvme_buffer_count = k.buffers;
      if (k.striped) on_nvme.nvme_paths = {swap_a, swap_b};
      in_memory.save_weights = dir.path("in_memory.safetensors");
      on_nvme.save_weights = dir.path("on_nvme.safetensors");
      const TrainResult a = run_training(in_memory);
      const TrainResult b = run_training(on_nvme);
      expect_same_steps(a, b, what);
      // Fewer buffers than units: the state went to the disk and came back. A buffer a unit:
      // the buffers keep it, and nothing is read or written.
      if (k.buffers < 3) {
        EXPECT_GT(b.nvme_bytes_read, 0u) << what;
        EXPECT_GT(b.nvme_bytes_written, 0u) << what;
      } else {
        EXPECT_EQ(b.nvme_bytes_read + b.nvme_bytes_written, 0u) << what;
      }
      EXPECT_GT(read_bytes(in_memory.save_weights).size(), 4u * 30000) << what;
      EXPECT_TRUE(read_bytes(in_memory.save_weights) == read_bytes(on_nvme.save_weights))
          << what << ": the final parameters differ";
      EXPECT_TRUE(left_in_swap().empty()) << what << ": " << left_in_swap().front();
    }
  }
}

// The host tier holds at most buffer_count units' state and masters: less than the host
// offload's tier, which holds all of the state and the masters, and on the CPU device no copy of
// the gradient shard (the step reads the shard where it was reduced).
TEST_F(NvmeOffload, TheHostTierHoldsBuffersNotTheState) {
  TrainConfig host = run(2, 3, DType::kBF16, OffloadTarget::kHost);
  TrainConfig nvme = run(2, 3, DType::kBF16, OffloadTarget::kNvme);
  nvme.nvme_buffer_count = 1;
  host.steps = nvme.steps = 2;
  const TrainResult h = run_training(host);
  const TrainResult n = run_training(nvme);
  const auto state = static_cast<size_t>(MemoryCategory::kOptimizerState);
  const auto masters = static_cast<size_t>(MemoryCategory::kMasterWeights);
  const auto grads = static_cast<size_t>(MemoryCategory::kGradients);
  ASSERT_EQ(h.host_peak_max.size(), static_cast<size_t>(kNumMemoryCategories));
  ASSERT_EQ(n.host_peak_max.size(), static_cast<size_t>(kNumMemoryCategories));
  // A 2-layer model has 3 units (the 2 blocks and the root); one buffer holds one unit's
  // m and v (the largest, rounded up to 4 KiB each, plus 4 KiB of slack), and one more its
  // master.
  EXPECT_GT(n.host_peak_max[state], 0u);    // the one buffer
  EXPECT_GT(n.host_peak_max[masters], 0u);  // the one buffer
  EXPECT_LT(n.host_peak_max[state], h.host_peak_max[state]) << n.memory_table;
  EXPECT_LT(n.host_peak_max[masters], h.host_peak_max[masters]) << n.memory_table;
  EXPECT_GT(h.host_peak_max[grads], 0u);
  EXPECT_EQ(n.host_peak_max[grads], 0u) << n.memory_table;
  EXPECT_EQ(n.peak_max[state], 0u);  // nothing of it on the device either
  EXPECT_EQ(n.peak_max[masters], 0u);
}

// A step the fp16 scaler skips changes no master, so the masters on NVMe are not read again to
// refresh the parameters (ShardedModel::after_skipped_step): with one buffer for 3 units and
// nothing of the state written yet, the skipped first steps read nothing from the disk. The run
// still gives the bits of the run without offload.
TEST_F(NvmeOffload, AStepTheScalerSkipsReadsNoMasters) {
  TrainConfig in_memory = run(2, 2, DType::kF16, OffloadTarget::kNone);
  TrainConfig on_nvme = run(2, 2, DType::kF16, OffloadTarget::kNvme);
  for (TrainConfig* c : {&in_memory, &on_nvme}) {
    // The first steps overflow (the loss scaled by 2^24), until the scale backs off.
    c->loss_scaler.initial_scale = c->loss_scaler.max_scale;
    c->loss_scaler.backoff_factor = 1.0f / 64;
    c->loss_scaler.hysteresis = 1;
    c->steps = 4;
  }
  on_nvme.nvme_buffer_count = 1;
  const TrainResult a = run_training(in_memory);
  const TrainResult b = run_training(on_nvme);
  expect_same_steps(a, b, "fp16 with skipped steps");
  ASSERT_EQ(b.steps.size(), 4u);
  ASSERT_TRUE(b.steps[0].skipped);
  EXPECT_FALSE(b.steps[3].skipped);  // the scale came down: the test reaches real steps
  for (const StepRecord& step : b.steps) {
    if (step.skipped) {
      EXPECT_EQ(step.nvme_read_bytes, 0u) << "skipped step " << step.step;
    }
  }
}

// zs-mem --offload optimizer-nvme gives each host-tier category and the NVMe bytes the run
// measures, exactly (the host tier allocates nothing during a step).
TEST_F(NvmeOffload, ZsMemsHostAndNvmeSplitIsWhatTheRunMeasures) {
  for (const DType precision : {DType::kF32, DType::kBF16}) {
    for (int stage = 1; stage <= 3; ++stage) {
      for (int buffers : {1, 4}) {
        TrainConfig c = run(2, stage, precision, OffloadTarget::kNvme);
        c.nvme_buffer_count = buffers;
        c.steps = 2;
        const TrainResult r = run_training(c);
        const MemoryEstimate e = zs::testing::zs_mem_estimate(c, 2, stage);
        const std::string what = "stage " + std::to_string(stage) + " " + dtype_name(precision) +
                                 ", " + std::to_string(buffers) + " buffers";
        EXPECT_EQ(e.config.offload, OffloadKind::kOptimizerNvme) << what;
        ASSERT_EQ(r.host_peak_max.size(), static_cast<size_t>(kNumMemoryCategories)) << what;
        for (int cat = 0; cat < kNumMemoryCategories; ++cat) {
          EXPECT_EQ(r.host_peak_max[cat], e.host[static_cast<MemoryCategory>(cat)])
              << "host " << category_name(static_cast<MemoryCategory>(cat)) << ", " << what;
        }
        EXPECT_GT(e.nvme, 0u) << what;
        EXPECT_EQ(r.nvme_bytes_max, e.nvme) << what;
        EXPECT_NE(r.memory_table.find("NVMe tier per rank"), std::string::npos) << r.memory_table;
      }
    }
  }
}

TEST_F(NvmeOffload, CheckpointsResumeBitForBitWhereverTheStateLives) {
  TrainConfig full = run(2, 3, DType::kF32, OffloadTarget::kNvme);
  full.checkpoint_dir = dir.path("ckpt");
  full.checkpoint_interval = 3;
  full.save_weights = dir.path("full.safetensors");
  const TrainResult a = run_training(full);
  for (const OffloadTarget target :
       {OffloadTarget::kNvme, OffloadTarget::kHost, OffloadTarget::kNone}) {
    TrainConfig resumed = run(2, 3, DType::kF32, target);
    resumed.resume = full.checkpoint_dir + "/step-000003";
    resumed.save_weights = dir.path("resumed.safetensors");
    const TrainResult b = run_training(resumed);
    ASSERT_EQ(b.steps.size(), 3u);
    TrainResult tail;
    tail.steps.assign(a.steps.begin() + 3, a.steps.end());
    const std::string what =
        std::string("resumed with the state on ") + offload_target_name(target);
    expect_same_steps(tail, b, what);
    EXPECT_TRUE(read_bytes(full.save_weights) == read_bytes(resumed.save_weights)) << what;
  }
  // A checkpoint of 2 ranks loaded by 1 (a resharded load) into state on NVMe gives the bits of
  // the same load into resident state.
  TrainResult one_rank[2];
  for (const OffloadTarget target : {OffloadTarget::kNone, OffloadTarget::kNvme}) {
    TrainConfig one = run(1, 3, DType::kF32, target);
    one.micro_batch = 4;  // the global batch of 2 ranks × 2
    one.resume = full.checkpoint_dir + "/step-000003";
    one_rank[target == OffloadTarget::kNvme] = run_training(one);
    ASSERT_EQ(one_rank[target == OffloadTarget::kNvme].steps.size(), 3u);
  }
  expect_same_steps(one_rank[0], one_rank[1], "resharded 2 -> 1 rank");
}

TEST_F(NvmeOffload, AMissingDirectoryAndAFullDiskStopTheRunNamingThem) {
  TrainConfig missing = run(2, 2, DType::kBF16, OffloadTarget::kNvme);
  missing.nvme_paths = {dir.path("no-such-dir")};
  const std::string none = error_message<IoError>([&] { run_training(missing); });
  EXPECT_NE(none.find("no-such-dir"), std::string::npos) << none;
  EXPECT_NE(none.find("--nvme-path"), std::string::npos) << none;
}

TEST_F(NvmeOffload, AFullDiskUnderTheSwapFilesStopsTheRunNamingTheFile) {
  FaultFileSystem faults;
  // The swap files fill up after 20 writes of state (a few steps in: with 1 buffer for 3 units
  // each step writes 2 units' m and v on both ranks).
  faults.add_rule(parse_fault_rule("write:optimizer-state.swap:enospc:after_calls=20"));
  TrainConfig c = run(2, 2, DType::kBF16, OffloadTarget::kNvme);
  c.nvme_buffer_count = 1;
  c.file_system = &faults;
  const std::string message = error_message<IoError>([&] { run_training(c); });
  EXPECT_NE(message.find("optimizer-state.swap"), std::string::npos) << message;
  EXPECT_NE(message.find("No space left on device"), std::string::npos) << message;
  // The advice fits a swap file (it used to speak of checkpoints only; issue 28, finding 7).
  EXPECT_NE(message.find("--nvme-path"), std::string::npos) << message;
  EXPECT_EQ(message.find("for checkpoints"), std::string::npos) << message;
  EXPECT_GT(faults.fired(0), 0);
}

TEST(NvmeOffloadConfig, FlagsAndDeepSpeedKeys) {
  TrainConfig c;
  const char* flags[] = {"zs-train",      "--zero-stage", "2",  "--offload-optimizer", "nvme",
                         "--nvme-path",   "/a",           "/b", "--nvme-buffer-count", "3",
                         "--nvme-direct", "false"};
  ASSERT_FALSE(parse_train_args(12, flags, c, nullptr, nullptr));
  EXPECT_EQ(c.offload_optimizer, OffloadTarget::kNvme);
  EXPECT_EQ(c.nvme_paths, (std::vector<std::string>{"/a", "/b"}));
  EXPECT_EQ(c.nvme_buffer_count, 3);
  EXPECT_FALSE(c.nvme_direct);
  validate(c, 2);
  const TrainPlan plan = translate(c, 0, 2);
  EXPECT_TRUE(plan.offload_optimizer);
  EXPECT_TRUE(plan.optimizer_state_on_nvme);

  TrainConfig stray;
  stray.stage = 1;
  stray.nvme_paths = {"/a"};
  const std::string message = error_message<InvalidArgument>([&] { validate(stray, 2); });
  EXPECT_NE(message.find("--nvme-path is the swap directory"), std::string::npos) << message;
  stray.offload_optimizer = OffloadTarget::kNvme;
  stray.nvme_buffer_count = 0;
  EXPECT_NE(error_message<InvalidArgument>([&] {
              validate(stray, 2);
            }).find("--nvme-buffer-count must be in [1, 64]"),
            std::string::npos);

  TrainConfig d;
  std::vector<std::string> notes;
  apply_deepspeed_json(R"({"zero_optimization": {"stage": 3, "offload_optimizer":
                           {"device": "nvme", "nvme_path": "/local_nvme", "buffer_count": 5,
                            "pipeline_read": true, "fast_init": false}}})",
                       "ds.json", d, &notes);
  EXPECT_EQ(d.offload_optimizer, OffloadTarget::kNvme);
  EXPECT_EQ(d.nvme_paths, (std::vector<std::string>{"/local_nvme"}));
  EXPECT_EQ(d.nvme_buffer_count, 5);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("pipeline_read"), std::string::npos) << notes[0];
  EXPECT_NE(notes[1].find("fast_init"), std::string::npos) << notes[1];
}

}  // namespace
}  // namespace zs::train
