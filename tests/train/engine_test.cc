// The training engine end to end on local ranks: every stage and precision learns, stages agree
// bit for bit at equal world size, world sizes agree within fp32 tolerance, the traffic and
// memory reports match the formulas, the memory profile is written, and bad input fails with a
// clear error before anything runs.
#include "train/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "data/token_file.h"
#include "models/gpt_presets.h"
#include "runtime/error.h"
#include "tests/support/corpus.h"
#include "tests/support/scratch.h"
#include "train/cli.h"
#include "train/config.h"
#include "train/memory_model.h"

namespace zs::train {
namespace {

using zs::testing::error_message;
using zs::testing::file_exists;
using zs::testing::learnable_corpus;
using zs::testing::read_bytes;
using zs::testing::ScratchDir;
using zs::testing::write_text;

TrainConfig tiny_run(const std::string& text_path) {
  TrainConfig c;
  c.text = {text_path};
  c.model = "tiny";
  c.n_layer = 2;
  c.width = 32;
  c.n_head = 2;
  c.context = 32;
  c.micro_batch = 4;
  c.ranks = 2;
  c.threads = 1;
  c.steps = 30;
  c.lr = 3e-3f;
  c.warmup_steps = 3;
  c.log_interval = 1000;
  c.eval_batches = 4;
  c.progress = false;
  return c;
}

class Engine : public ::testing::Test {
 protected:
  void SetUp() override { write_text(path_, learnable_corpus()); }
  ScratchDir dir_;
  std::string path_ = dir_.path("corpus.txt");
};

TEST_F(Engine, EveryStageAndPrecisionLearns) {
  for (const DType precision : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int stage = 0; stage <= 3; ++stage) {
      TrainConfig c = tiny_run(path_);
      c.stage = stage;
      c.precision = precision;
      const TrainResult r = run_training(c);
      ASSERT_EQ(r.steps.size(), 30u);
      const float first = r.steps.front().loss, last = r.steps.back().loss;
      EXPECT_LT(last, 0.75f * first) << "stage " << stage << " " << dtype_name(precision);
      ASSERT_EQ(r.evals.size(), 1u);
      EXPECT_LT(r.evals.back().loss, first);
    }
  }
}

TEST_F(Engine, StagesGiveTheSameBitsAndWorldSizesAgree) {
  std::vector<TrainResult> runs;
  for (int stage = 0; stage <= 3; ++stage) {
    TrainConfig c = tiny_run(path_);
    c.stage = stage;
    c.steps = 8;
    runs.push_back(run_training(c));
  }
  for (int stage = 1; stage <= 3; ++stage) {
    for (size_t s = 0; s < runs[0].steps.size(); ++s) {
      EXPECT_EQ(runs[stage].steps[s].loss, runs[0].steps[s].loss) << "stage " << stage;
      EXPECT_EQ(runs[stage].steps[s].grad_norm, runs[0].steps[s].grad_norm) << "stage " << stage;
    }
    EXPECT_EQ(runs[stage].evals.back().loss, runs[0].evals.back().loss);
  }
  // One rank with twice the micro-batch sees the same global batches.
  TrainConfig one = tiny_run(path_);
  one.ranks = 1;
  one.micro_batch = 8;
  one.steps = 8;
  one.eval_batches = 8;
  TrainConfig two = tiny_run(path_);
  two.steps = 8;
  two.eval_batches = 4;
  two.micro_batch = 4;
  const TrainResult a = run_training(one), b = run_training(two);
  for (size_t s = 0; s < a.steps.size(); ++s) {
    EXPECT_NEAR(a.steps[s].loss, b.steps[s].loss, 1e-4f * std::abs(a.steps[s].loss)) << s;
  }
  ASSERT_EQ(a.evals.back().tokens, b.evals.back().tokens);
  EXPECT_NEAR(a.evals.back().loss, b.evals.back().loss, 1e-4);
  // Gradient accumulation: 2 micro-batches of 4 on one rank = 1 of 8.
  TrainConfig accum = one;
  accum.micro_batch = 4;
  accum.grad_accum = 2;
  const TrainResult c = run_training(accum);
  for (size_t s = 0; s < a.steps.size(); ++s) {
    EXPECT_NEAR(a.steps[s].loss, c.steps[s].loss, 1e-4f * std::abs(a.steps[s].loss)) << s;
  }
}

TEST_F(Engine, TrafficAndMemoryFollowTheStage) {
  for (int stage = 0; stage <= 3; ++stage) {
    TrainConfig c = tiny_run(path_);
    c.stage = stage;
    c.steps = 2;
    const TrainResult r = run_training(c);
    // The model's collectives are the formula; the logged loss and the grad norm add one fp32
    // all-reduce each: 2 × 2·(N−1)/N·4 bytes = 8 bytes at N = 2.
    EXPECT_EQ(r.bytes_sent, r.formula_bytes_sent + 8) << "stage " << stage;
    EXPECT_NE(r.traffic_table.find(stage == 0 ? "all_reduce" : "reduce_scatter"), std::string::npos)
        << r.traffic_table;
    // Stages 0-2 hold the full parameters; stage 3 holds its shard plus the gathered units.
    const size_t params = r.peak_max[static_cast<int>(MemoryCategory::kParameters)];
    const size_t full = static_cast<size_t>(r.parameters) * 4;
    if (stage < 3) {
      EXPECT_GE(params, full) << "stage " << stage;
    }
    EXPECT_NE(r.memory_table.find("optimizer_state"), std::string::npos) << r.memory_table;
  }
}

// --activation-checkpointing through the whole engine: the same losses, gradient norms and
// evaluation, the same traffic, a lower activation peak.
TEST_F(Engine, ActivationCheckpointingKeepsTheBitsAndTheTrafficAndLowersTheActivationPeak) {
  TrainConfig c = tiny_run(path_);
  c.n_layer = 4;
  c.steps = 4;
  c.eval_batches = 2;
  const TrainResult plain = run_training(c);
  c.checkpoint_every = 1;
  const TrainResult ckpt = run_training(c);
  ASSERT_EQ(ckpt.steps.size(), plain.steps.size());
  for (size_t s = 0; s < plain.steps.size(); ++s) {
    EXPECT_EQ(ckpt.steps[s].loss, plain.steps[s].loss) << s;
    EXPECT_EQ(ckpt.steps[s].grad_norm, plain.steps[s].grad_norm) << s;
  }
  EXPECT_EQ(ckpt.evals.back().loss, plain.evals.back().loss);
  EXPECT_EQ(ckpt.bytes_sent, plain.bytes_sent);
  const int activations = static_cast<int>(MemoryCategory::kActivations);
  EXPECT_LT(ckpt.peak_max[activations], plain.peak_max[activations]);
}

// zs-mem's activation estimate is what the run measures (the issue asks for 5%; on the CPU it is
// the byte), without and with checkpointing, where the head or a block's backward is the peak.
TEST_F(Engine, ZsMemActivationEstimateMatchesWhatTheRunMeasures) {
  struct Case {
    int64_t layers, width, micro_batch;
    DType precision;
    int checkpoint_every;
  };
  for (const Case k : {Case{2, 32, 4, DType::kF32, 0}, Case{2, 32, 4, DType::kF32, 1},
                       Case{3, 64, 2, DType::kBF16, 2}, Case{2, 256, 2, DType::kF32, 0},
                       Case{4, 32, 4, DType::kBF16, 1}}) {
    TrainConfig c = tiny_run(path_);
    c.n_layer = k.layers;
    c.width = k.width;
    c.micro_batch = k.micro_batch;
    c.precision = k.precision;
    c.checkpoint_every = k.checkpoint_every;
    c.steps = 1;
    c.eval_batches = 1;
    const TrainResult r = run_training(c);
    const models::GptConfig gpt = resolve_model_config(c);
    const ActivationEstimate e =
        estimate_gpt_activations(gpt, k.micro_batch, gpt.context, k.precision, k.checkpoint_every);
    const double measured =
        static_cast<double>(r.peak_max[static_cast<int>(MemoryCategory::kActivations)]);
    EXPECT_NEAR(static_cast<double>(e.peak), measured, 0.05 * measured)
        << "layers " << k.layers << ", width " << k.width << ", B " << k.micro_batch << ", "
        << dtype_name(k.precision) << ", checkpoint_every " << k.checkpoint_every;
  }
}

// zs-mem's numbers are what zs-train measures: the model-state categories' peaks exactly, the
// gradients within the estimator's bounds (they depend on when reductions finish).
TEST_F(Engine, ZsMemEstimateMatchesWhatTheRunMeasures) {
  for (const DType precision : {DType::kF32, DType::kBF16}) {
    for (int stage = 0; stage <= 3; ++stage) {
      TrainConfig c = tiny_run(path_);
      c.stage = stage;
      c.precision = precision;
      c.steps = 3;
      const TrainResult r = run_training(c);
      models::GptConfig shape = models::gpt_preset("tiny");
      shape.n_layer = c.n_layer;
      shape.width = c.width;
      shape.n_head = c.n_head;
      shape.context = c.context;
      MemoryModelConfig m;
      m.world = 2;
      m.stage = stage;
      m.param_dtype = m.reduce_dtype = precision;
      const MemoryEstimate e = estimate_memory(gpt_memory_units(shape), m);
      for (const MemoryCategory cat : {MemoryCategory::kParameters, MemoryCategory::kMasterWeights,
                                       MemoryCategory::kOptimizerState}) {
        EXPECT_EQ(r.peak_max[static_cast<int>(cat)], e.peak[cat])
            << category_name(cat) << ", stage " << stage << " " << dtype_name(precision);
      }
      const uint64_t grads = r.peak_max[static_cast<int>(MemoryCategory::kGradients)];
      EXPECT_GE(grads, e.peak_low[MemoryCategory::kGradients]) << "stage " << stage;
      EXPECT_LE(grads, e.peak_high[MemoryCategory::kGradients]) << "stage " << stage;
    }
  }
}

TEST_F(Engine, HybridTrafficIncludesTheAllReduceAcrossGroups) {
  TrainConfig c = tiny_run(path_);
  c.ranks = 4;
  c.micro_batch = 2;
  c.stage = 3;
  c.hybrid_group = 2;
  c.steps = 2;
  const TrainResult r = run_training(c);
  // Besides the formula: the logged loss over 4 ranks (2·3/4·4 = 6 bytes) and the grad norm
  // over the shard group of 2 (4 bytes).
  EXPECT_EQ(r.bytes_sent, r.formula_bytes_sent + 10) << r.traffic_table;
}

TEST_F(Engine, ProfileMemoryWritesJsonAndSvgPerRank) {
  TrainConfig c = tiny_run(path_);
  c.steps = 2;
  c.profile_memory = dir_.path("memory.json");
  run_training(c);
  for (int r = 0; r < 2; ++r) {
    const std::string json = dir_.path("memory.rank" + std::to_string(r) + ".json");
    const std::string svg = dir_.path("memory.rank" + std::to_string(r) + ".svg");
    ASSERT_TRUE(file_exists(json)) << json;
    ASSERT_TRUE(file_exists(svg)) << svg;
    const std::vector<uint8_t> bytes = read_bytes(svg);
    const std::string text(bytes.begin(), bytes.end());
    EXPECT_NE(text.find("<polygon"), std::string::npos);
    EXPECT_NE(text.find("parameters"), std::string::npos);
    const std::vector<uint8_t> j = read_bytes(json);
    EXPECT_NE(std::string(j.begin(), j.end()).find("step begins"), std::string::npos);
  }
}

TEST_F(Engine, SavedWeightsStartTheNextRunWhereThisOneEnded) {
  for (const char* name : {"w.safetensors", "w.bin"}) {
    TrainConfig a = tiny_run(path_);
    a.steps = 6;
    a.save_weights = dir_.path(name);
    const TrainResult first = run_training(a);
    ASSERT_TRUE(file_exists(a.save_weights));
    // Another stage and world size, starting from the file, with a learning rate too small to
    // move anything: it evaluates to the same loss.
    TrainConfig b = tiny_run(path_);
    b.init_from = a.save_weights;
    b.stage = 1;
    b.ranks = 1;
    b.micro_batch = 8;
    b.eval_batches = 8;
    b.steps = 1;
    b.lr = 1e-20f;
    const TrainResult second = run_training(b);
    EXPECT_NEAR(second.evals.back().loss, first.evals.back().loss, 1e-5) << name;
  }
  TrainConfig bad = tiny_run(path_);
  bad.save_weights = dir_.path("weights.pt");
  EXPECT_NE(error_message<InvalidArgument>([&] { run_training(bad); }).find(".safetensors"),
            std::string::npos);
  EXPECT_FALSE(file_exists(bad.save_weights));
}

// Sentiment-like TSV: the label is whether the sentence holds a "good" or a "bad" word.
std::string sentiment_tsv(int lines) {
  const char* subjects[] = {"the film", "this book", "our trip", "the meal", "that song"};
  const char* good[] = {"great", "lovely", "wonderful", "fine"};
  const char* bad[] = {"awful", "boring", "terrible", "dull"};
  std::string tsv;
  for (int i = 0; i < lines; ++i) {
    const bool positive = (i * 7 + i / 3) % 2 == 0;
    tsv += std::string(subjects[i % 5]) + " was " + (positive ? good[i % 4] : bad[(i / 2) % 4]) +
           (i % 3 == 0 ? " indeed" : "") + "\t" + (positive ? "pos" : "neg") + "\n";
  }
  return tsv;
}

TEST_F(Engine, ClassifierLearnsAndWorldSizesScoreTheSame) {
  const std::string train = dir_.path("train.tsv"), dev = dir_.path("dev.tsv");
  write_text(train, sentiment_tsv(256));
  write_text(dev, sentiment_tsv(40));
  TrainConfig c = tiny_run(path_);
  c.text.clear();
  c.data = train;
  c.eval_data = dev;
  c.steps = 80;
  c.eval_batches = 0;
  c.stage = 3;
  const TrainResult two = run_training(c);
  ASSERT_EQ(two.evals.size(), 1u);
  EXPECT_EQ(two.evals.back().tokens, 40);  // examples
  EXPECT_GE(two.evals.back().accuracy, 0.9) << two.evals.back().correct << " of 40";
  // One rank with the same global batch: the same predictions, the loss within fp32 tolerance.
  c.ranks = 1;
  c.micro_batch = 8;
  const TrainResult one = run_training(c);
  EXPECT_EQ(one.evals.back().correct, two.evals.back().correct);
  EXPECT_NEAR(one.evals.back().loss, two.evals.back().loss, 1e-4);
  // GPT-2 weight files are for language models.
  c.save_weights = dir_.path("w.safetensors");
  EXPECT_NE(error_message<InvalidArgument>([&] { run_training(c); }).find("classification"),
            std::string::npos);
}

TEST_F(Engine, BadInputFailsClearly) {
  TrainConfig c = tiny_run(path_);
  c.text.clear();
  c.data = dir_.path("missing.bin");
  EXPECT_NE(error_message<Error>([&] { run_training(c); }).find("missing.bin"), std::string::npos);

  // Token ids beyond the model's vocabulary.
  const std::string big = dir_.path("big.bin");
  std::vector<uint32_t> tokens(4000, 3);
  tokens[1234] = 300;
  data::write_token_file(big, tokens);
  c.data = big;
  const std::string vocab = error_message<InvalidArgument>([&] { run_training(c); });
  EXPECT_NE(vocab.find("300"), std::string::npos) << vocab;

  c = tiny_run(path_);
  c.n_head = 3;  // does not divide width 32
  EXPECT_NE(error_message<InvalidArgument>([&] { run_training(c); }).find("divisible"),
            std::string::npos);

  // A budget the model states alone exceed fails before anything is allocated; one they fit
  // but the activations do not fails in the first step. Both name what would fit.
  c = tiny_run(path_);
  c.memory_budget = 64 * 1024;
  const std::string early = error_message<OutOfMemory>([&] { run_training(c); });
  EXPECT_NE(early.find("too small for this model"), std::string::npos) << early;
  EXPECT_NE(early.find("zs-mem"), std::string::npos) << early;
  c.memory_budget = 700 * 1024;
  const std::string late = error_message<OutOfMemory>([&] { run_training(c); });
  EXPECT_NE(late.find("out of memory"), std::string::npos) << late;
  EXPECT_NE(late.find("activations"), std::string::npos) << late;
  EXPECT_NE(late.find("zs-mem"), std::string::npos) << late;

  c = tiny_run(path_);
  c.global_batch = 7;
  EXPECT_NE(error_message<InvalidArgument>([&] { run_training(c); }).find("global batch"),
            std::string::npos);
  c = tiny_run(path_);
  c.hybrid_group = 3;
  EXPECT_NE(error_message<InvalidArgument>([&] { run_training(c); }).find("hybrid"),
            std::string::npos);
}

TEST_F(Engine, TheDefaultEvaluationIsCapped) {
  TrainConfig c = tiny_run(path_);
  c.eval_batches = TrainConfig{}.eval_batches;  // 20 batches per rank
  c.steps = 1;
  c.micro_batch = 1;
  c.eval_fraction = 0.5;  // far more than 20 x 2 held-out windows
  const TrainResult r = run_training(c);
  ASSERT_EQ(r.evals.size(), 1u);
  EXPECT_EQ(r.evals.back().tokens, 20 * 2 * 1 * c.context);  // batches x ranks x rows x tokens
}

// --comm-timeout reaches the run's collectives: rank 1's communicator is slowed (every call
// waits 4 s before it reaches the group), so rank 0 waits alone in its first collective (at stage 3
// the split of the ShardedModel's gather group) and the run fails after the configured 0.5 s — not
// the 600 s default — naming that collective, its rank and the rank that did not arrive.
TEST_F(Engine, CommTimeoutBoundsTheRunsCollectivesAndNamesTheMissingRank) {
  TrainConfig c = tiny_run(path_);
  c.steps = 4;
  c.comm_timeout_s = 0.5;
  InjectedFault slow;
  slow.rank = 1;
  slow.step = -1;  // a communicator fault (comm/fault_backend.h), not a throw at a step
  slow.comm.delay = std::chrono::milliseconds(4000);
  c.injected_faults = {slow};
  const auto start = std::chrono::steady_clock::now();
  const std::string message = error_message<CommTimeout>([&] { run_training(c); });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      message, m,
      std::regex("(all_reduce|all_gather|reduce_scatter|broadcast|barrier|split) #[0-9]+ .* on "
                 "rank 0 of 2 timed out after ([0-9]+) ms")))
      << message;
  const int waited_ms = std::atoi(m[2].str().c_str());
  EXPECT_GE(waited_ms, 450) << message;
  EXPECT_LT(waited_ms, 2500) << "the flag's 0.5 s, not ZS_COMM_TIMEOUT_S or 600 s: " << message;
  EXPECT_NE(message.find("waiting for rank 1 to arrive"), std::string::npos) << message;
  // The run ends once rank 1's delayed call returns into the aborted group.
  EXPECT_LT(seconds, 10.0);
}

