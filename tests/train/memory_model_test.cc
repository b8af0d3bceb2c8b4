// The memory model against the engine: a real ShardedModel + optimizer on the tiny GPT at 1, 2
// and 4 local ranks, stages 0–3, fp32 and bf16 (and gradient accumulation, mixed dtypes, hybrid,
// the stage-3 schedule knobs, SGD). After two steps the MemoryTracker's current bytes per
// category equal the estimate's steady bytes exactly; the second step's per-category peaks equal
// the estimate's peaks where the engine's buffer lifetimes are decided on the compute thread, and
// lie within [peak_low, peak_high] where a reduction's completion on the communicator's thread
// decides them — under every limit on reductions in flight — and equal peak_high when a
// communicator that sleeps before each collective falls behind. Then the closed forms: the ZeRO
// formulas and what the engine adds to them, offload, the largest preset that fits, and the
// parsers.
#include "train/memory_model.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "comm/fault_backend.h"
#include "comm/local/local_backend.h"
#include "models/gpt_presets.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/error.h"
#include "sharding/sharded_model.h"

namespace zs::train {
namespace {

// Odd sizes: no unit divides evenly among ranks, so padding is exercised (the tiny preset's
// units happen to be multiples of 4 × 16 elements).
models::GptConfig uneven_gpt() {
  models::GptConfig config;
  config.vocab_size = 37;
  config.context = 9;
  config.width = 12;
  config.n_head = 3;
  config.n_layer = 3;
  return config;
}

struct Case {
  models::GptConfig gpt = uneven_gpt();
  int world = 1;
  int stage = 0;
  DType param_dtype = DType::kF32;
  DType reduce_dtype = DType::kF32;
  int micro_batches = 1;
  int hybrid_group = 0;
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  bool prefetch = true;
  size_t max_live_gathered_bytes = 0;
  size_t prefetch_bytes = 0;
  size_t keep_gathered_below_bytes = 0;
  int max_reductions_in_flight = 2;  // ShardingConfig's default
  sharding::GradSync grad_sync = sharding::GradSync::kPerMicroBatch;
  // > 0: every collective sleeps this long first, so the reductions fall behind the backward
  // and the measured gradient peak is expected to reach peak_high.
  int delay_ms = 0;
};

std::string describe(const Case& c) {
  return "vocab " + std::to_string(c.gpt.vocab_size) + " world " + std::to_string(c.world) +
         " stage " + std::to_string(c.stage) + " " + dtype_name(c.param_dtype) + "/" +
         dtype_name(c.reduce_dtype) + " micro-batches " + std::to_string(c.micro_batches) +
         " hybrid " + std::to_string(c.hybrid_group) + " " + optimizer_kind_name(c.optimizer) +
         " prefetch " + std::to_string(c.prefetch) + " limit " +
         std::to_string(c.max_live_gathered_bytes) + " prefetch bytes " +
         std::to_string(c.prefetch_bytes) + " keep " + std::to_string(c.keep_gathered_below_bytes) +
         " reductions in flight " + std::to_string(c.max_reductions_in_flight) + " delay " +
         std::to_string(c.delay_ms) + " ms grad sync " + sharding::grad_sync_name(c.grad_sync);
}

MemoryModelConfig model_config(const Case& c) {
  MemoryModelConfig config;
  config.world = c.world;
  config.stage = c.stage;
  config.hybrid_group = c.hybrid_group;
  config.param_dtype = c.param_dtype;
  config.reduce_dtype = c.reduce_dtype;
  config.optimizer = c.optimizer;
  config.gradient_accumulation = c.micro_batches > 1;
  config.prefetch = c.prefetch;
  config.max_live_gathered_bytes = c.max_live_gathered_bytes;
  config.prefetch_bytes = c.prefetch_bytes;
  config.keep_gathered_below_bytes = c.keep_gathered_below_bytes;
  config.max_reductions_in_flight = c.max_reductions_in_flight;
  config.grad_sync = c.grad_sync;
  return config;
}

const MemoryCategory kModelState[] = {
    MemoryCategory::kParameters, MemoryCategory::kGradients, MemoryCategory::kMasterWeights,
    MemoryCategory::kOptimizerState, MemoryCategory::kCommBuffers};

// Two steps of the tiny GPT on `c.world` local ranks; every rank checks its tracker against the
// estimate.
void expect_estimate_matches_engine(const Case& c) {
  const models::GptConfig& gpt = c.gpt;
  const MemoryEstimate estimate = estimate_memory(gpt_memory_units(gpt), model_config(c));
  comm::LocalRunOptions options;
  if (c.delay_ms > 0) {
    options.wrap_backend = [&](std::unique_ptr<comm::Backend> backend, int) {
      comm::FaultSettings settings;
      settings.delay = std::chrono::milliseconds(c.delay_ms);
      return std::unique_ptr<comm::Backend>(
          std::make_unique<comm::FaultInjectingBackend>(std::move(backend), settings));
    };
  }
  comm::run_local_ranks(
      c.world,
      [&](comm::Communicator& comm) {
        MemoryTracker tracker;
        CpuAllocator allocator(&tracker);
        models::Gpt model(gpt);
        sharding::ShardingConfig config;
        config.stage = c.stage;
        config.hybrid_group = c.hybrid_group;
        config.param_dtype = c.param_dtype;
        config.reduce_dtype = c.reduce_dtype;
        config.prefetch = c.prefetch;
        config.max_live_gathered_bytes = c.max_live_gathered_bytes;
        config.prefetch_bytes = c.prefetch_bytes;
        config.keep_gathered_below_bytes = c.keep_gathered_below_bytes;
        config.max_reductions_in_flight = c.max_reductions_in_flight;
        config.grad_sync = c.grad_sync;
        config.seed = 5;
        sharding::ShardedModel sharded(model, comm, allocator, config);
        std::unique_ptr<optim::Optimizer> optimizer;
        if (c.optimizer == OptimizerKind::kAdamW) {
          optimizer = std::make_unique<optim::AdamW>(sharded.local_shards(), optim::AdamWOptions{});
        } else {
          optim::SgdOptions sgd;
          sgd.momentum = c.optimizer == OptimizerKind::kSgdMomentum ? 0.9f : 0.0f;
          optimizer = std::make_unique<optim::Sgd>(sharded.local_shards(), sgd);
        }
        const int64_t batch = 2, seq = std::min<int64_t>(16, gpt.context);
        Tensor ids = Tensor::empty({batch, seq}, DType::kI32, allocator, "ids");
        Tensor targets = Tensor::empty({batch, seq}, DType::kI32, allocator, "targets");
        for (int64_t i = 0; i < batch * seq; ++i) {
          ids.data<int32_t>()[i] =
              static_cast<int32_t>((i * 7 + comm.rank() * 13) % gpt.vocab_size);
          targets.data<int32_t>()[i] = static_cast<int32_t>((i * 11 + 3) % gpt.vocab_size);
        }
        auto step = [&] {
          for (int micro = 0; micro < c.micro_batches; ++micro) {
            sharded.defer_sync(micro + 1 < c.micro_batches);
            backward(model.loss(ids, targets), 1.0f / static_cast<float>(c.micro_batches));
            sharded.finish_backward();
          }
          optimizer->step(1e-3f);
          sharded.after_step();
        };
        step();  // records the stage-3 order: the second step is a steady-state one
        tracker.reset_peaks();
        step();
        for (MemoryCategory category : kModelState) {
          const char* name = category_name(category);
          EXPECT_EQ(tracker.current(category), estimate.steady[category])
              << "current " << name << ", rank " << comm.rank() << ", " << describe(c);
          const size_t peak = tracker.peak(category);
          EXPECT_GE(peak, estimate.peak_low[category])
              << "peak " << name << ", rank " << comm.rank() << ", " << describe(c);
          EXPECT_LE(peak, estimate.peak_high[category])
              << "peak " << name << ", rank " << comm.rank() << ", " << describe(c);
          // Exact wherever the compute thread alone decides the lifetimes.
          if (estimate.peak_low[category] == estimate.peak_high[category]) {
            EXPECT_EQ(peak, estimate.peak[category])
                << "peak " << name << ", rank " << comm.rank() << ", " << describe(c);
          }
          if (c.delay_ms > 0) {
            EXPECT_EQ(peak, estimate.peak_high[category])
                << "peak " << name << " (slow communicator), rank " << comm.rank() << ", "
                << describe(c);
          }
        }
        if (c.stage == 3) {
          EXPECT_EQ(sharded.peak_live_gathered_bytes(), estimate.gathered_window_bytes)
              << describe(c);
        }
      },
      options);
}

TEST(MemoryModel, MatchesTheEngineForEveryStagePrecisionAndWorldSize) {
  for (int world : {1, 2, 4}) {
    for (int stage : {0, 1, 2, 3}) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        Case c;
        c.gpt = world == 2 ? models::gpt_preset("tiny") : uneven_gpt();
        c.world = world;
        c.stage = stage;
        c.param_dtype = dtype;
        c.reduce_dtype = dtype;
        expect_estimate_matches_engine(c);
      }
    }
  }
}

