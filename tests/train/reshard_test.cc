// Resharding on load through zs-train's engine (the 2-layer GPT of short_run.h in fp32): a
// checkpoint saved at step 3 by N ranks at stage S (or hybrid) resumes on M ranks at stage S',
// for every N ≠ M in {1, 2, 3, 4}, a stage change at the same world size and hybrid 2x2 to
// stage 3 on 2 ranks (saves asynchronous, as by default, and once synchronous), and continues
// like the uninterrupted N-rank run: the same global batches (micro-batch 12 / ranks), the same
// learning rates, and losses equal within fp32 tolerance (world sizes agree only that far:
// reductions add in another order). A stage 0 checkpoint holds each element once, spread over
// every rank's file (a missing one is named); a hybrid one is read from its first shard group's
// files; fp16's loss scaler carries over; a corrupt rank file is named; a resume whose global
// batch differs, or of another model, is refused with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "checkpoint/shard_files.h"
#include "runtime/error.h"
#include "tests/support/corpus.h"
#include "tests/support/reshard_run.h"
#include "tests/support/scratch.h"
#include "train/config.h"
#include "train/engine.h"

namespace zs::train {
namespace {

using zs::testing::error_message;
using zs::testing::learnable_corpus;
using zs::testing::placed_run;
using zs::testing::Placement;
using zs::testing::placement_name;
using zs::testing::ScratchDir;
using zs::testing::write_text;

constexpr int64_t kGlobalMicroBatch = zs::testing::kReshardGlobalMicroBatch;

class Resharding : public ::testing::Test {
 protected:
  Resharding() { write_text(corpus, learnable_corpus()); }
  // The uninterrupted run at `p`, checkpointing every 3 steps into dir/ckpt.
  TrainResult run_saving(const Placement& p, const char* optimizer = "adamw", bool async = true) {
    TrainConfig c = placed_run(corpus, p, optimizer);
    c.checkpoint_async = async;
    c.checkpoint_dir = dir.path("ckpt");
    c.checkpoint_interval = 3;
    return run_training(c);
  }
  std::string step3() const { return dir.path("ckpt") + "/step-000003"; }
  // A checkpoint saved at `from` resumes at `to` with the rank files `removed` deleted (files a
  // load at another world size never reads) and continues like the uninterrupted run.
  void resumes_without_files(const Placement& from, const std::vector<int>& removed,
                             const Placement& to) {
    const TrainResult full = run_saving(from);
    for (const int r : removed) {
      const std::string file = step3() + "/" + checkpoint::rank_file_name(r);
      ASSERT_TRUE(std::filesystem::remove(file)) << file;
    }
    TrainConfig resumed = placed_run(corpus, to, "adamw");
    resumed.resume = step3();
    const TrainResult second = run_training(resumed);
    ASSERT_EQ(second.steps.size(), 3u);
    EXPECT_NEAR(full.steps[3].loss, second.steps[0].loss, 1e-4f * std::abs(full.steps[3].loss));
  }
  ScratchDir dir;
  const std::string corpus = dir.path("corpus.txt");
};

struct Move {
  Placement from;
  Placement to;
  const char* optimizer = "adamw";
  bool async = true;  // --checkpoint-async of both runs
};

void PrintTo(const Move& m, std::ostream* os) {
  *os << placement_name(m.from) << " -> " << placement_name(m.to) << " (" << m.optimizer
      << (m.async ? "" : ", synchronous saves") << ")";
}

class Reshard : public Resharding, public ::testing::WithParamInterface<Move> {};

TEST_P(Reshard, ContinuesLikeTheUninterruptedRun) {
  const Move m = GetParam();
  const TrainResult full = run_saving(m.from, m.optimizer, m.async);
  ASSERT_EQ(full.steps.size(), 6u);
  TrainConfig resumed = placed_run(corpus, m.to, m.optimizer);
  resumed.checkpoint_async = m.async;
  resumed.resume = step3();
  const TrainResult second = run_training(resumed);
  ASSERT_EQ(second.steps.size(), 3u);
  for (size_t i = 0; i < second.steps.size(); ++i) {
    const StepRecord& a = full.steps[3 + i];
    const StepRecord& b = second.steps[i];
    EXPECT_EQ(a.step, b.step);
    EXPECT_EQ(a.lr, b.lr) << "step " << a.step;
    EXPECT_NEAR(a.loss, b.loss, 1e-4f * std::abs(a.loss)) << "step " << a.step;
    EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-3f * std::abs(a.grad_norm)) << "step " << a.step;
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizesAndStages, Reshard,
                         ::testing::Values(Move{{2, 3}, {1, 3}}, Move{{1, 0}, {2, 2}},
                                           Move{{2, 1}, {3, 3}}, Move{{4, 2}, {2, 1}},
                                           Move{{3, 3}, {4, 0}}, Move{{1, 3}, {3, 1}},
                                           Move{{1, 2}, {4, 3}}, Move{{2, 0}, {4, 2}},
                                           Move{{3, 1}, {1, 0}}, Move{{3, 2}, {2, 3}, "sgd"},
                                           Move{{4, 3}, {1, 2}}, Move{{4, 0}, {3, 3}},
                                           Move{{2, 3}, {2, 1}}, Move{{4, 3, 2}, {2, 3}},
                                           Move{{2, 0}, {3, 1}, "adamw", false}),
                         [](const ::testing::TestParamInfo<Move>& info) {
                           return "from_" + placement_name(info.param.from) + "_to_" +
                                  placement_name(info.param.to) + "_" + info.param.optimizer +
                                  (info.param.async ? "" : "_sync");
                         });

TEST_F(Resharding, AStageZeroCheckpointNeedsEveryRanksSlice) {
  run_saving({2, 0});
  const std::string file = step3() + "/" + checkpoint::rank_file_name(1);
  ASSERT_TRUE(std::filesystem::remove(file)) << file;
  TrainConfig resumed = placed_run(corpus, {3, 3}, "adamw");
  resumed.resume = step3();
  const std::string error = error_message<CorruptCheckpoint>([&] { run_training(resumed); });
  EXPECT_NE(error.find("rank-00001.bin"), std::string::npos) << error;
}

// The second shard group's ranks write no files since format version 2 (their entries name the
// first group's: checkpoint_test.cc HybridReplicasWriteNoDuplicateFiles), and a load at another
// world size reads the first group's.
TEST_F(Resharding, AHybridCheckpointIsReadFromItsFirstShardGroup) {
  resumes_without_files({4, 3, 2}, {}, {3, 2});
  for (const int r : {2, 3}) {
    EXPECT_FALSE(std::filesystem::exists(step3() + "/" + checkpoint::rank_file_name(r))) << r;
  }
}

TEST_F(Resharding, TheLossScalerCarriesOverInFp16) {
  TrainConfig saving = placed_run(corpus, {2, 2}, "adamw");
  saving.precision = DType::kF16;
  saving.loss_scaler.growth_interval = 2;  // the scale changes across the resume
  saving.checkpoint_dir = dir.path("ckpt");
  saving.checkpoint_interval = 3;
  const TrainResult full = run_training(saving);
  TrainConfig resumed = placed_run(corpus, {4, 3}, "adamw");
  resumed.precision = DType::kF16;
  resumed.loss_scaler.growth_interval = 2;
  resumed.resume = step3();
  const TrainResult second = run_training(resumed);
  ASSERT_EQ(second.steps.size(), 3u);
  for (size_t i = 0; i < second.steps.size(); ++i) {
    EXPECT_EQ(full.steps[3 + i].loss_scale, second.steps[i].loss_scale) << i;
    EXPECT_EQ(full.steps[3 + i].skipped, second.steps[i].skipped) << i;
    EXPECT_NEAR(full.steps[3 + i].loss, second.steps[i].loss, 1e-2f) << i;
  }
}

TEST_F(Resharding, ACorruptRankFileIsAnErrorNamingIt) {
  run_saving({2, 3});
  const std::string file = step3() + "/rank-00001.bin";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  TrainConfig resumed = placed_run(corpus, {3, 1}, "adamw");
  resumed.resume = step3();
  const std::string error = error_message<CorruptCheckpoint>([&] { run_training(resumed); });
  EXPECT_NE(error.find("rank-00001.bin"), std::string::npos) << error;
  EXPECT_NE(error.find("checksum"), std::string::npos) << error;
}

TEST_F(Resharding, AnotherGlobalBatchOrModelIsRefusedWithTheReason) {
  run_saving({2, 3});
  TrainConfig one_rank = placed_run(corpus, {1, 3}, "adamw");
  one_rank.micro_batch = kGlobalMicroBatch / 2;
  one_rank.resume = step3();
  const std::string batch = error_message<InvalidArgument>([&] { run_training(one_rank); });
  EXPECT_NE(batch.find("global micro-batch of 12"), std::string::npos) << batch;
  EXPECT_NE(batch.find("this run has 6 (1 ranks)"), std::string::npos) << batch;

  TrainConfig wider = placed_run(corpus, {3, 1}, "adamw");
  wider.width = 48;
  wider.resume = step3();
  const std::string model = error_message<InvalidArgument>([&] { run_training(wider); });
  EXPECT_NE(model.find("[256,32]"), std::string::npos) << model;
  EXPECT_NE(model.find("[256,48]"), std::string::npos) << model;
}

}  // namespace
}  // namespace zs::train
