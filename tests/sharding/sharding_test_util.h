// What the sharding tests share between the local backend (tests/sharding/sharded_model_test.cc,
// ranks as threads) and MPI (tests/sharding/mpi_sharding_main.cc, one rank per process): a small
// GPT whose units do not divide evenly among ranks, a fixed global batch, a training loop that
// runs on whatever ranks a RankRunner hands it, and the per-rank memory and traffic formulas of
// ZeRO stages 0–3.
//
// train() takes its ranks from a RankRunner: run_local_ranks (every rank a thread of this
// process, the default) or a runner that calls its function once with this process's rank of an
// MPI world. Everything train() returns is identical on every rank — the parameters are
// all-gathered, the losses all-gathered and summed in rank order — so it returns the result of
// the lowest rank this process hosts, and a local run and an MPI run of the same world size
// must return the same bits.
//
// Header-only; each function is safe to call from several rank threads at once (each uses only
// its own Communicator and what it allocates), and every rank of a group must call the same
// functions in the same order (they issue collectives).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/local/local_backend.h"
#include "models/gpt.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "optim/shard_view.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/rng.h"
#include "sharding/sharded_model.h"
#include "train/shard_views.h"

namespace zs::sharding::testing {

inline models::GptConfig uneven_config() {
  models::GptConfig config;
  config.vocab_size = 37;  // odd sizes: units do not divide evenly among ranks
  config.context = 9;
  config.width = 12;
  config.n_head = 3;
  config.n_layer = 2;
  return config;
}

constexpr int64_t kGlobalBatch = 12;
constexpr int64_t kSeq = 7;

// Token (b, t) of the fixed global batch: every world size and step sees the same batch, so
// the loss must fall as the model fits it.
inline int32_t token(int64_t b, int64_t t, uint32_t salt) {
  return static_cast<int32_t>(
      random_bits(rng_key(11, "data", salt), static_cast<uint64_t>(b * 64 + t)) % 37);
}

struct RunResult {
  std::vector<std::vector<float>> params;  // every unit's full fp32 master (all-gathered)
  std::vector<float> losses;  // per step, mean over ranks and micro-batches (summed in rank order)
  std::vector<float> scales;  // per step, the loss scale used (fp16 runs)
  std::vector<float> grad_norms;  // per step not skipped, the global norm before clipping
  int64_t skipped = 0;
};

struct RunOptions {
  int world = 2;
  int stage = 3;
  int steps = 6;
  int micro_batches = 1;
  bool loss_scaling = false;
  int inject_inf_at_step = -1;          // rank 0 puts an inf into one gradient at this step
  int hysteresis = 2;                   // overflows in a row before the loss scale backs off
  uint64_t seed = 3;                    // parameter init seed
  int64_t global_batch = kGlobalBatch;  // divisible by world × micro_batches
  float clip_norm = 0;  // > 0: clip the global gradient norm (train::clip_gradients) to this
  // Optimizer offload: the masters and the optimizer's gradient shards in a host allocator of
  // the rank's own (ShardedModel's optimizer_host).
  bool optimizer_offload = false;
  // Called on every rank after the ShardedModel and the optimizer are built, before step 0.
  std::function<void(ShardedModel&, comm::Communicator&)> prepare;
  // Strategies in place of those the model chooses (sharding/collectives.h), on every rank.
  StrategyOverrides overrides;
};

using RankFunction = std::function<void(comm::Communicator&)>;
// Calls fn(comm) once for every rank of a `world`-rank group that this process hosts, and
// returns when all of them have finished.
using RankRunner = std::function<void(int world, const RankFunction& fn)>;

// Every rank a thread of this process (the local backend).
inline void run_on_local_ranks(int world, const RankFunction& fn) {
  comm::run_local_ranks(world, fn);
}

// Trains on the fixed global batch; each rank takes its contiguous part of every micro-batch.
inline RunResult train(const RunOptions& run, ShardingConfig config = {},
                       const RankRunner& runner = run_on_local_ranks) {
  config.stage = run.stage;
  config.seed = run.seed;
  // Slot r is written only by rank r's thread.
  std::vector<std::optional<RunResult>> by_rank(static_cast<size_t>(run.world));
  runner(run.world, [&](comm::Communicator& comm) {
    RunResult result;
    MemoryTracker tracker;
    CpuAllocator allocator(&tracker);
    MemoryTracker host_tracker;
    CpuAllocator host(&host_tracker);
    models::Gpt model(uneven_config());
    ShardedModel sharded(model, comm, allocator, config, run.optimizer_offload ? &host : nullptr,
                         nullptr, nullptr, run.overrides);
    optim::AdamWOptions adam;
    adam.lr = 1e-2f;
    adam.weight_decay = 0.1f;
    optim::AdamW optimizer(sharded.local_shards(), adam);
    optim::LossScalerOptions scaler_options;
    scaler_options.hysteresis = run.hysteresis;
    optim::DynamicLossScaler scaler{scaler_options};
    if (run.prepare) run.prepare(sharded, comm);
    const int64_t local_batch = run.global_batch / run.world / run.micro_batches;
    EXPECT_EQ(local_batch * run.world * run.micro_batches, run.global_batch)
        << "the global batch must divide into world × micro-batches";
    const int64_t losses_per_rank = int64_t{run.steps} * run.micro_batches;
    Tensor ids = Tensor::empty({local_batch, kSeq}, DType::kI32, allocator, "ids");
    Tensor targets = Tensor::empty({local_batch, kSeq}, DType::kI32, allocator, "targets");
    // This rank's loss of every (step, micro-batch), all-gathered after training.
    Tensor local_losses = Tensor::empty({losses_per_rank}, DType::kF32, allocator, "local_losses");
    for (int step = 0; step < run.steps; ++step) {
      const float scale = run.loss_scaling ? scaler.scale() : 1.0f;
      for (int micro = 0; micro < run.micro_batches; ++micro) {
        sharded.defer_sync(micro + 1 < run.micro_batches);  // reduced once under kPerStep
        for (int64_t b = 0; b < local_batch; ++b) {
          const int64_t global_b =
              (micro * run.world + comm.rank()) * local_batch + b;  // disjoint, covers the batch
          for (int64_t t = 0; t < kSeq; ++t) {
            ids.data<int32_t>()[b * kSeq + t] = token(global_b, t, 0);
            targets.data<int32_t>()[b * kSeq + t] = token(global_b, t, 1);
          }
        }
        Tensor loss = model.loss(ids, targets);
        local_losses.data<float>()[step * run.micro_batches + micro] = loss.item();
        // Mean over micro-batches: each backward is seeded with scale / micro_batches.
        backward(loss, scale / static_cast<float>(run.micro_batches));
        sharded.finish_backward();
      }
      std::vector<optim::ShardView> views = sharded.local_shards();
      if (step == run.inject_inf_at_step && comm.rank() == 0) {
        views[0].grad.data<float>()[views[0].segments[0].begin] = INFINITY;
      }
      bool skip = false;
      if (run.loss_scaling) {
        const bool found_inf = optim::unscale_and_check(views, scaler.inv_scale());
        skip = scaler.update(found_inf, comm);
      }
      if (!skip && run.clip_norm > 0) {
        // The loss scaler skipped no step here: the gradients are finite and unscaled.
        result.grad_norms.push_back(train::clip_gradients(sharded, views, run.clip_norm));
      }
      if (!skip) optimizer.step(adam.lr);
      sharded.after_step();
      // Every rank takes the same branch (the scaler agrees over the group).
      result.scales.push_back(scale);
      result.skipped += skip ? 1 : 0;
    }
    for (const ShardView& shard : sharded.local_shards()) {
      const int64_t n = shard.master.numel();
      const int64_t full = run.stage == 0 ? n : n * run.world;
      Tensor gathered = Tensor::empty({full}, DType::kF32, allocator, "gathered");
      if (run.stage == 0) {
        gathered.copy_from(shard.master.to_vector());
      } else {
        comm.all_gather(shard.master, gathered)->wait();
      }
      result.params.push_back(gathered.to_vector());
    }
    // Summed in a fixed order (micro-batch, then rank), so the mean is the same bits on every
    // rank, every run and every backend.
    Tensor all_losses =
        Tensor::empty({losses_per_rank * run.world}, DType::kF32, allocator, "all_losses");
    comm.all_gather(local_losses, all_losses)->wait();
    const float* loss_values = all_losses.data<float>();
    result.losses.assign(static_cast<size_t>(run.steps), 0.0f);
    for (int step = 0; step < run.steps; ++step) {
      for (int micro = 0; micro < run.micro_batches; ++micro) {
        for (int r = 0; r < run.world; ++r) {
          const float value = loss_values[r * losses_per_rank + step * run.micro_batches + micro];
          result.losses[step] += value / static_cast<float>(run.world * run.micro_batches);
        }
      }
    }
    by_rank[static_cast<size_t>(comm.rank())] = std::move(result);
  });
  for (std::optional<RunResult>& result : by_rank) {
    if (result) return std::move(*result);
  }
  ADD_FAILURE() << "the runner ran none of the " << run.world << " ranks";
  return {};
}

inline RunResult train(int world, int stage, int steps, ShardingConfig config = {},
                       const RankRunner& runner = run_on_local_ranks) {
  RunOptions run;
  run.world = world;
  run.stage = stage;
  run.steps = steps;
  return train(run, config, runner);
}

// Largest |a − b| over the common prefix of every unit's parameters (padding differs with the
// world size). Run: any result with `params`, one std::vector<float> a unit (RunResult, ...).
template <typename Run>
double max_difference(const Run& a, const Run& b) {
  double worst = 0;
  for (size_t u = 0; u < a.params.size(); ++u) {
    const size_t n = std::min(a.params[u].size(), b.params[u].size());
    for (size_t i = 0; i < n; ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(a.params[u][i] - b.params[u][i])));
    }
  }
  return worst;
}

