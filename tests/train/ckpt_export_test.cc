// zs-ckpt on sharded checkpoints that zs-train wrote (2 local ranks, the short GPT run of
// param_hash_test.cc): inspect prints the step, world, stage, model, optimizer, every rank file
// verified and every parameter, and exits 1 naming a corrupt or missing file (or a metadata
// version from the future); export writes, byte
// for byte, what --save-weights wrote at the end of the run that saved the checkpoint at its last
// step (safetensors, and llm.c .bin against convert of that file), at stages 0 and 3 and in bf16;
// zs-train --init-from DIR starts from the checkpoint's weights like --init-from that file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/ckpt_tool_run.h"
#include "tests/support/corpus.h"
#include "tests/support/scratch.h"
#include "tests/support/short_run.h"
#include "train/engine.h"

namespace zs::train {
namespace {

namespace fs = std::filesystem;
using zs::testing::learnable_corpus;
using zs::testing::ScratchDir;
using zs::testing::write_text;

using zs::testing::ToolRun;
const auto zs_ckpt = zs::testing::run_zs_ckpt;

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A 6-step run on 2 ranks that checkpoints every 3 steps (so at its last step too) and writes
// --save-weights at its end.
class CkptTool : public ::testing::Test {
 protected:
  CkptTool() { write_text(corpus_, learnable_corpus()); }
  TrainConfig run(int stage, DType precision) {
    TrainConfig c = zs::testing::short_gpt_run(corpus_, 2, stage, precision);
    c.checkpoint_dir = dir_.path("ckpt");
    c.checkpoint_interval = 3;
    c.save_weights = dir_.path("final.safetensors");
    run_training(c);
    return c;
  }
  ScratchDir dir_;
  const std::string corpus_ = dir_.path("corpus.txt");
};

TEST_F(CkptTool, InspectShowsTheCheckpointWithEveryFileVerified) {
  const TrainConfig c = run(3, DType::kF32);
  const ToolRun result = zs_ckpt({"inspect", c.checkpoint_dir});
  ASSERT_EQ(result.code, 0) << result.err;
  EXPECT_CONTAINS(result.out, "step-000006");
  EXPECT_CONTAINS(result.out, "step: 6\n");
  EXPECT_CONTAINS(result.out, "world size: 2, stage 3");
  EXPECT_CONTAINS(result.out, "model: GPT, layers 2, width 32, heads 2");
  EXPECT_CONTAINS(result.out, "optimizer: adamw, 6 steps, state [\"exp_avg\",\"exp_avg_sq\"]");
  EXPECT_CONTAINS(result.out, "loss scale: none");
  EXPECT_CONTAINS(result.out, "files: 2\n");
  EXPECT_CONTAINS(result.out, "rank-00000.bin");
  EXPECT_CONTAINS(result.out, "rank-00001.bin");
  EXPECT_EQ(result.out.find("MISMATCH"), std::string::npos) << result.out;
  EXPECT_CONTAINS(result.out, "blocks.1.attn.qkv.weight");
  EXPECT_CONTAINS(result.out, "[96, 32]");

  // A step directory by name works the same; a flipped byte is a mismatch naming the file.
  const std::string step3 = c.checkpoint_dir + "/step-000003";
  {
    std::fstream f(step3 + "/rank-00001.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  const ToolRun corrupt = zs_ckpt({"inspect", step3});
  EXPECT_EQ(corrupt.code, 1);
  EXPECT_CONTAINS(corrupt.out, "step: 3\n");
  EXPECT_CONTAINS(corrupt.out, "MISMATCH");
  EXPECT_CONTAINS(corrupt.err, "rank-00001.bin' is corrupt: its checksum is");

  // A metadata version from the future is refused, naming both versions.
  const std::vector<char> bytes = read_bytes(step3 + "/meta.json");
  const std::string meta(bytes.begin(), bytes.end());
  const size_t at = meta.find("\"format_version\": 3");
  ASSERT_NE(at, std::string::npos) << meta;
  write_text(step3 + "/meta.json",
             meta.substr(0, at) + "\"format_version\": 99" +
                 meta.substr(at + std::string("\"format_version\": 3").size()));
  const ToolRun future = zs_ckpt({"inspect", step3});
  EXPECT_EQ(future.code, 1);
  EXPECT_CONTAINS(future.err, "has format version 99, newer than this zeroshard reads (3)");

  fs::remove(c.checkpoint_dir + "/step-000006/rank-00000.bin");
  const ToolRun missing = zs_ckpt({"inspect", c.checkpoint_dir});
  EXPECT_EQ(missing.code, 1);
  EXPECT_CONTAINS(missing.out, "MISSING");
  EXPECT_CONTAINS(missing.err, "rank-00000.bin' cannot be read");
  const ToolRun no_export = zs_ckpt({"export", c.checkpoint_dir, dir_.path("x.safetensors")});
  EXPECT_EQ(no_export.code, 1);
  EXPECT_CONTAINS(no_export.err, "rank-00000.bin' cannot be read");
  EXPECT_FALSE(fs::exists(dir_.path("x.safetensors")));
}

class CkptToolExport : public CkptTool,
                       public ::testing::WithParamInterface<std::pair<int, DType>> {};

TEST_P(CkptToolExport, WritesWhatSaveWeightsWrote) {
  const TrainConfig c = run(GetParam().first, GetParam().second);
  const std::string exported = dir_.path("exported.safetensors");
  const ToolRun result = zs_ckpt({"export", c.checkpoint_dir, exported});
  ASSERT_EQ(result.code, 0) << result.err;
  EXPECT_CONTAINS(result.out, "memory: largest tensor buffer ");
  EXPECT_CONTAINS(result.out, "process peak RSS ");
  EXPECT_TRUE(read_bytes(exported) == read_bytes(c.save_weights))
      << "the exported weights differ from --save-weights'";

  const std::string llmc = dir_.path("exported.bin"), converted = dir_.path("converted.bin");
  ASSERT_EQ(zs_ckpt({"export", c.checkpoint_dir, llmc}).code, 0);
  ASSERT_EQ(zs_ckpt({"convert", c.save_weights, converted}).code, 0);
  EXPECT_TRUE(read_bytes(llmc) == read_bytes(converted));
}

INSTANTIATE_TEST_SUITE_P(Stages, CkptToolExport,
                         ::testing::Values(std::pair<int, DType>{0, DType::kF32},
                                           std::pair<int, DType>{3, DType::kF32},
                                           std::pair<int, DType>{2, DType::kBF16}));

// --init-from DIR starts from the checkpoint's weights only: the same run as --init-from the
// weights file --save-weights wrote at that step, bit for bit.
TEST_F(CkptTool, InitFromACheckpointDirectoryIsInitFromItsWeights) {
  const TrainConfig saved = run(3, DType::kF32);
  TrainConfig from_dir = zs::testing::short_gpt_run(corpus_, 2, 1, DType::kF32);
  from_dir.init_from = saved.checkpoint_dir;
  from_dir.save_weights = dir_.path("from_dir.safetensors");
  run_training(from_dir);
  TrainConfig from_file = from_dir;
  from_file.init_from = saved.save_weights;
  from_file.save_weights = dir_.path("from_file.safetensors");
  run_training(from_file);
  EXPECT_TRUE(read_bytes(from_dir.save_weights) == read_bytes(from_file.save_weights));
  EXPECT_FALSE(read_bytes(from_dir.save_weights) == read_bytes(saved.save_weights));
}

}  // namespace
}  // namespace zs::train