TEST(MemoryModel, MatchesTheEngineWithAccumulationMixedDtypesAndHybrid) {
  std::vector<Case> cases;
  for (int stage : {0, 1, 2, 3}) {
    Case accumulate;
    accumulate.world = 2;
    accumulate.stage = stage;
    accumulate.micro_batches = 2;
    cases.push_back(accumulate);
    Case mixed = accumulate;  // bf16 compute, fp32 reduction: a cast copy travels
    mixed.micro_batches = 1;
    mixed.param_dtype = DType::kBF16;
    cases.push_back(mixed);
    Case half = mixed;  // fp16 compute and reduction, accumulating
    half.param_dtype = half.reduce_dtype = DType::kF16;
    half.micro_batches = 2;
    cases.push_back(half);
  }
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    Case hybrid;
    hybrid.world = 4;
    hybrid.stage = 3;
    hybrid.hybrid_group = 2;
    hybrid.param_dtype = hybrid.reduce_dtype = dtype;
    cases.push_back(hybrid);
  }
  for (const Case& c : cases) expect_estimate_matches_engine(c);
}

// --grad-sync per-step at stages 0/1: the fp32 sum (stage 1) and what the one reduction reads,
// with 1 and 3 micro-batches (3: the later micro-batches' temporaries replace each other), in
// every dtype pairing, at 1 and 2 ranks.
TEST(MemoryModel, MatchesTheEngineWithPerStepGradSync) {
  struct Dtypes {
    DType param, reduce;
  };
  for (int world : {1, 2}) {
    for (int stage : {0, 1}) {
      for (int micro_batches : {1, 3}) {
        for (Dtypes d : {Dtypes{DType::kF32, DType::kF32}, Dtypes{DType::kBF16, DType::kBF16},
                         Dtypes{DType::kBF16, DType::kF32}, Dtypes{DType::kF32, DType::kBF16}}) {
          Case c;
          c.world = world;
          c.stage = stage;
          c.micro_batches = micro_batches;
          c.param_dtype = d.param;
          c.reduce_dtype = d.reduce;
          c.grad_sync = sharding::GradSync::kPerStep;
          expect_estimate_matches_engine(c);
        }
      }
    }
  }
}

