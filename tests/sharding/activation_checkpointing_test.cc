// Activation checkpointing (ShardingConfig::checkpoint_every): which units are checkpointed; the
// losses, gradients and parameters equal a run without it bit for bit at every stage and
// precision, with dropout in the checkpointed units; traffic is unchanged (no extra all-gather
// at stage 3: the recompute uses the parameters gathered for the backward); and the activation
// peak falls.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "models/layers.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "runtime/memory_tracker.h"
#include "tests/sharding/sharding_test_util.h"

namespace zs::sharding {
namespace {

// The dropout masks' key: set by the test before each forward and left installed until the next
// one, so a unit recomputed in backward draws the same masks (models/module.h).
struct DropoutKey {
  uint64_t seed = 5;
  uint32_t step = 0;
};

// A pre-LN block with dropout on both residual branches, each site keyed by its name and the
// step.
class DropoutBlock : public models::Module {
 public:
  DropoutBlock(int64_t width, int64_t n_head, float p, std::shared_ptr<const DropoutKey> key)
      : Module("DropoutBlock"),
        ln1_(emplace<models::LayerNorm>("ln1", width)),
        attn_(emplace<models::SelfAttention>("attn", width, n_head, true, 0.02f)),
        ln2_(emplace<models::LayerNorm>("ln2", width)),
        mlp_(emplace<models::Mlp>("mlp", width, 4 * width, 0.02f)),
        p_(p),
        key_(std::move(key)) {}

 protected:
  Tensor forward(const Tensor& x) override {
    Tensor h = ops::add(x, ops::dropout(attn_(ln1_(x)), p_, site("attn")));
    return ops::add(h, ops::dropout(mlp_(ln2_(h)), p_, site("mlp")));
  }

 private:
  RngKey site(const char* what) const {
    return rng_key(key_->seed, name() + ".dropout." + what, key_->step);
  }
  models::LayerNorm& ln1_;
  models::SelfAttention& attn_;
  models::LayerNorm& ln2_;
  models::Mlp& mlp_;
  float p_;
  std::shared_ptr<const DropoutKey> key_;
};

constexpr int64_t kVocab = 37;
constexpr int64_t kWidth = 12;

// Token embedding (dropout too) → DropoutBlocks → final norm → tied head.
class DropoutNet : public models::Module {
 public:
  DropoutNet(int64_t layers, float p, std::shared_ptr<const DropoutKey> key)
      : Module("DropoutNet"),
        wte_(declare("wte", {kVocab, kWidth}, models::InitRule::normal(0.02f))),
        blocks_(emplace<models::Sequential>("blocks")),
        ln_f_(emplace<models::LayerNorm>("ln_f", kWidth)),
        p_(p),
        key_(key) {
    for (int64_t l = 0; l < layers; ++l) {
      blocks_.append(std::make_unique<DropoutBlock>(kWidth, 3, p, key));
    }
  }
  Tensor loss(const Tensor& ids, const Tensor& targets) {
    return ops::cross_entropy((*this)(ids), targets.view({-1}));
  }

 protected:
  Tensor forward(const Tensor& ids) override {
    Tensor x = ops::dropout(ops::embedding(wte_.tensor(), ids), p_,
                            rng_key(key_->seed, "wte.dropout", key_->step));
    x = ln_f_(blocks_(x));
    return ops::linear(x.view({ids.size(0) * ids.size(1), kWidth}), wte_.tensor());
  }