TEST_F(Engine, ACommTimeoutOutOfRangeIsRefusedBeforeTraining) {
  TrainConfig c = tiny_run(path_);
  c.comm_timeout_s = -1;
  EXPECT_NE(error_message<InvalidArgument>([&] { run_training(c); }).find("--comm-timeout -1"),
            std::string::npos);
}

TEST_F(Engine, DivergenceStopsWithANumericalError) {
  TrainConfig c = tiny_run(path_);
  c.lr = 1e30f;
  c.clip = 0;
  c.steps = 5;
  const std::string message = error_message<NumericalError>([&] { run_training(c); });
  EXPECT_NE(message.find("lower --lr"), std::string::npos) << message;
}

TEST(TrainCli, ParsesFlagsOverADeepSpeedConfig) {
  ScratchDir dir;
  const std::string ds = dir.path("ds_config.json");
  write_text(ds, R"({
    "train_micro_batch_size_per_gpu": 3,
    "gradient_accumulation_steps": 2,
    "gradient_clipping": 0.5,
    "bf16": {"enabled": true},
    "zero_optimization": {"stage": 3, "overlap_comm": true, "reduce_bucket_size": 5e8},
    "optimizer": {"type": "AdamW", "params": {"lr": 6e-4, "betas": [0.9, 0.98], "eps": 1e-6,
                                               "weight_decay": 0.05}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 6e-4,
                                                      "warmup_num_steps": 10, "total_num_steps": 50}}
  })");
  const char* argv[] = {"zs-train", "--deepspeed",     ds.c_str(), "--zero-stage",
                        "3",        "--memory-budget", "1.5GiB",   "--no-prefetch"};
  TrainConfig c;
  std::vector<std::string> notes;
  EXPECT_FALSE(parse_train_args(8, argv, c, &notes, nullptr));
  EXPECT_EQ(c.micro_batch, 3);
  EXPECT_EQ(c.grad_accum, 2);
  EXPECT_FLOAT_EQ(c.clip, 0.5f);
  EXPECT_EQ(c.precision, DType::kBF16);
  EXPECT_EQ(c.stage, 3);  // the flag restates the file's 3 (a disagreement is an error: cli_test)
  EXPECT_FLOAT_EQ(c.lr, 6e-4f);
  EXPECT_FLOAT_EQ(c.beta2, 0.98f);
  EXPECT_FLOAT_EQ(c.weight_decay, 0.05f);
  EXPECT_EQ(c.decay, optim::LrDecay::kLinear);
  EXPECT_EQ(c.warmup_steps, 10);
  EXPECT_EQ(c.steps, 50);
  EXPECT_EQ(c.memory_budget, size_t{3} << 29);
  EXPECT_FALSE(c.prefetch);
  ASSERT_EQ(notes.size(), 2u);  // overlap_comm and reduce_bucket_size: understood, no effect
}

