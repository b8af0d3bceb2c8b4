// What a run reports at the end: the per-rank memory table (min/max over ranks), the traffic of
// one step next to the stage's formula, and the SVG chart of memory by category over one step.
// Pure functions of the figures handed in (the engine gathers them across ranks).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/stats.h"
#include "runtime/memory_tracker.h"
#include "train/memory_model.h"

namespace zs::train {

// One rank's memory figures (CategoryBytes: train/memory_model.h).
struct RankMemory {
  CategoryBytes peak{};
  size_t peak_total = 0;  // peak of the sum
  std::string device;     // where the figures are: "cuda:N" for a rank on a GPU, "" on the CPU
};

// One figure over ranks: the smallest, the largest, and the (first) rank holding the largest.
struct Spread {
  uint64_t min = 0;
  uint64_t max = 0;
  int max_rank = 0;
};
// Every rank's memory figures, spread over ranks.
struct MemorySpread {
  int ranks = 0;
  std::array<Spread, kNumMemoryCategories> peak{};  // index: MemoryCategory
  Spread peak_total;
  std::vector<std::string> devices;  // by rank, where any rank is on a GPU; else empty
};
MemorySpread memory_spread(const std::vector<RankMemory>& ranks);

// Table: one row per category that any rank used, columns min and max over ranks (and the
// rank holding the max), then the peak of the total. The header names the ranks' GPUs (rank
// order) when the figures are device memory; for CPU ranks it names no device.
std::string memory_table(const MemorySpread& spread, size_t budget);
// The same table for the host tier of optimizer offload (offload/host_pool.h), titled as such;
// `budget` is --host-memory-budget (0: none).
std::string host_memory_table(const MemorySpread& spread, size_t budget);

// Bytes one rank sends per collective kind in one step, as the sharding stage's algorithm
// prescribes for units of `padded_numel` elements each (see ARCHITECTURE.md's table).
struct TrafficFormula {
  int stage = 3;
  int shard_group = 1;  // ranks the parameters are sharded over (the world, or a hybrid group)
  int rank_in_group = 0;
  int64_t micro_batches = 1;
  // --grad-sync per-step (stages 0/1): the gradients of a step are reduced once, not once per
  // micro-batch, so the reductions do not scale with micro_batches.
  bool reduce_once_per_step = false;
  size_t param_bytes = 4;             // element size of gathered parameters
  size_t reduce_bytes = 4;            // element size of reduced gradients
  std::vector<int64_t> padded_numel;  // per unit
  std::vector<bool> kept_gathered;    // per unit: never released (ShardedModel::UnitInfo)
  int replica_group = 1;  // hybrid: the replicas each gradient shard is all-reduced over
  int rank_in_replicas = 0;
};
std::array<uint64_t, comm::kNumCollectiveKinds> formula_bytes_sent(const TrafficFormula& formula);

// Measured stats of one step next to the formula, per collective kind, with the difference
// explained for the kinds that also carry the run's small all-reduces (loss, grad norm, scaler).
using StepTraffic = std::array<comm::CollectiveStats, comm::kNumCollectiveKinds>;
StepTraffic snapshot(const comm::CommStats& stats);
std::string traffic_table(const StepTraffic& measured, const TrafficFormula& formula);

// An SVG (width × height px) of memory over one step: one stacked area per category, from the
// events of a MemoryTracker timeline and the category bytes when it began.
std::string memory_svg(const std::vector<MemoryEvent>& events, const CategoryBytes& start,
                       const std::string& title);

// FILE → FILE for one rank, FILE.rank<r> (before the extension) otherwise; extension replaced
// when `extension` is given ("report.json", ".svg", 1, 4 → "report.rank1.svg").
std::string rank_path(const std::string& path, int rank, int world, const std::string& extension);
// `tag` inserted before the extension of the file name, which is replaced when `extension` is
// given ("trace.rank1.json", ".attempt1", "" → "trace.rank1.attempt1.json").
std::string tagged_path(const std::string& path, const std::string& tag,
                        const std::string& extension);

}  // namespace zs::train
