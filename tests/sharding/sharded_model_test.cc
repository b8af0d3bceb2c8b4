// ZeRO stages 0–3 on the local backend: bitwise parity across stages at equal world size (and
// under every limit on reductions in flight), agreement across world sizes 1–4 with the
// single-rank run, sharded init equal to unsharded init, released parameters that error by name,
// and the gradient peak the reduction limit bounds. The model, batch, training loop and memory
// formulas are shared with the MPI runs (tests/sharding/sharding_test_util.h).
#include "sharding/sharded_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "comm/fault_backend.h"
#include "comm/local/local_backend.h"
#include "models/gpt.h"
#include "optim/loss_scaler.h"
#include "runtime/autograd.h"
#include "tests/sharding/sharding_test_util.h"

namespace zs::sharding {
namespace {

// Mean |a − b| over the common prefix of every unit.
double mean_difference(const RunResult& a, const RunResult& b) {
  double sum = 0;
  size_t count = 0;
  for (size_t u = 0; u < a.params.size(); ++u) {
    const size_t n = std::min(a.params[u].size(), b.params[u].size());
    for (size_t i = 0; i < n; ++i) sum += std::fabs(a.params[u][i] - b.params[u][i]);
    count += n;
  }
  return sum / static_cast<double>(count);
}

TEST(ShardedModel, StagesAreBitwiseIdenticalAtEqualWorldSize) {
  const RunResult reference = train(2, 0, 6);
  for (int stage : {1, 2, 3}) {
    const RunResult run = train(2, stage, 6);
    ASSERT_EQ(run.params.size(), reference.params.size());
    for (size_t u = 0; u < run.params.size(); ++u) {
      // Padding differs between stage 0's full buffer and the gathered shards only beyond the
      // parameters; both are padded to the same multiple, so the buffers compare whole.
      EXPECT_EQ(run.params[u], reference.params[u]) << "stage " << stage << " unit " << u;
    }
    EXPECT_EQ(run.losses, reference.losses) << "stage " << stage;
  }
  EXPECT_LT(reference.losses.back(), reference.losses.front());
}

TEST(ShardedModel, WorldSizesAgreeWithOneRank) {
  const RunResult single = train(1, 3, 4);
  for (int world : {2, 3, 4}) {
    const RunResult run = train(world, 3, 4);
    for (size_t s = 0; s < single.losses.size(); ++s) {
      EXPECT_NEAR(run.losses[s], single.losses[s], 2e-5 * std::abs(single.losses[s]))
          << "world " << world << " step " << s;
    }
    EXPECT_LT(max_difference(run, single), 2e-5) << "world " << world;
  }
}

TEST(ShardedModel, GradientAccumulationKeepsStagesBitwiseIdentical) {
  RunOptions run;
  run.micro_batches = 2;
  run.stage = 0;
  const RunResult reference = train(run);
  for (int stage : {1, 2, 3}) {
    run.stage = stage;
    const RunResult got = train(run);
    EXPECT_EQ(got.params, reference.params) << "stage " << stage;
    EXPECT_EQ(got.losses, reference.losses) << "stage " << stage;
  }
  // Two micro-batches of half the size give the one-batch step within fp32 rounding (after 6
  // Adam steps: under 2e-5 in the Release build, 2.4e-5 at -O1 under ASan, which contracts and
  // vectorizes differently).
  EXPECT_LT(max_difference(reference, train(2, 0, 6)), 5e-5);
}

TEST(ShardedModel, Bf16AndFp16TrainCloseToTheFp32MasterReference) {
  const RunResult reference = train(2, 3, 6);
  ShardingConfig bf16;
  bf16.param_dtype = DType::kBF16;
  bf16.reduce_dtype = DType::kBF16;
  RunOptions run;
  run.stage = 3;
  const RunResult got_bf16 = train(run, bf16);
  // Adam moves every element by up to lr = 0.01 a step whatever the gradient's size, so an
  // element whose gradient is near zero can move the other way under 16-bit rounding: compare
  // the mean drift (a small fraction of one step's lr) and the loss curve, not the worst element.
  EXPECT_LT(mean_difference(got_bf16, reference), 1e-3);
  for (size_t s = 0; s < reference.losses.size(); ++s) {
    EXPECT_NEAR(got_bf16.losses[s], reference.losses[s], 1e-2 * reference.losses[s]) << s;
  }
  ShardingConfig fp16;
  fp16.param_dtype = DType::kF16;
  fp16.reduce_dtype = DType::kF32;
  run.loss_scaling = true;
  for (int stage : {0, 3}) {
    run.stage = stage;
    const RunResult got_fp16 = train(run, fp16);
    EXPECT_EQ(got_fp16.skipped, 0) << "stage " << stage;
    EXPECT_LT(mean_difference(got_fp16, reference), 3e-4) << "stage " << stage;
    for (size_t s = 0; s < reference.losses.size(); ++s) {
      EXPECT_NEAR(got_fp16.losses[s], reference.losses[s], 2e-3 * reference.losses[s]) << s;
    }
  }
}

TEST(ShardedModel, Fp16OverflowOnOneRankSkipsTheStepEverywhereAndHalvesTheScale) {
  ShardingConfig fp16;
  fp16.param_dtype = DType::kF16;
  RunOptions run;
  run.loss_scaling = true;
  run.steps = 4;
  run.inject_inf_at_step = 1;
  run.hysteresis = 1;  // back off at the first overflow
  optim::LossScalerOptions defaults;
  const RunResult got = train(run, fp16);
  // Every rank took the same branch (a rank that stepped alone would desynchronize the
  // collectives of the next step, which then fail or mismatch).
  EXPECT_EQ(got.skipped, 1);
  EXPECT_EQ(got.scales[1], defaults.initial_scale);
  EXPECT_EQ(got.scales[2], defaults.initial_scale * defaults.backoff_factor);
  RunOptions clean = run;
  clean.inject_inf_at_step = -1;
  const RunResult no_overflow = train(clean, fp16);
  EXPECT_EQ(no_overflow.skipped, 0);
  EXPECT_NE(got.params, no_overflow.params);
}

TEST(ShardedModel, ShardedInitEqualsUnshardedInitAndReleasedParamsErrorByName) {
  CpuAllocator plain_allocator(nullptr);
  models::Gpt plain(uneven_config());
  models::materialize(plain, plain_allocator, 3);
  std::vector<std::vector<float>> expected;
  for (models::Parameter* p : plain.parameters()) expected.push_back(p->tensor().to_vector());

  comm::run_local_ranks(3, [&](comm::Communicator& comm) {
    CpuAllocator allocator(nullptr);
    models::Gpt model(uneven_config());
    ShardingConfig config;
    config.stage = 3;
    config.seed = 3;
    ShardedModel sharded(model, comm, allocator, config);
    EXPECT_EQ(sharded.units().size(), 3u);  // two blocks and the root
    models::Parameter& qkv = *model.parameters()[4];
    ASSERT_EQ(qkv.name(), "blocks.0.attn.qkv.weight");
    try {
      (void)qkv.tensor().data<float>();
      ADD_FAILURE() << "expected ReleasedTensor";
    } catch (const ReleasedTensor& e) {
      EXPECT_NE(std::string(e.what()).find("'blocks.0.attn.qkv.weight'"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("unit blocks.0"), std::string::npos) << e.what();
    }
    // Inside the unit's forward the parameters are gathered: compare them there.
    std::vector<std::vector<float>> seen;
    model.blocks().children()[0]->add_pre_hook([&](models::Module& block, const Tensor&) {
      for (models::Parameter* p : block.parameters()) seen.push_back(p->tensor().to_vector());
    });
    NoGradScope no_grad;
    Tensor ids = Tensor::zeros({1, 3}, DType::kI32, allocator, "ids");
    Tensor targets = Tensor::zeros({1, 3}, DType::kI32, allocator, "targets");
    model.loss(ids, targets);
    ASSERT_EQ(seen.size(), 12u);
    for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], expected[2 + i]) << i;
  });
}

// After a step, per-rank model-state bytes by category and the step's traffic follow the ZeRO
// formulas (tests/sharding/sharding_test_util.h states them).
TEST(ShardedModel, MemoryAndTrafficFollowTheFormulas) {
  for (int world : {1, 2, 4}) {
    for (int stage : {0, 1, 2, 3}) {
      comm::run_local_ranks(world, [&](comm::Communicator& comm) {
        testing::expect_memory_and_traffic_formulas(comm, stage);
      });
    }
  }
}

TEST(ShardedModel, PrefetchAndItsLimitChangeNoBits) {
  ShardingConfig off;
  off.prefetch = false;
  const RunResult reference = train(2, 3, 4, off);
  ShardingConfig on;
  const RunResult prefetched = train(2, 3, 4, on);
  EXPECT_EQ(prefetched.params, reference.params);
  EXPECT_EQ(prefetched.losses, reference.losses);
  ShardingConfig limited;
  limited.max_live_gathered_bytes = 1;  // no prefetch fits: every gather on demand
  limited.keep_gathered_below_bytes = 4096;
  EXPECT_EQ(train(2, 3, 4, limited).params, reference.params);
}

TEST(ShardedModel, ReductionLimitChangesNoBits) {
  const RunResult reference = train(2, 0, 4);
  for (int stage : {2, 3}) {
    for (int limit : {0, 1, 2, 3}) {
      ShardingConfig config;
      config.max_reductions_in_flight = limit;
      const RunResult run = train(2, stage, 4, config);
      EXPECT_EQ(run.params, reference.params) << "stage " << stage << " limit " << limit;
      EXPECT_EQ(run.losses, reference.losses) << "stage " << stage << " limit " << limit;
    }
  }
  // With accumulation (staged reduced shards) and a cast to another reduce dtype.
  RunOptions accumulate;
  accumulate.micro_batches = 2;
  accumulate.stage = 2;
  ShardingConfig unlimited;
  unlimited.max_reductions_in_flight = 0;
  unlimited.param_dtype = DType::kBF16;
  ShardingConfig one = unlimited;
  one.max_reductions_in_flight = 1;
  for (int stage : {2, 3}) {
    accumulate.stage = stage;
    EXPECT_EQ(train(accumulate, one).params, train(accumulate, unlimited).params)
        << "stage " << stage;
  }
}

// A communicator that sleeps before every gradient reduction falls behind the backward, so each
// unit's full gradient stays alive until the rate limit waits for its reduction: at stage 2 the
// peak of gradient bytes is exactly the fp32 shards + the root's full gradient (computed through
// the whole backward) + (limit + 1) blocks' full gradients — all of them without a limit. The
// sleep (150 ms) is many times the rest of the backward, under TSan on a busy machine too: at
// 20 ms before every call, a TSan run in CI finished one block's reduction before the backward
// ended.
TEST(ShardedModel, ReductionLimitBoundsTheGradientPeakUnderASlowCommunicator) {
  models::GptConfig gpt = uneven_config();
  gpt.n_layer = 4;
  for (int limit : {0, 1, 2, 3}) {
    comm::LocalRunOptions slow;
    slow.wrap_backend = [](std::unique_ptr<comm::Backend> backend, int) {
      comm::FaultSettings settings;
      settings.delay = std::chrono::milliseconds(150);
      settings.delay_tag_prefix = "gradients of ";
      return std::unique_ptr<comm::Backend>(
          std::make_unique<comm::FaultInjectingBackend>(std::move(backend), settings));
    };
    comm::run_local_ranks(
        2,
        [&](comm::Communicator& comm) {
          MemoryTracker tracker;
          CpuAllocator allocator(&tracker);
          models::Gpt model(gpt);
          ShardingConfig config;
          config.stage = 2;
          config.max_reductions_in_flight = limit;
          ShardedModel sharded(model, comm, allocator, config);
          uint64_t shards = 0, root = 0, block = 0;
          for (const auto& unit : sharded.units()) {
            shards += 4 * static_cast<uint64_t>(unit.shard_numel);
            (unit.name == "<root>" ? root : block) = 4 * static_cast<uint64_t>(unit.padded_numel);
          }
          Tensor ids = Tensor::zeros({2, kSeq}, DType::kI32, allocator, "ids");
          for (int step = 0; step < 2; ++step) {
            tracker.reset_peaks();
            backward(model.loss(ids, ids));
            sharded.finish_backward();
            sharded.after_step();
            const uint64_t blocks = limit == 0 ? 4 : std::min(limit + 1, 4);
            EXPECT_EQ(tracker.peak(MemoryCategory::kGradients), shards + root + blocks * block)
                << "limit " << limit << " step " << step << " rank " << comm.rank();
            EXPECT_EQ(tracker.current(MemoryCategory::kGradients), shards);
          }
        },
        slow);
  }
}

TEST(ShardedModel, LiveGatheredBytesStayWithinTheLimitPlusOneUnit) {
  comm::run_local_ranks(2, [&](comm::Communicator& comm) {
    CpuAllocator allocator(nullptr);
    models::GptConfig gpt = uneven_config();
    gpt.n_layer = 4;
    models::Gpt model(gpt);
    ShardingConfig config;
    // Room for the root and one block besides the unit in use: one prefetch at a time.
    size_t root_bytes = 0, block_bytes = 0;
    {
      ShardingConfig probe_config;
      probe_config.prefetch = false;
      models::Gpt probe(gpt);
      ShardedModel sizes(probe, comm, allocator, probe_config);
      for (const auto& unit : sizes.units()) {
        (unit.name == "<root>" ? root_bytes : block_bytes) = unit.padded_numel * 4;
      }
    }
    config.max_live_gathered_bytes = root_bytes + 2 * block_bytes;
    ShardedModel sharded(model, comm, allocator, config);
    Tensor ids = Tensor::zeros({2, kSeq}, DType::kI32, allocator, "ids");
    for (int step = 0; step < 3; ++step) {
      backward(model.loss(ids, ids));
      sharded.finish_backward();
    }
    EXPECT_LE(sharded.peak_live_gathered_bytes(), config.max_live_gathered_bytes + block_bytes);
    EXPECT_GE(sharded.peak_live_gathered_bytes(), root_bytes + 2 * block_bytes);  // it prefetched
    EXPECT_TRUE(sharded.prefetching());
  });
}

// Runs its two Linear children in an order that flips on every call.
class Flipping : public models::Module {
 public:
  Flipping()
      : Module("Flipping"),
        a_(emplace<models::Linear>("a", 8, 8)),
        b_(emplace<models::Linear>("b", 8, 8)) {}