TEST(TrainCli, RejectsUnknownKeysFlagsAndUnsupportedFeatures) {
  TrainConfig c;
  const std::string unknown = error_message<InvalidArgument>([&] {
    apply_deepspeed_json(R"({"zero_optimization": {"stage": 1, "stag3_prefetch": 1},
                             "trian_batch_size": 8})",
                         "ds.json", c, nullptr);
  });
  EXPECT_NE(unknown.find("zero_optimization.stag3_prefetch"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("trian_batch_size"), std::string::npos) << unknown;
  const std::string offload = error_message<InvalidArgument>([&] {
    apply_deepspeed_json(R"({"zero_optimization": {"offload_param": {"device": "disk"}}})",
                         "ds.json", c, nullptr);
  });
  EXPECT_NE(offload.find("offload_param.device"), std::string::npos) << offload;
  EXPECT_NE(error_message<InvalidArgument>([&] {
              apply_deepspeed_json("{\"fp16\": {\"enabled\": 1", "ds.json", c, nullptr);
            }).find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_message<InvalidArgument>([&] {
              apply_deepspeed_json(R"({"gradient_clipping": "big"})", "ds.json", c, nullptr);
            }).find("gradient_clipping"),
            std::string::npos);

  const char* bad_flag[] = {"zs-train", "--zero-stgae", "3"};
  EXPECT_NE(error_message<InvalidArgument>([&] {
              parse_train_args(3, bad_flag, c, nullptr, nullptr);
            }).find("zero-stgae"),
            std::string::npos);
  const char* bad_precision[] = {"zs-train", "--precision", "fp8"};
  EXPECT_NE(error_message<InvalidArgument>([&] {
              parse_train_args(3, bad_precision, c, nullptr, nullptr);
            }).find("fp8"),
            std::string::npos);
  const char* bad_budget[] = {"zs-train", "--memory-budget", "lots"};
  EXPECT_NE(error_message<InvalidArgument>([&] {
              parse_train_args(3, bad_budget, c, nullptr, nullptr);
            }).find("lots"),
            std::string::npos);
  // The program's exit code: 2 for bad usage.
  EXPECT_EQ(train_main(3, bad_flag), 2);
}

