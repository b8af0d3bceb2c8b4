// zs-train's engine with --device cuda against the same run on the CPU (label gpu; skips with "no
// CUDA device: skipped (compiled only)" where there is no GPU): a tiny GPT on a learnable text,
// stages 0 and 3, fp32 and bf16, on one GPU and — with two or more GPUs — on two rank threads of
// this process (run_gpu_ranks: an nccl group over a local bootstrap), next to the CPU run with
// the same world size on the local backend.
//
// What must hold: the GPU run learns (the last loss is well below the first), its losses follow
// the CPU's within tolerance (cuBLAS, the attention kernels and NCCL's reduction order differ from
// the CPU's in the last bits; a step's differences compound slowly over 20 steps), the traffic per
// step equals the CPU run's (the same collectives on the same buffers), and the memory report is
// the GPU's (the tracker is named after the device). With --offload-optimizer host the GPU run
// keeps its masters and optimizer state in pinned host memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "runtime/cuda/check.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/corpus.h"
#include "tests/support/scratch.h"
#include "train/config.h"
#include "train/engine.h"

namespace zs::train {
namespace {

using zs::testing::learnable_corpus;
using zs::testing::ScratchDir;
using zs::testing::write_text;

TrainConfig tiny_run(const std::string& path, int ranks, int stage, DType precision) {
  TrainConfig c;
  c.text = {path};
  c.model = "tiny";
  c.n_layer = 2;
  c.width = 64;
  c.n_head = 2;  // head_dim 32: cuDNN's attention takes bf16 here, the plain kernel fp32
  c.context = 64;
  c.micro_batch = 4;
  c.ranks = ranks;
  c.threads = 1;
  c.steps = 20;
  c.lr = 3e-3f;
  c.warmup_steps = 2;
  c.log_interval = 1000;
  c.eval_batches = 2;
  c.sample_tokens = 0;
  c.progress = false;
  c.stage = stage;
  c.precision = precision;
  return c;
}

// The losses of `got` follow `want`'s within what the GPU's and the CPU's last bits allow.
void expect_losses_near(const TrainResult& got, const TrainResult& want, DType precision) {
  const double tol = precision == DType::kF32 ? 2e-3 : 3e-2;
  for (size_t i = 0; i < want.steps.size(); ++i) {
    EXPECT_NEAR(got.steps[i].loss, want.steps[i].loss,
                tol * std::max(1.0f, std::fabs(want.steps[i].loss)))
        << "step " << i;
  }
}

TEST(CudaEngine, TrainsLikeTheCpuOnOneAndTwoGpus) {
  ZS_SKIP_WITHOUT_CUDA();
  ScratchDir dir;
  const std::string path = dir.path("corpus.txt");
  write_text(path, learnable_corpus());
  const int gpus = cuda::cuda_device_count();
  for (int ranks : {1, 2}) {
    if (ranks > gpus) {
      std::printf("[ SKIPPED  ] %d rank threads: only %d CUDA device(s)\n", ranks, gpus);
      continue;
    }
    for (const DType precision : {DType::kF32, DType::kBF16}) {
      for (int stage : {0, 3}) {
        SCOPED_TRACE(std::to_string(ranks) + " ranks, stage " + std::to_string(stage) + ", " +
                     dtype_name(precision));
        TrainConfig cpu = tiny_run(path, ranks, stage, precision);
        cpu.backend = "local";
        TrainConfig gpu = tiny_run(path, ranks, stage, precision);
        gpu.device = "cuda";
        gpu.backend = "auto";  // nccl
        const TrainResult want = run_training(cpu);
        const TrainResult got = run_training(gpu);
        ASSERT_EQ(got.steps.size(), want.steps.size());
        EXPECT_EQ(got.world, ranks);
        EXPECT_LT(got.steps.back().loss, 0.7f * got.steps.front().loss) << "did not learn";
        expect_losses_near(got, want, precision);
        EXPECT_EQ(got.bytes_sent, want.bytes_sent);
        EXPECT_NE(got.memory_table.find("cuda:0"), std::string::npos) << got.memory_table;
      }
    }
  }
}

// --offload-optimizer host on a GPU: the masters and the optimizer state live in pinned host
// memory, the gradient shards are downloaded after their reductions and the updated compute
// shards uploaded before the all-gathers. The run learns like the GPU run without offload (within
// the CPU-vs-GPU tolerance: the optimizer now runs the CPU loops), its device holds no masters or
// optimizer state, and its host tier does.
TEST(CudaEngine, OptimizerOffloadToPinnedHostMemory) {
  ZS_SKIP_WITHOUT_CUDA();
  ScratchDir dir;
  const std::string path = dir.path("corpus.txt");
  write_text(path, learnable_corpus());
  for (const DType precision : {DType::kF32, DType::kBF16}) {
    for (int stage : {1, 3}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + ", " + dtype_name(precision));
      TrainConfig in_memory = tiny_run(path, 1, stage, precision);
      in_memory.device = "cuda";
      in_memory.backend = "auto";
      TrainConfig offloaded = in_memory;
      offloaded.offload_optimizer = OffloadTarget::kHost;
      const TrainResult want = run_training(in_memory);
      const TrainResult got = run_training(offloaded);
      ASSERT_EQ(got.steps.size(), want.steps.size());
      EXPECT_LT(got.steps.back().loss, 0.7f * got.steps.front().loss) << "did not learn";
      expect_losses_near(got, want, precision);
      EXPECT_EQ(got.peak_max[static_cast<int>(MemoryCategory::kMasterWeights)], 0u);
      EXPECT_EQ(got.peak_max[static_cast<int>(MemoryCategory::kOptimizerState)], 0u);
      ASSERT_EQ(got.host_peak_max.size(), static_cast<size_t>(kNumMemoryCategories));
      EXPECT_GT(got.host_peak_max[static_cast<int>(MemoryCategory::kOptimizerState)], 0u);
      EXPECT_NE(got.memory_table.find("host tier per rank"), std::string::npos) << got.memory_table;
    }
  }
}

// Parameter offload on one GPU (ZeRO-Infinity's single-device case): stage 3 with the parameters
// in pinned host memory or on NVMe (under the scratch directory, through the page cache: tmpfs
// may refuse O_DIRECT) learns as the run without; the GPU then holds parameters only while they
// are gathered.
TEST(CudaEngine, ParameterOffloadToPinnedHostMemoryAndNvme) {
  ZS_SKIP_WITHOUT_CUDA();
  ScratchDir dir;
  const std::string path = dir.path("corpus.txt");
  write_text(path, learnable_corpus());
  for (const DType precision : {DType::kF32, DType::kBF16}) {
    for (const OffloadTarget params : {OffloadTarget::kHost, OffloadTarget::kNvme}) {
      SCOPED_TRACE(std::string("parameters ") + offload_target_name(params) + ", " +
                   dtype_name(precision));
      TrainConfig in_memory = tiny_run(path, 1, 3, precision);
      in_memory.device = "cuda";
      in_memory.backend = "auto";
      TrainConfig offloaded = in_memory;
      offloaded.offload_optimizer = OffloadTarget::kHost;
      offloaded.offload_param = params;
      if (params == OffloadTarget::kNvme) {
        offloaded.nvme_paths = {dir.path("")};
        offloaded.nvme_direct = false;
      }
      const TrainResult want = run_training(in_memory);
      const TrainResult got = run_training(offloaded);
      ASSERT_EQ(got.steps.size(), want.steps.size());
      EXPECT_LT(got.steps.back().loss, 0.7f * got.steps.front().loss) << "did not learn";
      expect_losses_near(got, want, precision);
      EXPECT_LE(got.peak_max[static_cast<int>(MemoryCategory::kParameters)],
                want.peak_max[static_cast<int>(MemoryCategory::kParameters)]);
      ASSERT_EQ(got.host_peak_max.size(), static_cast<size_t>(kNumMemoryCategories));
      EXPECT_GT(got.host_peak_max[static_cast<int>(MemoryCategory::kParameters)] +
                    got.host_peak_max[static_cast<int>(MemoryCategory::kMasterWeights)],
                0u);
    }
  }
}

}  // namespace
}  // namespace zs::train