 protected:
  Tensor forward(const Tensor& x) override {
    flip_ = !flip_;
    return flip_ ? b_(a_(x)) : a_(b_(x));
  }

 private:
  models::Linear& a_;
  models::Linear& b_;
  bool flip_ = false;
};

TEST(ShardedModel, OrderChangeFallsBackToOnDemandGathers) {
  // The same model unsharded gives the reference values.
  std::vector<std::vector<float>> expected;
  {
    CpuAllocator allocator(nullptr);
    Flipping model;
    models::materialize(model, allocator, 9);
    Tensor x = Tensor::empty({3, 8}, DType::kF32, allocator, "x");
    x.fill(0.5f);
    NoGradScope no_grad;
    for (int step = 0; step < 3; ++step) expected.push_back(model(x).to_vector());
  }
  comm::run_local_ranks(2, [&](comm::Communicator& comm) {
    CpuAllocator allocator(nullptr);
    Flipping model;
    ShardingConfig config;
    config.wrap_types = {"Linear"};
    config.seed = 9;
    ShardedModel sharded(model, comm, allocator, config);
    Tensor x = Tensor::empty({3, 8}, DType::kF32, allocator, "x");
    x.fill(0.5f);
    NoGradScope no_grad;
    for (int step = 0; step < 3; ++step) EXPECT_EQ(model(x).to_vector(), expected[step]);
    EXPECT_FALSE(sharded.prefetching());
  });
}

TEST(ShardedModel, RejectsBadConfigs) {
  comm::run_local_ranks(1, [&](comm::Communicator& comm) {
    CpuAllocator allocator(nullptr);
    models::Gpt model(uneven_config());
    ShardingConfig config;
    config.stage = 4;
    EXPECT_THROW(ShardedModel(model, comm, allocator, config), InvalidArgument);
    config.stage = 2;
    config.max_reductions_in_flight = -1;
    EXPECT_THROW(ShardedModel(model, comm, allocator, config), InvalidArgument);
  });
}

}  // namespace
}  // namespace zs::sharding