TEST(TrainCli, ParsesSizes) {
  EXPECT_EQ(parse_bytes("1024"), 1024u);
  EXPECT_EQ(parse_bytes("64KiB"), 65536u);
  EXPECT_EQ(parse_bytes("2GB"), 2000000000u);
  EXPECT_EQ(parse_bytes("1.5 GiB"), size_t{3} << 29);
  EXPECT_THROW(parse_bytes("-1GiB"), InvalidArgument);
  EXPECT_THROW(parse_bytes("12 parsecs"), InvalidArgument);
}

}  // namespace
}  // namespace zs::train

namespace zs::train {
namespace {

// --eval-micro-batch with several sizes: each evaluation point scores the same held-out tokens
// once per size, in order, and records the size; the loss does not depend on it beyond the
// order of the double sums.
TEST_F(Engine, EachEvaluationBatchSizeScoresTheSameHeldOutSet) {
  TrainConfig c = tiny_run(path_);
  c.steps = 3;
  c.eval_batches = 0;  // every held-out window, whatever the batch
  c.eval_micro_batches = {1, 3, 8};
  const TrainResult result = run_training(c);
  ASSERT_EQ(result.evals.size(), 3u);
  for (size_t i = 0; i < result.evals.size(); ++i) {
    const EvalRecord& e = result.evals[i];
    EXPECT_EQ(e.batch, c.eval_micro_batches[i]);
    EXPECT_EQ(e.step, 3);
    EXPECT_EQ(e.tokens, result.evals[0].tokens);
    EXPECT_NEAR(e.loss, result.evals[0].loss, 1e-6 * result.evals[0].loss);
    EXPECT_GT(e.predict_ms, 0);
  }
  c.eval_micro_batches = {0};
  EXPECT_NE(error_message<InvalidArgument>([&] {
              run_training(c);
            }).find("--eval-micro-batch must be >= 1"),
            std::string::npos);
}

}  // namespace
}  // namespace zs::train
