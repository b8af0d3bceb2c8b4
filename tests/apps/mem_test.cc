// zs-mem in-process (train/mem_cli.h): the tables it prints agree with the memory model, and bad
// flags give a clear message and exit code 2.
#include "train/mem_cli.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "models/gpt_presets.h"
#include "runtime/memory_tracker.h"
#include "train/memory_model.h"

namespace zs::train {
namespace {

struct Result {
  int code = -1;
  std::string out, err;
};

Result run(std::vector<std::string> args) {
  args.insert(args.begin(), "zs-mem");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  Result r;
  r.code = mem_main(static_cast<int>(argv.size()), argv.data(), out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ZsMem, Gpt2OneRankStage0Bf16) {
  const Result r =
      run({"--model", "gpt2", "--ranks", "1", "--zero-stage", "0", "--precision", "bf16"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  MemoryModelConfig config;
  config.stage = 0;
  config.param_dtype = config.reduce_dtype = DType::kBF16;
  const MemoryEstimate e = estimate_memory(gpt_memory_units(models::gpt_preset("gpt2")), config);
  const int64_t psi = models::gpt_parameter_count(models::gpt_preset("gpt2"));
  // ~16 bytes per parameter in the paper, 20 in the engine (its fp32 gradient accumulator), on
  // the padded count.
  EXPECT_EQ(e.steady.total(), 20 * static_cast<uint64_t>(e.padded_numel));
  EXPECT_LE(e.padded_numel - psi, 13 * 16);
  EXPECT_TRUE(contains(r.out, "124,439,808 parameters")) << r.out;
  EXPECT_TRUE(contains(r.out, " " + format_bytes(e.steady.total()) + " |")) << r.out;
  EXPECT_TRUE(contains(r.out, "16Ψ = " + format_bytes(static_cast<size_t>(16 * psi)))) << r.out;
  for (const char* category :
       {"parameters", "gradients", "master_weights", "optimizer_state", "comm_buffers", "total"}) {
    EXPECT_TRUE(contains(r.out, category)) << category << "\n" << r.out;
  }
}

TEST(ZsMem, AllStagesByDefaultWithBudgetAndOffload) {
  const Result r = run({"--model", "gpt2-xl", "--ranks", "8", "--precision", "bf16", "--budget",
                        "16GiB", "--offload", "optimizer"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* formula : {"16Ψ = ", "4Ψ + 12Ψ/N = ", "2Ψ + 14Ψ/N = ", "16Ψ/N = "}) {
    EXPECT_TRUE(contains(r.out, formula)) << formula << "\n" << r.out;
  }
  EXPECT_TRUE(contains(r.out, "host tier")) << r.out;
  EXPECT_TRUE(contains(r.out, "--offload-optimizer host")) << r.out;
  EXPECT_TRUE(contains(r.out, "Largest GPT preset")) << r.out;
  // The stage-3 row's device peak, as the model computes it.
  MemoryModelConfig config;
  config.world = 8;
  config.stage = 3;
  config.param_dtype = config.reduce_dtype = DType::kBF16;
  config.offload = OffloadKind::kOptimizer;
  const MemoryEstimate e = estimate_memory(gpt_memory_units(models::gpt_preset("1.5B")), config);
  EXPECT_TRUE(contains(r.out, " " + format_bytes(e.peak.total()) + " |")) << r.out;
}

// --offload-param: stage 3's device holds no parameter shard between steps; the host tier and
// NVMe columns are the model's (whose figures tests/train/param_offload_test.cc checks against
// runs).
TEST(ZsMem, ParameterOffloadMovesTheShardsOffTheDevice) {
  const Result r = run({"--model", "gpt2-xl", "--ranks", "8", "--precision", "bf16", "--zero-stage",
                        "3", "--offload", "optimizer-nvme", "--offload-param", "nvme",
                        "--nvme-param-buffer-count", "3"});
  ASSERT_EQ(r.code, 0) << r.err;
  MemoryModelConfig config;
  config.world = 8;
  config.stage = 3;
  config.param_dtype = config.reduce_dtype = DType::kBF16;
  config.offload = OffloadKind::kOptimizerNvme;
  config.offload_params = sharding::ParamOffload::kNvme;
  config.param_buffer_count = 3;
  const auto units = gpt_memory_units(models::gpt_preset("1.5B"));
  const MemoryEstimate e = estimate_memory(units, config);
  EXPECT_EQ(e.steady[MemoryCategory::kParameters], 0u);
  EXPECT_TRUE(contains(r.out, "parameter shards on nvme")) << r.out;
  EXPECT_TRUE(
      contains(r.out, "NVMe tier per rank (optimizer state, master weights, parameter shards): " +
                          format_bytes(e.nvme)))
      << r.out;
  EXPECT_TRUE(contains(r.out, " " + format_bytes(e.steady.total()) + " |")) << r.out;
  config.offload_params = sharding::ParamOffload::kNone;
  const MemoryEstimate resident = estimate_memory(units, config);
  EXPECT_LT(e.steady.total(), resident.steady.total());
  EXPECT_LT(e.nvme - resident.nvme, resident.steady[MemoryCategory::kParameters] + 4096 * 50);
}

// --budget also answers per offload mode: the largest preset that fits the device budget when the
// optimizer and the parameter shards leave it, with what the host tier and NVMe then hold.
TEST(ZsMem, BudgetPerOffloadMode) {
  const Result r = run({"--model", "gpt2", "--ranks", "2", "--precision", "bf16", "--budget",
                        "4GiB", "--zero-stage", "3"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "By offload mode at stage 3")) << r.out;
  MemoryModelConfig config;
  config.world = 2;
  config.stage = 3;
  config.param_dtype = config.reduce_dtype = DType::kBF16;
  const std::optional<PresetFit> none = largest_fitting_preset(config, uint64_t{4} << 30);
  config.offload = OffloadKind::kOptimizerNvme;
  config.offload_params = sharding::ParamOffload::kNvme;
  const std::optional<PresetFit> nvme = largest_fitting_preset(config, uint64_t{4} << 30);
  ASSERT_TRUE(none && nvme);
  EXPECT_GT(nvme->parameters, none->parameters);
  char ratio[32];
  std::snprintf(ratio, sizeof(ratio), "%.1fx",
                static_cast<double>(nvme->parameters) / static_cast<double>(none->parameters));
  const size_t row = r.out.find("+ --offload-param nvme");
  ASSERT_NE(row, std::string::npos) << r.out;
  const std::string line = r.out.substr(row, r.out.find('\n', row) - row) + " ";
  for (const std::string& cell :
       {nvme->preset, std::string(ratio), format_bytes(nvme->estimate.peak.total()),
        format_bytes(nvme->estimate.host.total()), format_bytes(nvme->estimate.nvme)}) {
    EXPECT_TRUE(contains(line, " " + cell + " ")) << cell << " in\n" << line;
  }
  // One rank: parameter offload too (stage 3 keeps its release after use there); hybrid: none,
  // and a line that says why.
  const Result one = run({"--model", "gpt2", "--budget", "4GiB"});
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_TRUE(contains(one.out, "+ --offload-param nvme")) << one.out;
  const Result hybrid =
      run({"--model", "gpt2", "--budget", "4GiB", "--ranks", "4", "--hybrid-group", "2"});
  ASSERT_EQ(hybrid.code, 0) << hybrid.err;
  EXPECT_FALSE(contains(hybrid.out, "+ --offload-param nvme")) << hybrid.out;
  EXPECT_TRUE(contains(hybrid.out, "stage 3 without hybrid groups")) << hybrid.out;
}

// --prefetch-bytes widens stage 3's gathered window as the engine's prefetch does.
TEST(ZsMem, PrefetchBytesWidensTheGatheredWindow) {
  const Result r = run({"--params", "1.5B", "--units", "48", "--ranks", "4", "--zero-stage", "3",
                        "--prefetch-bytes", "1GiB"});
  ASSERT_EQ(r.code, 0) << r.err;
  MemoryModelConfig config;
  config.world = 4;
  config.stage = 3;
  const auto units = uniform_memory_units(parse_count("1.5B"), 48);
  const MemoryEstimate one_ahead = estimate_memory(units, config);
  config.prefetch_bytes = size_t{1} << 30;
  const MemoryEstimate deep = estimate_memory(units, config);
  EXPECT_GT(deep.gathered_window_bytes, one_ahead.gathered_window_bytes);
  EXPECT_TRUE(contains(
      r.out, "(full parameters alive at once): " + format_bytes(deep.gathered_window_bytes)))
      << r.out;
  EXPECT_EQ(run({"--prefetch-bytes", "lots"}).code, 2);
}

TEST(ZsMem, BareParameterCountsAndHybrid) {
  Result r = run({"--params", "1.5B", "--units", "48", "--ranks", "4", "--zero-stage", "3"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "1,500,000,000")) << r.out;
  EXPECT_TRUE(contains(r.out, "gathered window")) << r.out;
  r = run({"--params", "350M", "--ranks", "8", "--hybrid-group", "4"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "groups of 4")) << r.out;
  EXPECT_TRUE(contains(r.out, "one unit")) << r.out;
  // A custom shape: gpt2 with 24 layers has 12 more blocks of 12C² + 13C parameters.
  r = run({"--model", "gpt2", "--layers", "24", "--zero-stage", "0"});
  ASSERT_EQ(r.code, 0) << r.err;
  const int64_t c = 768;
  EXPECT_TRUE(contains(r.out, "24 layers")) << r.out;
  EXPECT_TRUE(contains(r.out, "with overrides")) << r.out;
  const int64_t count = 124439808 + 12 * (12 * c * c + 13 * c);
  std::string digits = std::to_string(count);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  EXPECT_TRUE(contains(r.out, digits + " parameters")) << digits << "\n" << r.out;
  r = run({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(contains(r.out, "--zero-stage")) << r.out;
}

// --grad-sync per-step with accumulation: stage 1 holds the fp32 sum (4 bytes per padded
// parameter) more in gradients; stage 0 nothing more; a bad value is a usage error.
TEST(ZsMem, GradSyncPerStepAddsTheStageOneSum) {
  auto gradients = [](int stage, const std::string& sync) {
    const Result r = run({"--model", "gpt2", "--ranks", "8", "--zero-stage", std::to_string(stage),
                          "--precision", "bf16", "--grad-accum", "4", "--grad-sync", sync});
    EXPECT_EQ(r.code, 0) << r.err;
    return r.out;
  };
  MemoryModelConfig config;
  config.world = 8;
  config.stage = 1;
  config.param_dtype = config.reduce_dtype = DType::kBF16;
  config.gradient_accumulation = true;
  const auto units = gpt_memory_units(models::gpt_preset("gpt2"));
  const MemoryEstimate per_micro = estimate_memory(units, config);
  config.grad_sync = sharding::GradSync::kPerStep;
  const MemoryEstimate per_step = estimate_memory(units, config);
  EXPECT_EQ(per_step.steady[MemoryCategory::kGradients],
            per_micro.steady[MemoryCategory::kGradients] + 4 * uint64_t(per_step.padded_numel));
  const std::string out = gradients(1, "per-step");
  EXPECT_TRUE(contains(out, "reduced once per step")) << out;
  EXPECT_TRUE(contains(out, format_bytes(per_step.steady[MemoryCategory::kGradients]))) << out;
  config.stage = 0;
  const MemoryEstimate stage0 = estimate_memory(units, config);
  config.grad_sync = sharding::GradSync::kPerMicroBatch;
  EXPECT_EQ(stage0.steady.total(), estimate_memory(units, config).steady.total());
  const Result bad = run({"--grad-sync", "never"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_TRUE(contains(bad.err, "--grad-sync 'never'")) << bad.err;
}

// --offload optimizer-nvme: the masters are on NVMe and on the CPU device the host keeps no copy
// of the gradient shard; --device cuda keeps it (4 bytes per master element), as the engine does.
TEST(ZsMem, OptimizerOnNvmeKeepsAHostGradientCopyOnlyOnAGpu) {
  MemoryModelConfig config;
  config.world = 2;
  config.stage = 3;
  config.offload = OffloadKind::kOptimizerNvme;
  const auto units = gpt_memory_units(models::gpt_preset("124M"));
  const MemoryEstimate cpu = estimate_memory(units, config);
  config.device_is_host = false;
  const MemoryEstimate gpu = estimate_memory(units, config);
  EXPECT_EQ(cpu.host[MemoryCategory::kGradients], 0u);
  // Stage 3's gradient shard: 4 bytes per element of the rank's shards.
  EXPECT_EQ(gpu.host[MemoryCategory::kGradients], cpu.steady[MemoryCategory::kGradients]);
  EXPECT_EQ(gpu.nvme, cpu.nvme);
  const Result r = run({"--model", "124M", "--ranks", "2", "--zero-stage", "3", "--offload",
                        "optimizer-nvme", "--device", "cuda"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "host copy of the gradient shard")) << r.out;
}

TEST(ZsMem, BadFlagsExitWithCode2AndSayWhy) {
  struct Bad {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Bad> cases = {
      {{"--frobnicate"}, "--frobnicate"},
      {{"--zero-stage", "4"}, "--zero-stage"},
      {{"--ranks", "0"}, "--ranks"},
      {{"--ranks", "two"}, "--ranks"},
      {{"--precision", "fp8"}, "--precision 'fp8'"},
      {{"--reduce-dtype", "int8"}, "--reduce-dtype 'int8'"},
      {{"--model", "gpt3"}, "gpt2-xl"},  // lists the known presets
      {{"--params", "1.5X"}, "--params '1.5X'"},
      {{"--model", "gpt2", "--params", "1B"}, "excludes"},
      {{"--model", "gpt2", "--units", "4"}, "--units"},
      {{"--params", "1B", "--units", "0"}, "--units"},
      {{"--zero-stage", "2", "--all-stages"}, "excludes"},
      {{"--ranks", "6", "--hybrid-group", "4"}, "multiple of --hybrid-group"},
      {{"--ranks", "8", "--hybrid-group", "4", "--zero-stage", "1"}, "--zero-stage 3"},
      {{"--optimizer", "lion"}, "--optimizer 'lion'"},
      {{"--momentum", "0.9"}, "--momentum"},
      {{"--offload", "nvme"}, "--offload 'nvme'"},
      {{"--offload-param", "disk"}, "--offload-param 'disk'"},
      {{"--device", "tpu"}, "--device 'tpu'"},
      {{"--offload", "optimizer", "--offload-param", "host"}, "--zero-stage 3"},
      {{"--zero-stage", "3", "--ranks", "2", "--offload-param", "host"}, "--offload optimizer"},
      {{"--budget", "16 gibibytes"}, "--budget '16 gibibytes'"},
      {{"--budget", "0"}, "--budget"},
      {{"--grad-accum", "0"}, "--grad-accum"},
      {{"--model", "gpt2", "--heads", "7"}, "not divisible by --heads 7"},
      {{"--params", "1B", "--layers", "4"}, "excludes"},
      {{"--layers", "0"}, "--layers"},
  };
  for (const Bad& bad : cases) {
    const Result r = run(bad.args);
    std::string joined;
    for (const std::string& a : bad.args) joined += a + " ";
    EXPECT_EQ(r.code, 2) << joined << "\n" << r.out << r.err;
    EXPECT_TRUE(contains(r.err, bad.says)) << joined << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << joined << ": " << r.out;
  }
}

// --micro-batch adds the activations per layer and the peak, without and with checkpointing,
// from the memory model (whose figures tests/train/engine_test.cc checks against a run).
TEST(ZsMem, ActivationsPerLayerWithAndWithoutCheckpointing) {
  const Result r = run({"--model", "gpt2", "--zero-stage", "0", "--micro-batch", "4", "--seq-len",
                        "1024", "--checkpoint-every", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  const models::GptConfig gpt = models::gpt_preset("gpt2");
  const ActivationEstimate plain = estimate_gpt_activations(gpt, 4, 1024, DType::kF32, 0);
  const ActivationEstimate every_second = estimate_gpt_activations(gpt, 4, 1024, DType::kF32, 2);
  EXPECT_TRUE(contains(r.out, "per layer: " + format_bytes(plain.per_layer) + " recorded, " +
                                  format_bytes(plain.per_layer_checkpointed) + " checkpointed"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "peak: " + format_bytes(plain.peak) +
                                  " without activation checkpointing, " +
                                  format_bytes(every_second.peak) + " with 6 of 12 layers"))
      << r.out;
  EXPECT_EQ(every_second.checkpointed_layers, 6);
  EXPECT_LT(every_second.peak, plain.peak);
  // GPT-2 124M at B = 4, T = 1024: 16·N·C floats a layer, the logits and their gradient.
  EXPECT_EQ(plain.per_layer, 16u * 4096 * 768 * 4 + 16u * 4096 + 4u * 4 * 12 * 1024);
  EXPECT_EQ(plain.per_layer_checkpointed, 4096u * 768 * 4);
  // Bare parameter counts have no layers to estimate; a sequence beyond the context is refused.
  const Result bare = run({"--params", "1B", "--micro-batch", "4"});
  EXPECT_EQ(bare.code, 2);
  const Result long_seq = run({"--model", "gpt2", "--micro-batch", "1", "--seq-len", "4096"});
  EXPECT_EQ(long_seq.code, 2);
  EXPECT_TRUE(contains(long_seq.err, "context 1024")) << long_seq.err;
}

}  // namespace
}  // namespace zs::train