TEST(MemoryModel, MatchesTheEngineUnderEveryReductionLimit) {
  for (int world : {2, 4}) {
    for (int stage : {2, 3}) {
      for (int limit : {0, 1, 2, 3}) {
        for (DType dtype : {DType::kF32, DType::kBF16}) {
          Case c;
          c.world = world;
          c.stage = stage;
          c.max_reductions_in_flight = limit;
          c.param_dtype = dtype;  // bf16 computes, fp32 travels: a cast copy per reduction
          expect_estimate_matches_engine(c);
        }
      }
    }
  }
}

// A communicator that sleeps 20 ms before each collective is always behind the backward (a
// block of this model computes in far less), so every reduction runs until the limit waits for
// it: the measured peak is peak_high, exactly. At stage 3 that holds with a limit of 1 only:
// there the backward's all-gathers wait in the same queue behind older reductions, which then
// complete before the rate limit needs them to.
TEST(MemoryModel, ReachesPeakHighWhenTheCommunicatorFallsBehind) {
  std::vector<Case> cases;
  for (int world : {2, 4}) {
    for (int limit : {0, 1, 2}) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        Case c;
        c.world = world;
        c.stage = 2;
        c.max_reductions_in_flight = limit;
        c.param_dtype = dtype;
        c.delay_ms = 20;
        cases.push_back(c);
      }
    }
    Case stage3;
    stage3.world = world;
    stage3.stage = 3;
    stage3.max_reductions_in_flight = 1;
    stage3.delay_ms = 20;
    cases.push_back(stage3);
  }
  for (const Case& c : cases) expect_estimate_matches_engine(c);
}

