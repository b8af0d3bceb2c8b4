// Parameter offload (zs-train --offload-param host|nvme, DeepSpeed's offload_param) through the
// engine on local ranks: stage 3's runs with the parameter shards in the host tier or on NVMe
// equal the runs without bit for bit (every step's record and the final parameters) in fp32,
// bf16 and fp16, with the optimizer state in host memory or on NVMe, with prefetch off, with one
// host buffer, and with activation checkpointing; the device then holds no parameter shard
// between steps and zs-mem's device, host and NVMe figures are what the run measures; the swap
// files are gone after the run; a checkpoint saved with the shards on NVMe resumes bit for bit;
// one rank runs stage 3 off the device with the bits of stage 0; stages below 3 and a missing
// optimizer offload are refused by name.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "tests/support/corpus.h"
#include "tests/support/scratch.h"
#include "tests/support/short_run.h"
#include "tests/support/step_bits.h"
#include "tests/support/zs_mem.h"
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

constexpr auto kParams = static_cast<size_t>(MemoryCategory::kParameters);

class ParamOffload : public ::testing::Test {
 protected:
  ParamOffload() {
    write_text(corpus, learnable_corpus());
    std::filesystem::create_directories(swap);
  }
  // Stage 3 on `ranks` ranks; the optimizer in host memory or with its state on NVMe, the
  // parameter shards where `params` says.
  TrainConfig run(int ranks, DType precision, OffloadTarget optimizer, OffloadTarget params) const {
    TrainConfig c = zs::testing::short_gpt_run(corpus, ranks, 3, precision);
    c.offload_optimizer = optimizer;
    c.offload_param = params;
    if (optimizer == OffloadTarget::kNvme || params == OffloadTarget::kNvme) {
      c.nvme_paths = {swap};
      c.nvme_direct = zs::testing::direct_io_works(swap);
    }
    return c;
  }
  bool swap_is_empty() const { return std::filesystem::is_empty(swap); }
  ScratchDir dir;
  const std::string corpus = dir.path("corpus.txt");
  const std::string swap = dir.path("nvme");
};

TEST_F(ParamOffload, EveryPrecisionAndTierGivesTheBitsOfTheRunWithout) {
  struct Case {
    OffloadTarget optimizer;
    OffloadTarget params;
    int buffers = 4;
    bool prefetch = true;
    bool checkpointing = false;
  };
  const OffloadTarget host = OffloadTarget::kHost;
  const OffloadTarget nvme = OffloadTarget::kNvme;
  for (const Case k : {Case{host, host}, Case{host, nvme}, Case{nvme, nvme},
                       Case{host, nvme, 1, true, true}, Case{host, nvme, 2, false}}) {
    for (const DType precision : {DType::kF32, DType::kBF16, DType::kF16}) {
      const std::string what =
          std::string("optimizer ") + offload_target_name(k.optimizer) + ", parameters " +
          offload_target_name(k.params) + ", " + std::to_string(k.buffers) + " buffers" +
          (k.prefetch ? "" : ", no prefetch") +
          (k.checkpointing ? ", activation checkpointing" : "") + " " + dtype_name(precision);
      TrainConfig resident = run(2, precision, OffloadTarget::kNone, OffloadTarget::kNone);
      TrainConfig offloaded = run(2, precision, k.optimizer, k.params);
      offloaded.param_buffer_count = k.buffers;
      for (TrainConfig* c : {&resident, &offloaded}) {
        c->prefetch = k.prefetch;
        if (k.checkpointing) c->checkpoint_every = 1;
      }
      resident.save_weights = dir.path("resident.safetensors");
      offloaded.save_weights = dir.path("offloaded.safetensors");
      const TrainResult a = run_training(resident);
      const TrainResult b = run_training(offloaded);
      expect_same_steps(a, b, what);
      EXPECT_GT(read_bytes(resident.save_weights).size(), 4u * 30000) << what;
      EXPECT_TRUE(read_bytes(resident.save_weights) == read_bytes(offloaded.save_weights))
          << what << ": the final parameters differ";
      EXPECT_TRUE(swap_is_empty()) << what << ": swap files left behind";
    }
  }
}

