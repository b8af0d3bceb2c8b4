// zs-ckpt, run in-process: inspect prints the format, tensors, config and parameter count;
// convert goes safetensors → llm.c → safetensors without changing a bit; usage errors exit 2 and
// bad files exit 1, each with a message on stderr.
#include "checkpoint/ckpt_tool.h"

#include <gtest/gtest.h>

#include <sstream>
#include <utility>

#include "checkpoint/gpt2_weights.h"
#include "checkpoint_test_util.h"
#include "runtime/allocator.h"
#include "tests/support/ckpt_tool_run.h"

namespace zs::checkpoint {
namespace {

using testing::read_bytes;
using testing::ScratchDir;
using testing::tiny_gpt_config;
using testing::write_bytes;

using zs::testing::ToolRun;

ToolRun run(std::vector<std::string> args) { return zs::testing::run_zs_ckpt(std::move(args)); }

// A tiny GPT exported to `path` (safetensors); returns its parameter count.
int64_t write_model(const std::string& path) {
  CpuAllocator allocator(nullptr);
  models::Gpt model(tiny_gpt_config());
  models::materialize(model, allocator, 1);
  Gpt2WeightExporter(path, tiny_gpt_config()).save(model);
  return model.num_parameters();
}

TEST(CkptTool, InspectShowsFormatTensorsConfigAndParameterCount) {
  ScratchDir scratch;
  const std::string path = scratch.path("tiny.safetensors");
  const int64_t parameters = write_model(path);
  const ToolRun result = run({"inspect", path});
  ASSERT_EQ(result.code, 0) << result.err;
  EXPECT_EQ(result.err, "");
  EXPECT_CONTAINS(result.out, "format: safetensors (header ");
  EXPECT_CONTAINS(result.out, "metadata: format=pt zeroshard.n_head=2");
  EXPECT_CONTAINS(result.out, "tensors: 28");
  EXPECT_CONTAINS(result.out, "h.0.attn.c_attn.weight  F32    [16, 48]");
  EXPECT_CONTAINS(result.out, "3072\n");  // its bytes: 16 × 48 × 4
  EXPECT_CONTAINS(result.out,
                  "GPT-2 config: layers 2, width 16, heads 2, vocab 37, context 8 "
                  "(heads from metadata)");
  EXPECT_CONTAINS(result.out, "parameters: " + std::to_string(parameters) + "\n");
}

TEST(CkptTool, ConvertsToLlmcAndBackBitForBit) {
  ScratchDir scratch;
  const std::string original = scratch.path("tiny.safetensors");
  write_model(original);
  const std::string llmc = scratch.path("tiny.bin");
  ToolRun result = run({"convert", original, llmc});
  ASSERT_EQ(result.code, 0) << result.err;
  EXPECT_CONTAINS(result.out, "wrote " + llmc + ": llm.c, F32");
  result = run({"inspect", llmc});
  ASSERT_EQ(result.code, 0) << result.err;
  EXPECT_CONTAINS(result.out, "format: llm.c GPT-2 checkpoint, version 3 (F32)");
  EXPECT_CONTAINS(result.out, "header: maxT 8, V 37, Vp 128, L 2, NH 2, C 16");
  EXPECT_CONTAINS(result.out, "qkvw      F32    [2, 48, 16]");

  const std::string back = scratch.path("back.safetensors");
  result = run({"convert", llmc, back});
  ASSERT_EQ(result.code, 0) << result.err;
  EXPECT_EQ(read_bytes(back), read_bytes(original));

  // --to overrides the extension; --dtype sets the output's.
  const std::string bf16 = scratch.path("bf16.weights");
  result = run({"convert", original, bf16, "--to", "llmc", "--dtype", "bf16"});
  ASSERT_EQ(result.code, 0) << result.err;
  EXPECT_EQ(LlmcReader(bf16).version(), 5);
  const std::string f16 = scratch.path("f16.safetensors");
  ASSERT_EQ(run({"convert", bf16, f16, "--dtype", "f16"}).code, 0);
  EXPECT_EQ(SafetensorsReader(f16).info("wte.weight").dtype, StoredDType::kF16);
}

TEST(CkptTool, UsageErrorsExit2) {
  ScratchDir scratch;
  const std::string path = scratch.path("tiny.safetensors");
  write_model(path);
  EXPECT_EQ(run({}).code, 2);
  EXPECT_EQ(run({"frobnicate"}).code, 2);
  EXPECT_EQ(run({"inspect"}).code, 2);
  EXPECT_EQ(run({"inspect", path, "--bogus"}).code, 2);
  ToolRun result = run({"convert", path, scratch.path("out.xyz")});
  EXPECT_EQ(result.code, 2);
  EXPECT_CONTAINS(result.err, "cannot tell the output format");
  result = run({"convert", path, scratch.path("out.bin"), "--dtype", "f16"});
  EXPECT_EQ(result.code, 2);
  EXPECT_CONTAINS(result.err, "llm.c checkpoints hold f32 or bf16");
  result = run({"convert", path, scratch.path("out.bin"), "--dtype", "int8"});
  EXPECT_EQ(result.code, 2);
  EXPECT_CONTAINS(result.err, "--dtype must be f32, f16 or bf16");
  EXPECT_EQ(run({"convert", path, scratch.path("o"), "--to", "onnx"}).code, 2);
  EXPECT_EQ(run({"--help"}).code, 0);
  EXPECT_TRUE(read_bytes(scratch.path("out.bin")).empty()) << "nothing written on usage errors";
}

TEST(CkptTool, BadFilesExit1WithTheReason) {
  ScratchDir scratch;
  ToolRun result = run({"inspect", scratch.path("absent.safetensors")});
  EXPECT_EQ(result.code, 1);
  EXPECT_CONTAINS(result.err, "zs-ckpt: cannot open");
  EXPECT_EQ(result.err.find("[rank"), std::string::npos) << "no developer prefix: " << result.err;

  const std::string corrupt = scratch.path("corrupt.safetensors");
  write_bytes(corrupt, {16, 0, 0, 0, 0, 0, 0, 0, '{'});
  result = run({"inspect", corrupt});
  EXPECT_EQ(result.code, 1);
  EXPECT_CONTAINS(result.err, "declares a header of 16 bytes");

  // A valid safetensors file that is not GPT-2: inspect lists it, convert refuses it.
  const std::string other = scratch.path("other.safetensors");
  {
    SafetensorsWriter writer(other);
    const float value = 1;
    writer.add("encoder.weight", {1}, StoredDType::kF32, &value);
    writer.commit();
  }
  result = run({"inspect", other});
  EXPECT_EQ(result.code, 0) << result.err;
  EXPECT_CONTAINS(result.out,
                  "GPT-2 config: none (safetensors file '" + other + "' has no 'wte.weight'");
  result = run({"convert", other, scratch.path("other.bin")});
  EXPECT_EQ(result.code, 1);
  EXPECT_CONTAINS(result.err, "has no 'wte.weight'");
}

}  // namespace
}  // namespace zs::checkpoint