// The bounds in closed form: at stage 2 in fp32 the gradient peak is the fp32 shards + the
// root's full gradient + (limit + 1) blocks' full gradients (every block without a limit);
// peak_low keeps one block besides the root; with a limit `peak` is peak_high.
TEST(MemoryModel, ReductionLimitBoundsInClosedForm) {
  const std::vector<MemoryUnit> units = gpt_memory_units(uneven_gpt());  // root + 3 blocks
  ASSERT_EQ(units.size(), 4u);
  const uint64_t n = 2;
  const uint64_t root = 4 * static_cast<uint64_t>(sharding::padded_numel(units[0].numel, 2, 16));
  const uint64_t block = 4 * static_cast<uint64_t>(sharding::padded_numel(units[1].numel, 2, 16));
  const uint64_t shards = (root + 3 * block) / n;
  MemoryModelConfig config;
  config.world = static_cast<int>(n);
  config.stage = 2;
  constexpr auto kGrads = MemoryCategory::kGradients;
  for (int limit : {0, 1, 2, 3, 4}) {
    config.max_reductions_in_flight = limit;
    const MemoryEstimate e = estimate_memory(units, config);
    const uint64_t blocks =
        limit == 0 ? 3 : std::min<uint64_t>(static_cast<uint64_t>(limit) + 1, 3);
    EXPECT_EQ(e.peak_high[kGrads], shards + root + blocks * block) << "limit " << limit;
    EXPECT_EQ(e.peak_low[kGrads], shards + root + block) << "limit " << limit;
    if (limit > 0) {
      EXPECT_EQ(e.peak[kGrads], e.peak_high[kGrads]) << "limit " << limit;
    } else {
      EXPECT_EQ(e.peak[kGrads], shards + root + 2 * block);  // reductions_in_flight = 1
    }
  }
  // bf16 computing, fp32 travelling: each reduction holds an fp32 copy (comm_buffers) of its
  // block instead of the bf16 gradient; the limit bounds those copies (the root's included).
  config.param_dtype = DType::kBF16;
  config.max_reductions_in_flight = 2;
  const MemoryEstimate cast = estimate_memory(units, config);
  const uint64_t root_bf16 = root / 2, block_bf16 = block / 2;
  EXPECT_EQ(cast.peak_high[MemoryCategory::kCommBuffers], 2 * block);
  EXPECT_EQ(cast.peak_high[kGrads], shards + root_bf16 + block_bf16);
  // Stages 0 and 1 keep their full gradients: the limit changes nothing there.
  for (int stage : {0, 1}) {
    config.stage = stage;
    config.max_reductions_in_flight = 0;
    const MemoryEstimate unlimited = estimate_memory(units, config);
    config.max_reductions_in_flight = 1;
    EXPECT_EQ(estimate_memory(units, config).peak_high.bytes, unlimited.peak_high.bytes);
  }
  config.max_reductions_in_flight = -1;
  EXPECT_THROW(estimate_memory(units, config), InvalidArgument);
}