// Between steps the device holds no parameter shard (the tiny GPT's units are all released
// after use), and zs-mem's device parameters, host tier and NVMe figures are what the run
// measures.
TEST_F(ParamOffload, ZsMemsDeviceHostAndNvmeSplitIsWhatTheRunMeasures) {
  for (const DType precision : {DType::kF32, DType::kBF16}) {
    for (const OffloadTarget params : {OffloadTarget::kHost, OffloadTarget::kNvme}) {
      for (const OffloadTarget optimizer : {OffloadTarget::kHost, OffloadTarget::kNvme}) {
        TrainConfig c = run(2, precision, optimizer, params);
        c.steps = 2;
        const TrainResult r = run_training(c);
        const MemoryEstimate e = zs::testing::zs_mem_estimate(c, 2, 3);
        const std::string what = std::string("parameters ") + offload_target_name(params) +
                                 ", optimizer " + offload_target_name(optimizer) + " " +
                                 dtype_name(precision);
        ASSERT_EQ(e.config.offload_params, params == OffloadTarget::kHost
                                               ? sharding::ParamOffload::kHost
                                               : sharding::ParamOffload::kNvme)
            << what;
        EXPECT_EQ(e.steady[MemoryCategory::kParameters], 0u) << what;
        EXPECT_EQ(r.peak_max[kParams], e.peak[MemoryCategory::kParameters]) << what;
        ASSERT_EQ(r.host_peak_max.size(), static_cast<size_t>(kNumMemoryCategories)) << what;
        for (int cat = 0; cat < kNumMemoryCategories; ++cat) {
          EXPECT_EQ(r.host_peak_max[cat], e.host[static_cast<MemoryCategory>(cat)])
              << "host " << category_name(static_cast<MemoryCategory>(cat)) << ", " << what;
        }
        EXPECT_EQ(r.nvme_bytes_max, e.nvme) << what;
        if (params == OffloadTarget::kNvme) {
          EXPECT_GT(e.nvme, 0u) << what;
          EXPECT_NE(r.memory_table.find("parameter shards"), std::string::npos) << r.memory_table;
        }
        // In fp32 the host shard is the host master: host offload adds no host bytes (with the
        // masters on NVMe it is a buffer of its own).
        if (precision == DType::kF32 && params == OffloadTarget::kHost &&
            optimizer == OffloadTarget::kHost) {
          EXPECT_EQ(e.host[MemoryCategory::kParameters], 0u) << what;
        } else {
          EXPECT_GT(e.host[MemoryCategory::kParameters], 0u) << what;
        }
      }
    }
  }
}

// One rank (one device: ZeRO-Infinity's single-GPU case). Stage 3 keeps its release after use
// there (its collectives are over one rank) so that the parameters can leave the device; the
// bits are those of the one-rank run without offload (stage 3 run as stage 0), and between
// steps the device holds no parameters.
TEST_F(ParamOffload, OneRankRunsStageThreeOffTheDeviceWithTheBitsOfStageZero) {
  for (const DType precision : {DType::kF32, DType::kBF16}) {
    for (const OffloadTarget params : {OffloadTarget::kHost, OffloadTarget::kNvme}) {
      const std::string what =
          std::string("parameters ") + offload_target_name(params) + " " + dtype_name(precision);
      TrainConfig resident = run(1, precision, OffloadTarget::kNone, OffloadTarget::kNone);
      TrainConfig offloaded = run(1, precision, OffloadTarget::kHost, params);
      resident.save_weights = dir.path("resident.safetensors");
      offloaded.save_weights = dir.path("offloaded.safetensors");
      const TrainResult a = run_training(resident);
      const TrainResult b = run_training(offloaded);
      expect_same_steps(a, b, what);
      EXPECT_TRUE(read_bytes(resident.save_weights) == read_bytes(offloaded.save_weights))
          << what << ": the final parameters differ";
      const MemoryEstimate e = zs::testing::zs_mem_estimate(offloaded, 1, 3);
      EXPECT_EQ(e.steady[MemoryCategory::kParameters], 0u) << what;
      EXPECT_EQ(b.peak_max[kParams], e.peak[MemoryCategory::kParameters]) << what;
      // (A 2-layer model's gathered window is all of it, so the peaks match; between steps the
      // run without offload holds every parameter.)
      EXPECT_GT(zs::testing::zs_mem_estimate(resident, 1, 3).steady[MemoryCategory::kParameters],
                0u)
          << what;
      ASSERT_EQ(b.host_peak_max.size(), static_cast<size_t>(kNumMemoryCategories)) << what;
      for (int cat = 0; cat < kNumMemoryCategories; ++cat) {
        EXPECT_EQ(b.host_peak_max[cat], e.host[static_cast<MemoryCategory>(cat)])
            << "host " << category_name(static_cast<MemoryCategory>(cat)) << ", " << what;
      }
    }
  }
}