// One step of the given stage on `comm`'s ranks; afterwards the rank's model-state bytes by
// category follow the ZeRO formulas for fp32 training (K = 8: Adam's m and v, whose bytes this
// check keeps outside the tracker — it runs no optimizer), with Ψ the padded parameter count:
// stage 0 params 4Ψ + grads 4Ψ; stage 1 params 4Ψ + grads 4Ψ + 4Ψ/N; stage 2 params 4Ψ +
// grads 4Ψ/N; stage 3 params 4Ψ/N + grads 4Ψ/N (no separate master: it is the parameters' slot,
// or at stage 3 the parameter shard); at N = 1 every stage runs as stage 0 and issues no
// collective. And the step moves
// the bytes of the architecture table: 2Ψ·(N−1)/N for stages 0–2, 3Ψ·(N−1)/N for stage 3 (in
// bytes of fp32; plus the prefetch order check of the first step), its all-gathers copying only
// what in-place gathers leave to copy (see below).
// Resets comm.stats(). Every rank of `comm` calls it. `config` gives the settings besides the
// stage that must not change these figures (activation checkpointing).
inline void expect_memory_and_traffic_formulas(comm::Communicator& comm, int stage,
                                               ShardingConfig config = {}) {
  const int world = comm.size();
  MemoryTracker tracker;
  CpuAllocator allocator(&tracker);
  models::Gpt model(uneven_config());
  config.stage = stage;
  ShardedModel sharded(model, comm, allocator, config);
  uint64_t padded = 0;
  size_t largest_unit = 0;
  for (const auto& unit : sharded.units()) {
    padded += static_cast<uint64_t>(unit.padded_numel);
    EXPECT_EQ(unit.padded_numel % (world * config.alignment), 0) << unit.name;
    EXPECT_GE(unit.padded_numel, unit.numel);
    EXPECT_LT(unit.padded_numel - unit.numel, world * config.alignment) << unit.name;
    largest_unit = std::max(largest_unit, static_cast<size_t>(unit.padded_numel) * 4);
  }
  const uint64_t psi = 4 * padded;  // bytes of one fp32 copy
  const uint64_t n = static_cast<uint64_t>(world);
  Tensor ids = Tensor::zeros({2, kSeq}, DType::kI32, allocator, "ids");
  Tensor targets = Tensor::zeros({2, kSeq}, DType::kI32, allocator, "targets");
  comm.stats().reset();
  tracker.reset_peaks();
  backward(model.loss(ids, targets));
  sharded.finish_backward();
  sharded.after_step();
  const uint64_t params = tracker.current(MemoryCategory::kParameters);
  const uint64_t grads = tracker.current(MemoryCategory::kGradients);
  const uint64_t master = tracker.current(MemoryCategory::kMasterWeights);
  // One rank shards nothing: every stage runs as stage 0 and costs what it costs.
  const int runs_as = sharded.policy().stage;
  EXPECT_EQ(runs_as, world == 1 ? 0 : stage);
  switch (runs_as) {
    case 0:
      EXPECT_EQ(params, psi);
      EXPECT_EQ(grads, psi);
      EXPECT_EQ(master, 0u);
      break;
    case 1:
      EXPECT_EQ(params, psi);
      EXPECT_EQ(master, 0u);  // the master is the rank's slot of the parameters
      EXPECT_EQ(grads, psi + psi / n);
      break;
    case 2:
      EXPECT_EQ(params, psi);
      EXPECT_EQ(master, 0u);
      EXPECT_EQ(grads, psi / n);
      break;
    case 3:
      EXPECT_EQ(params, psi / n);
      EXPECT_EQ(grads, psi / n);
      EXPECT_EQ(master, 0u);
      // Gathered parameters at most: the root (gathered through the forward) and one block.
      EXPECT_LE(tracker.peak(MemoryCategory::kParameters), psi / n + 2 * largest_unit);
      break;
  }
  const comm::CollectiveStats all = comm.stats().total();
  // Stage 3 with prefetch adds, once per run, the ranks' check of the recorded unit orders at
  // the first finish_backward: 4 int64 a rank all-gathered, 32·(N−1) bytes sent.
  const uint64_t order_check = runs_as == 3 && config.prefetch ? 32 * (n - 1) : 0;
  const uint64_t expected = (stage == 3 ? 3 : 2) * psi * (n - 1) / n + order_check;
  // Per-unit collectives round down (n−1)/n per call: allow one byte per call.
  EXPECT_NEAR(static_cast<double>(all.bytes_sent), static_cast<double>(expected),
              static_cast<double>(all.calls))
      << "world " << world << " stage " << stage;
  EXPECT_EQ(all.bytes_received, all.bytes_sent);
  // In-place gathers: where the full parameters persist (stages 1/2) the rank's shard is its
  // slot, so an all-gather copies nothing of its own; stage 3 gathers from a separate shard,
  // which the backend copies into the slot (1/N of the unit: received / (N−1)). On top, the
  // local backend's transport is itself a copy of what it receives; mpi's is not.
  const comm::CollectiveStats gathers = comm.stats().get(comm::CollectiveKind::kAllGather);
  if (world > 1) {
    const bool local = std::string(comm.backend_name()) == "local";
    const uint64_t own_slices = runs_as == 3 ? gathers.bytes_received / (n - 1) : 0;
    EXPECT_EQ(gathers.bytes_copied, (local ? gathers.bytes_received : 0) + own_slices)
        << comm.backend_name() << " world " << world << " stage " << stage;
    EXPECT_EQ(gathers.bytes_received > 0, runs_as > 0) << "stage " << stage;
  }
  // Nor does it communicate: no gathers, and no reduction over a single rank.
  if (world == 1) {
    EXPECT_EQ(all.calls, 0u) << "stage " << stage;
  }
}

}  // namespace zs::sharding::testing

namespace zs::sharding {

// The names the sharding tests use unqualified. A test file's own declarations of these names
// (in its anonymous namespace) hide them.
using testing::kSeq;
using testing::max_difference;
using testing::RunOptions;
using testing::RunResult;
using testing::train;
using testing::uneven_config;

}  // namespace zs::sharding