TEST(MemoryModel, MatchesTheEngineUnderStage3ScheduleKnobsAndOtherOptimizers) {
  const std::vector<MemoryUnit> units = gpt_memory_units(uneven_gpt());
  ASSERT_EQ(units.size(), 4u);
  const size_t root_bytes = 4 * static_cast<size_t>(sharding::padded_numel(units[0].numel, 2, 16));
  const size_t block_bytes = 4 * static_cast<size_t>(sharding::padded_numel(units[1].numel, 2, 16));
  std::vector<Case> cases;
  Case base;
  base.world = 2;
  base.stage = 3;
  Case off = base;
  off.prefetch = false;
  cases.push_back(off);
  Case limited = base;  // room for the root and one block: no prefetch fits
  limited.max_live_gathered_bytes = root_bytes + block_bytes;
  cases.push_back(limited);
  Case kept = base;  // the root (smaller than a block) stays gathered
  kept.keep_gathered_below_bytes = root_bytes + 1;
  ASSERT_LT(root_bytes, block_bytes);
  cases.push_back(kept);
  Case deep = base;  // two blocks gathered ahead of the one in use
  deep.prefetch_bytes = 2 * block_bytes;
  cases.push_back(deep);
  for (OptimizerKind optimizer : {OptimizerKind::kSgd, OptimizerKind::kSgdMomentum}) {
    for (int stage : {0, 3}) {
      Case sgd = base;
      sgd.stage = stage;
      sgd.optimizer = optimizer;
      cases.push_back(sgd);
    }
  }
  for (const Case& c : cases) expect_estimate_matches_engine(c);

  // The windows themselves: root + the block in use + the prefetched one; without prefetch (or
  // when the limit leaves no room) root + one block.
  auto window = [&](const Case& c) {
    return estimate_memory(units, model_config(c)).gathered_window_bytes;
  };
  EXPECT_EQ(window(base), root_bytes + 2 * block_bytes);
  EXPECT_EQ(window(off), root_bytes + block_bytes);
  EXPECT_EQ(window(limited), root_bytes + block_bytes);
  EXPECT_EQ(window(kept), root_bytes + 2 * block_bytes);
  EXPECT_EQ(window(deep), root_bytes + 3 * block_bytes);
}

// Mixed precision with Adam: the paper's formulas, and what the engine holds besides them, in
// closed form with Ψ the padded count (P full, S = P/N per rank).
TEST(MemoryModel, ZeroFormulasAndTheEnginesExtras) {
  const int64_t n = 8;
  const std::vector<MemoryUnit> units = gpt_memory_units(models::gpt_preset("gpt2"));
  MemoryModelConfig config;
  config.world = static_cast<int>(n);
  config.param_dtype = config.reduce_dtype = DType::kBF16;
  for (int stage : {0, 1, 2, 3}) {
    config.stage = stage;
    const MemoryEstimate estimate = estimate_memory(units, config);
    const uint64_t p = static_cast<uint64_t>(estimate.padded_numel);
    const uint64_t s = p / n;
    const double paper = zero_formula_bytes(estimate.padded_numel, stage, static_cast<int>(n),
                                            DType::kBF16, OptimizerKind::kAdamW);
    // stage 0: + 4P fp32 gradient accumulator; stage 1: + 4S fp32 gradient shard; stages 2/3:
    // + 2S (fp32 instead of bf16 gradient shard). (The bf16 compute shard of stages 1/2 is the
    // full buffer's own slot: no bytes of its own.)
    const uint64_t extra[] = {4 * p, 4 * s, 2 * s, 2 * s};
    EXPECT_EQ(static_cast<double>(estimate.steady.total()),
              paper + static_cast<double>(extra[stage]))
        << "stage " << stage;
  }
  EXPECT_EQ(zero_formula_text(0, DType::kBF16, OptimizerKind::kAdamW), "16Ψ");
  EXPECT_EQ(zero_formula_text(1, DType::kBF16, OptimizerKind::kAdamW), "4Ψ + 12Ψ/N");
  EXPECT_EQ(zero_formula_text(2, DType::kBF16, OptimizerKind::kAdamW), "2Ψ + 14Ψ/N");
  EXPECT_EQ(zero_formula_text(3, DType::kBF16, OptimizerKind::kAdamW), "16Ψ/N");
  EXPECT_EQ(zero_formula_text(3, DType::kF32, OptimizerKind::kAdamW), "16Ψ/N");
  EXPECT_EQ(zero_formula_text(1, DType::kF32, OptimizerKind::kSgd), "8Ψ");
  // fp32 with Adam: stages 0 and 3 hold exactly the paper's 16 bytes per (padded) element.
  config.param_dtype = config.reduce_dtype = DType::kF32;
  for (int stage : {0, 3}) {
    config.stage = stage;
    const MemoryEstimate estimate = estimate_memory(units, config);
    EXPECT_EQ(static_cast<double>(estimate.steady.total()),
              zero_formula_bytes(estimate.padded_numel, stage, static_cast<int>(n), DType::kF32,
                                 OptimizerKind::kAdamW));
  }
}