// Without parameter offload the same run keeps each unit's shard on the device: the device's
// parameters peak drops by exactly those shards.
TEST_F(ParamOffload, TheDeviceDropsExactlyTheShards) {
  TrainConfig resident = run(2, DType::kBF16, OffloadTarget::kHost, OffloadTarget::kNone);
  TrainConfig offloaded = run(2, DType::kBF16, OffloadTarget::kHost, OffloadTarget::kHost);
  resident.steps = offloaded.steps = 2;
  const TrainResult a = run_training(resident);
  const TrainResult b = run_training(offloaded);
  const MemoryEstimate e = zs::testing::zs_mem_estimate(resident, 2, 3);
  ASSERT_GT(e.steady[MemoryCategory::kParameters], 0u);
  EXPECT_EQ(a.peak_max[kParams] - b.peak_max[kParams], e.steady[MemoryCategory::kParameters]);
}

TEST_F(ParamOffload, CheckpointsResumeBitForBitWithTheShardsOnNvme) {
  TrainConfig full = run(2, DType::kBF16, OffloadTarget::kHost, OffloadTarget::kNvme);
  full.checkpoint_dir = dir.path("ckpt");
  full.checkpoint_interval = 3;
  full.save_weights = dir.path("full.safetensors");
  const TrainResult a = run_training(full);
  for (const OffloadTarget params : {OffloadTarget::kNvme, OffloadTarget::kNone}) {
    TrainConfig resumed = run(2, DType::kBF16, OffloadTarget::kHost, params);
    resumed.resume = full.checkpoint_dir + "/step-000003";
    resumed.save_weights = dir.path("resumed.safetensors");
    const TrainResult b = run_training(resumed);
    ASSERT_EQ(b.steps.size(), a.steps.size() - 3);
    TrainResult tail;
    tail.steps.assign(a.steps.begin() + 3, a.steps.end());
    const std::string what =
        std::string("resumed with the parameters on ") + offload_target_name(params);
    expect_same_steps(tail, b, what);
    EXPECT_TRUE(read_bytes(full.save_weights) == read_bytes(resumed.save_weights)) << what;
  }
}

TEST_F(ParamOffload, StagesWithoutShardsAndNoOptimizerOffloadAreRefusedByName) {
  TrainConfig stage2 = run(2, DType::kF32, OffloadTarget::kHost, OffloadTarget::kHost);
  stage2.stage = 2;
  const std::string s2 = error_message<InvalidArgument>([&] { validate(stage2, 2); });
  EXPECT_NE(s2.find("--zero-stage 3"), std::string::npos) << s2;
  const std::string alone = error_message<InvalidArgument>(
      [&] { validate(run(2, DType::kF32, OffloadTarget::kNone, OffloadTarget::kHost), 2); });
  EXPECT_NE(alone.find("--offload-optimizer"), std::string::npos) << alone;
  TrainConfig no_path = run(2, DType::kF32, OffloadTarget::kHost, OffloadTarget::kNvme);
  no_path.nvme_paths.clear();
  const std::string path = error_message<InvalidArgument>([&] { validate(no_path, 2); });
  EXPECT_NE(path.find("--nvme-path"), std::string::npos) << path;
  TrainConfig parse;
  EXPECT_THROW(parse.offload_param = parse_offload_target("disk"), InvalidArgument);
}

}  // namespace
}  // namespace zs::train
