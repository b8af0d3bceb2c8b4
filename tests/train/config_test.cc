// TrainConfig's one translation into the layers' configurations (sharding, optimizer, schedule,
// loss scaling, sampler, zs-mem's model) and the model-config JSON.
#include "train/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <iterator>
#include <string>

#include "models/gpt_presets.h"
#include "runtime/error.h"
#include "tests/support/error_text.h"
#include "tests/support/scratch.h"

namespace zs::train {
namespace {

using zs::testing::error_message;
using zs::testing::invalid_argument_message;

TEST(TrainConfigTranslate, ShardingSettings) {
  TrainConfig c;
  c.stage = 2;
  c.hybrid_group = 0;
  c.seed = 77;
  c.precision = DType::kBF16;
  c.prefetch = false;
  c.max_live_gathered_bytes = 1000;
  c.keep_gathered_below_bytes = 200;
  c.max_reductions_in_flight = 5;
  const TrainPlan plan = translate(c, 1, 4);
  EXPECT_EQ(plan.sharding.stage, 2);
  EXPECT_EQ(plan.sharding.hybrid_group, 0);
  EXPECT_EQ(plan.sharding.seed, 77u);
  EXPECT_EQ(plan.sharding.param_dtype, DType::kBF16);
  EXPECT_EQ(plan.sharding.reduce_dtype, DType::kBF16);  // the compute dtype unless set
  EXPECT_FALSE(plan.sharding.prefetch);
  EXPECT_EQ(plan.sharding.max_live_gathered_bytes, 1000u);
  EXPECT_EQ(plan.sharding.keep_gathered_below_bytes, 200u);
  EXPECT_EQ(plan.sharding.max_reductions_in_flight, 5);
  c.reduce_dtype = DType::kF32;
  c.reduce_dtype_set = true;
  EXPECT_EQ(translate(c, 0, 1).sharding.reduce_dtype, DType::kF32);
}

TEST(TrainConfigTranslate, OptimizerScheduleScalingAndSampler) {
  TrainConfig c;
  c.lr = 2e-3f;
  c.beta1 = 0.8f;
  c.beta2 = 0.9f;
  c.eps = 1e-6f;
  c.weight_decay = 0.01f;
  c.warmup_steps = 4;
  c.decay = optim::LrDecay::kLinear;
  c.micro_batch = 3;
  c.grad_accum = 2;
  c.seed = 9;
  TrainPlan plan = translate(c, 2, 4);
  EXPECT_EQ(plan.optimizer.choice, OptimizerChoice::kAdamW);
  EXPECT_FLOAT_EQ(plan.optimizer.adamw.beta1, 0.8f);
  EXPECT_FLOAT_EQ(plan.optimizer.adamw.beta2, 0.9f);
  EXPECT_FLOAT_EQ(plan.optimizer.adamw.eps, 1e-6f);
  EXPECT_FLOAT_EQ(plan.optimizer.adamw.weight_decay, 0.01f);
  EXPECT_EQ(plan.schedule.decay, optim::LrDecay::kLinear);
  EXPECT_FLOAT_EQ(plan.schedule.peak_lr, 2e-3f);
  EXPECT_FLOAT_EQ(plan.schedule.min_lr, 2e-4f);  // lr / 10 unless set
  EXPECT_EQ(plan.schedule.warmup_steps, 4);
  EXPECT_FLOAT_EQ(plan.schedule.make(10).lr(4), 2e-3f);
  EXPECT_FALSE(plan.loss_scaling.dynamic);  // fp32
  EXPECT_FLOAT_EQ(plan.loss_scaling.static_scale, 1);
  EXPECT_EQ(plan.sampler.global_batch, 12);  // micro batch x world
  EXPECT_EQ(plan.sampler.rank, 2);
  EXPECT_EQ(plan.sampler.world_size, 4);
  EXPECT_EQ(plan.sampler.seed, 9u);
  EXPECT_EQ(plan.micro_batches_per_step, 2);

  c.optimizer = "sgd";
  c.momentum = 0.5f;
  c.nesterov = true;
  c.min_lr = 0;
  c.precision = DType::kF16;
  plan = translate(c, 0, 1);
  EXPECT_EQ(plan.optimizer.choice, OptimizerChoice::kSgd);
  EXPECT_FLOAT_EQ(plan.optimizer.sgd.momentum, 0.5f);
  EXPECT_TRUE(plan.optimizer.sgd.nesterov);
  EXPECT_FLOAT_EQ(plan.optimizer.sgd.weight_decay, 0.01f);
  EXPECT_FLOAT_EQ(plan.schedule.min_lr, 0);
  EXPECT_TRUE(plan.loss_scaling.dynamic);  // fp16 without a static scale
  c.static_loss_scale = 128;
  plan = translate(c, 0, 1);
  EXPECT_FALSE(plan.loss_scaling.dynamic);
  EXPECT_FLOAT_EQ(plan.loss_scaling.static_scale, 128);
}

TEST(TrainConfigTranslate, TotalSteps) {
  TrainConfig c;
  c.steps = 7;
  c.grad_accum = 2;
  EXPECT_EQ(total_steps(c, 100), 7);
  c.epochs = 3;
  EXPECT_EQ(total_steps(c, 11), 15);  // 5 steps per epoch
  EXPECT_NE(error_message<InvalidArgument>([&] { total_steps(c, 1); }).find("--grad-accum"),
            std::string::npos);
}

TEST(TrainConfigTranslate, MemoryModelUsesTheSameShardingSettings) {
  TrainConfig c;
  c.precision = DType::kF16;
  c.hybrid_group = 2;
  c.grad_accum = 4;
  c.optimizer = "sgd";
  c.momentum = 0;
  c.keep_gathered_below_bytes = 64;
  c.max_live_gathered_bytes = 4096;
  c.max_reductions_in_flight = 3;
  const TrainPlan plan = translate(c, 0, 8);
  const MemoryModelConfig m = memory_model_config(c, 8, 3);
  EXPECT_EQ(m.world, 8);
  EXPECT_EQ(m.stage, 3);
  EXPECT_EQ(m.hybrid_group, 2);
  EXPECT_EQ(m.param_dtype, plan.sharding.param_dtype);
  EXPECT_EQ(m.reduce_dtype, plan.sharding.reduce_dtype);
  EXPECT_EQ(m.alignment, plan.sharding.alignment);
  EXPECT_EQ(m.prefetch, plan.sharding.prefetch);
  // ...and those are the flags' values, not two equal defaults.
  EXPECT_EQ(m.param_dtype, DType::kF16);
  EXPECT_EQ(m.reduce_dtype, DType::kF16);
  EXPECT_TRUE(m.prefetch);
  EXPECT_EQ(m.alignment, sharding::ShardingConfig{}.alignment);
  EXPECT_EQ(m.keep_gathered_below_bytes, 64u);
  EXPECT_EQ(m.max_live_gathered_bytes, 4096u);
  EXPECT_EQ(m.max_reductions_in_flight, 3);
  EXPECT_EQ(m.optimizer, OptimizerKind::kSgd);
  EXPECT_TRUE(m.gradient_accumulation);
  // Hybrid sharding is a stage-3 layout: other stages' estimates have no group.
  EXPECT_EQ(memory_model_config(c, 8, 1).hybrid_group, 0);
  c.momentum = 0.9f;
  EXPECT_EQ(memory_model_config(c, 8, 1).optimizer, OptimizerKind::kSgdMomentum);
  c.optimizer = "adamw";
  EXPECT_EQ(memory_model_config(c, 8, 1).optimizer, OptimizerKind::kAdamW);
}

TEST(TrainConfigModel, JsonKeysOverThePresetAndFlagsOverThem) {
  models::GptConfig g = models::gpt_preset("tiny");
  apply_model_config_json(R"({"n_layer": 3, "width": 48, "n_head": 3})", "m.json", g);
  EXPECT_EQ(g.n_layer, 3);
  EXPECT_EQ(g.width, 48);
  EXPECT_EQ(g.n_head, 3);
  EXPECT_NE(error_message<InvalidArgument>([&] {
              apply_model_config_json(R"({"layers": 3})", "m.json", g);
            }).find("unknown key 'layers'"),
            std::string::npos);
  EXPECT_NE(error_message<InvalidArgument>([&] {
              apply_model_config_json(R"({"width": 1.5})", "m.json", g);
            }).find("'width' must be an integer"),
            std::string::npos);
  EXPECT_NE(error_message<InvalidArgument>([&] {
              apply_model_config_json("{", "m.json", g);
            }).find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_message<InvalidArgument>([&] {
              apply_model_config_json("[1]", "m.json", g);
            }).find("JSON object"),
            std::string::npos);

  zs::testing::ScratchDir dir;
  TrainConfig c;
  c.model_config = dir.path("model.json");
  zs::testing::write_text(c.model_config, R"({"n_layer": 5, "context": 64})");
  c.n_layer = 2;  // a flag wins over the file
  const models::GptConfig resolved = resolve_model_config(c);
  EXPECT_EQ(resolved.n_layer, 2);
  EXPECT_EQ(resolved.context, 64);
  c.model_config = dir.path("missing.json");
  EXPECT_THROW(resolve_model_config(c), IoError);
}

// Issue 28: outputs are checked before the first step, not when the run writes them.
TEST(TrainConfigOutputs, EveryOutputPathIsProbedBeforeTraining) {
  zs::testing::ScratchDir dir;
  zs::testing::write_text(dir.path("file.txt"), "x");
  // Writable: nothing is left behind by the probe.
  check_output_file("--save-weights", dir.path("w.safetensors"), "weights");
  check_output_directory("--checkpoint-dir", dir.path("ck/deeper"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path("")),
                          std::filesystem::directory_iterator()),
            1);
  // A missing directory, a directory for a file, a file for a directory.
  EXPECT_NE(invalid_argument_message([&] {
              check_output_file("--save-weights", dir.path("nodir/w.safetensors"), "weights");
            }).find("does not exist; create it or write the weights elsewhere"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([&] {
              check_output_file("--profile-memory", dir.path(""), "memory profile");
            }).find("is a directory; name a file in it"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([&] {
              check_output_directory("--checkpoint-dir", dir.path("file.txt"));
            }).find("exists and is not a directory"),
            std::string::npos);
  // Where no file can be made (even by root: /proc takes none), before any step.
  EXPECT_NE(invalid_argument_message([&] {
              check_output_file("--trace", "/proc/t.json", "trace");
            }).find("cannot create a file in '/proc'"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([&] {
              check_output_directory("--checkpoint-dir", "/proc/zs-ck/step");
            }).find("cannot create files in '/proc'"),
            std::string::npos);
  TrainConfig config;
  config.save_weights = dir.path("nodir/w.safetensors");
  EXPECT_NE(invalid_argument_message([&] { check_outputs(config, true); }).find("--save-weights"),
            std::string::npos);
  check_outputs(config, /*lead=*/false);  // only the lead rank writes the weights
  // A path the system cannot look at is an InvalidArgument, not a filesystem_error.
  EXPECT_NE(invalid_argument_message([&] {
              check_output_file("--trace", dir.path(std::string(300, 'x') + "/t.json"), "trace");
            }).find("--trace"),
            std::string::npos);
}

}  // namespace
}  // namespace zs::train