TEST(MemoryModel, Gpt2OnOneRankStage0Bf16) {
  MemoryModelConfig config;
  config.world = 1;
  config.stage = 0;
  config.param_dtype = config.reduce_dtype = DType::kBF16;
  const MemoryEstimate estimate =
      estimate_memory(gpt_memory_units(models::gpt_preset("gpt2")), config);
  const int64_t psi = 124439808;
  EXPECT_EQ(estimate.numel, psi);
  // Padding: at most one alignment (16 elements) per unit, 13 units.
  EXPECT_GE(estimate.padded_numel, psi);
  EXPECT_LE(estimate.padded_numel - psi, 13 * 16);
  // The paper: 16 bytes per parameter.
  EXPECT_EQ(zero_formula_bytes(psi, 0, 1, DType::kBF16, OptimizerKind::kAdamW), 16.0 * psi);
  // The engine: those 16 on the padded count (bf16 params and gradients, fp32 master, Adam's m
  // and v), plus 4 for the fp32 gradient accumulator it keeps beside the bf16 gradients.
  const uint64_t padded = static_cast<uint64_t>(estimate.padded_numel);
  EXPECT_EQ(estimate.steady[MemoryCategory::kParameters], 2 * padded);
  EXPECT_EQ(estimate.steady[MemoryCategory::kGradients], (2 + 4) * padded);
  EXPECT_EQ(estimate.steady[MemoryCategory::kMasterWeights], 4 * padded);
  EXPECT_EQ(estimate.steady[MemoryCategory::kOptimizerState], 8 * padded);
  EXPECT_EQ(estimate.steady.total(), 20 * padded);
  EXPECT_EQ(estimate.peak.total(), 20 * padded);  // bf16 reduces in place: no staging
  const double per_parameter = static_cast<double>(estimate.steady.total()) / psi;
  EXPECT_NEAR(per_parameter, 20.0, 20.0 * 16 * 13 / psi + 1e-12);
}

TEST(MemoryModel, OffloadMovesMastersAndOptimizerStateToTheHost) {
  const std::vector<MemoryUnit> units = uniform_memory_units(1000000, 4);
  MemoryModelConfig config;
  config.world = 4;
  config.stage = 2;
  config.param_dtype = config.reduce_dtype = DType::kBF16;
  const MemoryEstimate on_device = estimate_memory(units, config);
  config.offload = OffloadKind::kOptimizer;
  const MemoryEstimate offloaded = estimate_memory(units, config);
  EXPECT_EQ(offloaded.steady[MemoryCategory::kMasterWeights], 0u);
  EXPECT_EQ(offloaded.steady[MemoryCategory::kOptimizerState], 0u);
  EXPECT_EQ(offloaded.host[MemoryCategory::kMasterWeights],
            on_device.steady[MemoryCategory::kMasterWeights]);
  EXPECT_EQ(offloaded.host[MemoryCategory::kOptimizerState],
            on_device.steady[MemoryCategory::kOptimizerState]);
  // The host tier also holds the host copy of the fp32 gradient shard, and in bf16 one staging
  // buffer of the largest unit's shard (the four equal units: a quarter of a rank's elements).
  const uint64_t shard_elements = static_cast<uint64_t>(on_device.padded_numel) / 4;
  EXPECT_EQ(offloaded.host[MemoryCategory::kGradients], 4 * shard_elements);
  const uint64_t largest_shard =
      static_cast<uint64_t>(sharding::shard_numel(250000, 4, config.alignment));
  EXPECT_EQ(offloaded.host[MemoryCategory::kParameters], 2 * largest_shard);
  EXPECT_EQ(offloaded.steady.total() + offloaded.host.total(),
            on_device.steady.total() + 4 * shard_elements + 2 * largest_shard);
  // fp32 stage 2 computed from the master shard: the device keeps a copy of it...
  config.param_dtype = config.reduce_dtype = DType::kF32;
  const MemoryEstimate fp32 = estimate_memory(units, config);
  const uint64_t shard_bytes = 4 * static_cast<uint64_t>(fp32.padded_numel) / 4;
  config.offload = OffloadKind::kNone;
  const MemoryEstimate fp32_on_device = estimate_memory(units, config);
  // ... and the host tier holds the master and the gradient shard's copy besides the state.
  EXPECT_EQ(fp32.steady.total() + fp32.host.total(),
            fp32_on_device.steady.total() + 2 * shard_bytes);
}