 private:
  models::Parameter& wte_;
  models::Sequential& blocks_;
  models::LayerNorm& ln_f_;
  float p_;
  std::shared_ptr<const DropoutKey> key_;
};

// What one rank saw: every step's loss, every step's reduced fp32 gradient shards (after
// finish_backward, before the optimizer), the final masters, the collectives' totals and the
// activation peak.
struct RankRun {
  std::vector<float> losses;
  std::vector<std::vector<float>> grads;
  std::vector<std::vector<float>> masters;
  uint64_t bytes_sent = 0;
  uint64_t calls = 0;
  size_t activation_peak = 0;
};

std::vector<RankRun> run_dropout_net(int world, int stage, DType dtype, int checkpoint_every,
                                     float p = 0.2f, int steps = 3) {
  std::vector<RankRun> by_rank(static_cast<size_t>(world));
  comm::run_local_ranks(world, [&](comm::Communicator& comm) {
    RankRun& out = by_rank[static_cast<size_t>(comm.rank())];
    MemoryTracker tracker;
    CpuAllocator allocator(&tracker);
    auto key = std::make_shared<DropoutKey>();
    DropoutNet model(3, p, key);
    ShardingConfig config;
    config.stage = stage;
    config.seed = 9;
    config.param_dtype = dtype;
    config.reduce_dtype = dtype;
    config.wrap_types = {"DropoutBlock"};
    config.checkpoint_every = checkpoint_every;
    ShardedModel sharded(model, comm, allocator, config);
    optim::AdamWOptions adam;
    adam.lr = 1e-2f;
    optim::AdamW optimizer(sharded.local_shards(), adam);
    Tensor ids = Tensor::empty({2, kSeq}, DType::kI32, allocator, "ids");
    Tensor targets = Tensor::empty({2, kSeq}, DType::kI32, allocator, "targets");
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t t = 0; t < kSeq; ++t) {
        ids.data<int32_t>()[b * kSeq + t] = testing::token(comm.rank() * 2 + b, t, 0);
        targets.data<int32_t>()[b * kSeq + t] = testing::token(comm.rank() * 2 + b, t, 1);
      }
    }
    comm.stats().reset();
    tracker.reset_peaks();
    for (int step = 0; step < steps; ++step) {
      key->step = static_cast<uint32_t>(step);
      {
        MemoryCategoryScope activations(MemoryCategory::kActivations);
        Tensor loss = model.loss(ids, targets);
        out.losses.push_back(loss.item());
        backward(loss);
      }
      sharded.finish_backward();
      std::vector<float> grads;
      for (const ShardView& shard : sharded.local_shards()) {
        const std::vector<float> g = shard.grad.to_vector();
        grads.insert(grads.end(), g.begin(), g.end());
      }
      out.grads.push_back(std::move(grads));
      optimizer.step(adam.lr);
      sharded.after_step();
    }
    for (const ShardView& shard : sharded.local_shards()) {
      out.masters.push_back(shard.master.to_vector());
    }
    out.bytes_sent = comm.stats().total().bytes_sent;
    out.calls = comm.stats().total().calls;
    out.activation_peak = tracker.peak(MemoryCategory::kActivations);
  });
  return by_rank;
}

// Bit patterns, so that -0 vs +0 and NaN payloads count as differences.
std::vector<uint32_t> bits(const std::vector<float>& values) {
  std::vector<uint32_t> out(values.size());
  // An empty vector's data() may be null, which memcpy must not be given (UBSan), even for 0.
  if (!values.empty()) std::memcpy(out.data(), values.data(), values.size() * sizeof(float));
  return out;
}

// A run of the GPT fixture with checkpointing against one without: losses, gradient norms (where
// clipping recorded them) and final parameters, bit for bit.
void expect_same_bits(const RunResult& ckpt, const RunResult& plain, const std::string& what) {
  EXPECT_EQ(bits(ckpt.losses), bits(plain.losses)) << what;
  EXPECT_EQ(bits(ckpt.grad_norms), bits(plain.grad_norms)) << what;
  ASSERT_EQ(ckpt.params.size(), plain.params.size()) << what;
  for (size_t u = 0; u < plain.params.size(); ++u) {
    EXPECT_EQ(bits(ckpt.params[u]), bits(plain.params[u])) << what << " unit " << u;
  }
}

TEST(ActivationCheckpointing, ChecksUnitsBelowTheRootThatEncloseNoOtherUnit) {
  comm::run_local_ranks(1, [](comm::Communicator& comm) {
    CpuAllocator allocator(nullptr);
    models::GptConfig gpt = uneven_config();
    gpt.n_layer = 5;
    models::Gpt model(gpt);
    ShardingConfig config;
    config.checkpoint_every = 2;
    ShardedModel sharded(model, comm, allocator, config);
    std::vector<std::string> checkpointed;
    for (const auto& unit : sharded.units()) {
      if (unit.checkpointed) checkpointed.push_back(unit.name);
    }
    EXPECT_EQ(checkpointed, (std::vector<std::string>{"blocks.0", "blocks.2", "blocks.4"}));
  });
  comm::run_local_ranks(1, [](comm::Communicator& comm) {
    CpuAllocator allocator(nullptr);
    models::Gpt model(uneven_config());
    ShardingConfig config;
    config.checkpoint_every = -1;
    EXPECT_THROW({ ShardedModel refused(model, comm, allocator, config); }, InvalidArgument);
    // A Block unit enclosing Linear units is not checkpointed; the Linears are.
    config.checkpoint_every = 1;
    config.wrap_types = {"Block", "Linear"};
    ShardedModel sharded(model, comm, allocator, config);
    for (const auto& unit : sharded.units()) {
      const bool linear = unit.name.find("qkv") != std::string::npos ||
                          unit.name.find("proj") != std::string::npos ||
                          unit.name.find("fc") != std::string::npos;
      EXPECT_EQ(unit.checkpointed, linear) << unit.name;
    }
  });
}