TEST(MemoryModel, UniformUnitsAndValidation) {
  const std::vector<MemoryUnit> units = uniform_memory_units(1003, 4);
  ASSERT_EQ(units.size(), 5u);
  EXPECT_EQ(units[0].numel, 3);
  EXPECT_EQ(units[1].numel, 250);
  EXPECT_EQ(units[4].parent, 0);
  MemoryModelConfig config;
  config.world = 2;
  config.stage = 3;
  // The root (3 elements, padded to 32) + the unit in use + the prefetched one.
  EXPECT_EQ(estimate_memory(units, config).gathered_window_bytes, 4u * (32 + 256 + 256));
  config.stage = 4;
  EXPECT_THROW(estimate_memory(units, config), InvalidArgument);
  config.stage = 2;
  config.hybrid_group = 2;
  EXPECT_THROW(estimate_memory(units, config), InvalidArgument);  // hybrid needs stage 3
  config.stage = 3;
  config.world = 3;
  EXPECT_THROW(estimate_memory(units, config), InvalidArgument);  // 3 % 2 != 0
  config.world = 4;
  EXPECT_NO_THROW(estimate_memory(units, config));
  EXPECT_EQ(estimate_memory(units, config).shard_ranks, 2);
  EXPECT_THROW(estimate_memory({}, config), InvalidArgument);
}

TEST(MemoryModel, LargestFittingPreset) {
  MemoryModelConfig config;
  config.param_dtype = config.reduce_dtype = DType::kBF16;
  config.stage = 3;
  config.world = 8;
  const uint64_t budget = uint64_t{16} << 30;
  const std::optional<PresetFit> fit = largest_fitting_preset(config, budget);
  ASSERT_TRUE(fit.has_value());
  EXPECT_LE(fit->estimate.peak.total(), budget);
  // The next larger preset does not fit.
  const std::vector<std::string> names = models::gpt_preset_names();
  const auto it = std::find(names.begin(), names.end(), fit->preset);
  ASSERT_NE(it, names.end());
  if (it + 1 != names.end()) {
    const MemoryEstimate next =
        estimate_memory(gpt_memory_units(models::gpt_preset(*(it + 1))), config);
    EXPECT_GT(next.peak.total(), budget) << *(it + 1);
  }
  // More ranks never fit a smaller model; a tiny budget fits nothing.
  config.world = 64;
  EXPECT_GE(largest_fitting_preset(config, budget)->parameters, fit->parameters);
  EXPECT_FALSE(largest_fitting_preset(config, 1024).has_value());
  // Stage 0 on one rank: 20 bytes per parameter, so 16 GiB holds gpt2-large but not gpt2-xl.
  config.world = 1;
  config.stage = 0;
  EXPECT_EQ(largest_fitting_preset(config, budget)->preset, "774M");
}

TEST(MemoryModel, ParsersOfCountsOptimizersAndOffload) {
  EXPECT_EQ(parse_count("124M"), 124000000);
  EXPECT_EQ(parse_count("1.5B"), 1500000000);
  EXPECT_EQ(parse_count("350k"), 350000);
  EXPECT_EQ(parse_count("7e9"), 7000000000);
  EXPECT_EQ(parse_count("2T"), 2000000000000);
  EXPECT_EQ(parse_count("1000"), 1000);
  for (const char* bad : {"", "M", "1.5X", "-3", "0", "abc", "nan"}) {
    EXPECT_THROW(parse_count(bad), InvalidArgument) << bad;
  }
  EXPECT_EQ(parse_optimizer_kind("sgd-momentum"), OptimizerKind::kSgdMomentum);
  EXPECT_THROW(parse_optimizer_kind("lion"), InvalidArgument);
  EXPECT_EQ(parse_offload_kind("optimizer"), OffloadKind::kOptimizer);
  EXPECT_THROW(parse_offload_kind("nvme"), InvalidArgument);
}

}  // namespace
}  // namespace zs::train