TEST(ActivationCheckpointing, BitwiseEqualWithDropoutAtEveryStageAndPrecision) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " stage " + std::to_string(stage));
      const std::vector<RankRun> plain = run_dropout_net(2, stage, dtype, 0);
      const std::vector<RankRun> every = run_dropout_net(2, stage, dtype, 1);
      const std::vector<RankRun> second = run_dropout_net(2, stage, dtype, 2);
      for (size_t r = 0; r < plain.size(); ++r) {
        for (const std::vector<RankRun>* run : {&every, &second}) {
          const RankRun& ckpt = (*run)[r];
          EXPECT_EQ(bits(ckpt.losses), bits(plain[r].losses)) << "rank " << r;
          ASSERT_EQ(ckpt.grads.size(), plain[r].grads.size());
          for (size_t s = 0; s < plain[r].grads.size(); ++s) {
            EXPECT_EQ(bits(ckpt.grads[s]), bits(plain[r].grads[s]))
                << "rank " << r << " step " << s;
          }
          ASSERT_EQ(ckpt.masters.size(), plain[r].masters.size());
          for (size_t u = 0; u < plain[r].masters.size(); ++u) {
            EXPECT_EQ(bits(ckpt.masters[u]), bits(plain[r].masters[u])) << "rank " << r;
          }
          // The recompute uses the parameters gathered for the backward: the same collectives.
          EXPECT_EQ(ckpt.calls, plain[r].calls);
          EXPECT_EQ(ckpt.bytes_sent, plain[r].bytes_sent);
        }
      }
    }
  }
}

// Dropout really draws (a run with p = 0 differs), so the test above would see a recompute
// that drew other masks.
TEST(ActivationCheckpointing, DropoutChangesTheLosses) {
  const std::vector<RankRun> with = run_dropout_net(1, 0, DType::kF32, 1, 0.2f, 1);
  const std::vector<RankRun> without = run_dropout_net(1, 0, DType::kF32, 1, 0.0f, 1);
  EXPECT_NE(bits(with[0].losses), bits(without[0].losses));
}

TEST(ActivationCheckpointing, GptTrainingIsBitwiseEqualWithAccumulationAndUnevenShards) {
  RunOptions run;
  run.world = 3;
  run.steps = 3;
  run.micro_batches = 2;
  run.clip_norm = 0.5f;
  for (int stage : {0, 3}) {
    run.stage = stage;
    ShardingConfig checkpointed;
    checkpointed.checkpoint_every = 1;
    expect_same_bits(train(run, checkpointed), train(run), "stage " + std::to_string(stage));
  }
}

// Accumulation without per-micro-batch traffic (GradSync::kPerStep, stages 0/1) sums the
// checkpointed units' recomputed gradients like the recorded ones.
TEST(ActivationCheckpointing, BitwiseEqualWithPerStepGradientSync) {
  RunOptions run;
  run.world = 2;
  run.steps = 3;
  run.micro_batches = 3;
  for (int stage : {0, 1}) {
    run.stage = stage;
    ShardingConfig per_step;
    per_step.grad_sync = GradSync::kPerStep;
    ShardingConfig checkpointed = per_step;
    checkpointed.checkpoint_every = 1;
    expect_same_bits(train(run, checkpointed), train(run, per_step),
                     "per-step stage " + std::to_string(stage));
  }
}

TEST(ActivationCheckpointing, MemoryAndTrafficFormulasHold) {
  ShardingConfig config;
  config.checkpoint_every = 1;
  for (int world : {1, 2, 3}) {
    comm::run_local_ranks(world, [&](comm::Communicator& comm) {
      for (int stage = 0; stage <= 3; ++stage) {
        testing::expect_memory_and_traffic_formulas(comm, stage, config);
      }
    });
  }
}

// The activation peak of one step of a 6-layer GPT: checkpointing every block keeps one block's
// activations plus the blocks' inputs; every second block, about half.
TEST(ActivationCheckpointing, ActivationPeakFalls) {
  const auto peak = [](int checkpoint_every) {
    size_t result = 0;
    comm::run_local_ranks(1, [&](comm::Communicator& comm) {
      MemoryTracker tracker;
      CpuAllocator allocator(&tracker);
      models::GptConfig gpt;
      gpt.vocab_size = kVocab;
      gpt.context = 32;
      gpt.width = 32;
      gpt.n_head = 4;
      gpt.n_layer = 6;
      models::Gpt model(gpt);
      ShardingConfig config;
      config.checkpoint_every = checkpoint_every;
      ShardedModel sharded(model, comm, allocator, config);
      Tensor ids = Tensor::zeros({4, 32}, DType::kI32, allocator, "ids");
      Tensor targets = Tensor::zeros({4, 32}, DType::kI32, allocator, "targets");
      tracker.reset_peaks();
      {
        MemoryCategoryScope activations(MemoryCategory::kActivations);
        backward(model.loss(ids, targets));
      }
      sharded.finish_backward();
      result = tracker.peak(MemoryCategory::kActivations);
    });
    return result;
  };
  const size_t plain = peak(0);
  const size_t every = peak(1);
  const size_t second = peak(2);
  RecordProperty("activation_peak_plain", std::to_string(plain));
  RecordProperty("activation_peak_every", std::to_string(every));
  RecordProperty("activation_peak_every_second", std::to_string(second));
  EXPECT_LT(every * 3, plain) << "plain " << plain << ", every unit " << every;
  EXPECT_LT(second, plain) << "plain " << plain << ", every second unit " << second;
  EXPECT_LT(every, second);
}

}  // namespace
}  // namespace zs::sharding
