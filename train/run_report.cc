// RunReport (train/run_report.h).
#include "train/run_report.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace zs::train {

void RunReport::before_step(int64_t /*step*/, bool last) {
  if (!last) return;
  comm::Communicator& world = rank_.comm;
  sharding::ShardedModel& sharded = rank_.sharded;
  MemoryTracker& tracker = rank_.tracker;
  world.stats().reset();
  if (&sharded.shard_group() != &world) sharded.shard_group().stats().reset();
  if (sharded.replica_group()) sharded.replica_group()->stats().reset();
  tracker.reset_peaks();
  if (!rank_.config.profile_memory.empty()) {
    for (int cat = 0; cat < kNumMemoryCategories; ++cat) {
      profile_start_.bytes[cat] = tracker.current(static_cast<MemoryCategory>(cat));
    }
    tracker.enable_timeline(true);
    tracker.mark("step begins");
  }
}

void RunReport::after_step(const StepRecord& /*record*/, bool last) {
  if (!last) return;
  comm::Communicator& world = rank_.comm;
  sharding::ShardedModel& sharded = rank_.sharded;
  // Hybrid: the shard group's collectives are on their own communicator; add them.
  step_traffic_ = snapshot(world.stats());
  std::vector<comm::Communicator*> groups;
  if (&sharded.shard_group() != &world) groups.push_back(&sharded.shard_group());
  if (sharded.replica_group()) groups.push_back(sharded.replica_group());
  for (comm::Communicator* group_comm : groups) {
    const StepTraffic group = snapshot(group_comm->stats());
    for (int k = 0; k < comm::kNumCollectiveKinds; ++k) step_traffic_[k] += group[k];
  }
  have_step_traffic_ = true;
  if (!rank_.config.profile_memory.empty()) {
    rank_.tracker.mark("step ends");
    rank_.tracker.enable_timeline(false);
  }
}

void RunReport::on_end(int64_t /*steps*/) {
  const TrainConfig& c = rank_.config;
  MemoryTracker& tracker = rank_.tracker;
  sharding::ShardedModel& sharded = rank_.sharded;
  TrainResult& result = rank_.result;
  // Memory: every rank's peaks, min/max over ranks.
  std::vector<uint64_t> mine;
  for (int cat = 0; cat < kNumMemoryCategories; ++cat) {
    mine.push_back(tracker.peak(static_cast<MemoryCategory>(cat)));
  }
  mine.push_back(tracker.peak_total());
  // The rank's GPU index, or kOnCpu: the table names each rank's device.
  constexpr uint64_t kOnCpu = ~uint64_t{0};
  mine.push_back(rank_.device ? static_cast<uint64_t>(rank_.device->device().index) : kOnCpu);
  const auto all = gather_u64(rank_.comm, rank_.compute, mine);
  std::vector<RankMemory> ranks(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    for (int cat = 0; cat < kNumMemoryCategories; ++cat) ranks[r].peak.bytes[cat] = all[r][cat];
    ranks[r].peak_total = all[r][kNumMemoryCategories];
    const uint64_t gpu = all[r][kNumMemoryCategories + 1];
    if (gpu != kOnCpu) ranks[r].device = Device::cuda(static_cast<int>(gpu)).str();
  }
  const MemorySpread spread = memory_spread(ranks);
  for (const Spread& s : spread.peak) {
    result.peak_min.push_back(s.min);
    result.peak_max.push_back(s.max);
  }
  result.peak_total_max = spread.peak_total.max;
  result.memory_table = memory_table(spread, c.memory_budget);

  // Traffic of the last step next to the formula.
  TrafficFormula f;
  f.stage = c.stage;
  f.shard_group = sharded.shard_group().size();
  f.rank_in_group = sharded.shard_group().rank();
  f.micro_batches = c.grad_accum;
  f.reduce_once_per_step = rank_.sharding.grad_sync == sharding::GradSync::kPerStep;
  f.param_bytes = dtype_size(rank_.sharding.param_dtype);
  f.reduce_bytes = dtype_size(rank_.sharding.reduce_dtype);
  if (comm::Communicator* replicas = sharded.replica_group()) {
    f.replica_group = replicas->size();
    f.rank_in_replicas = replicas->rank();
  }
  for (const auto& unit : sharded.units()) {
    f.padded_numel.push_back(unit.padded_numel);
    f.kept_gathered.push_back(unit.stays_gathered);
  }
  const auto expected = formula_bytes_sent(f);
  for (uint64_t b : expected) result.formula_bytes_sent += b;
  for (const comm::CollectiveStats& k : step_traffic_) result.bytes_sent += k.bytes_sent;
  if (have_step_traffic_) result.traffic_table = traffic_table(step_traffic_, f);

  const int rank = rank_.comm.rank(), world = rank_.comm.size();
  if (!c.profile_memory.empty()) {
    const std::string json = rank_path(c.profile_memory, rank, world, "");
    const std::string svg = rank_path(c.profile_memory, rank, world, ".svg");
    tracker.write_timeline_json(json);
    std::ofstream out(svg + ".tmp", std::ios::trunc);
    out << memory_svg(tracker.timeline(), profile_start_,
                      "memory by category over one step, " + tracker.device_name() +
                          " (ZeRO stage " + std::to_string(c.stage) + ")");
    out.close();
    ZS_CHECK_AS(IoError, out.good() && std::rename((svg + ".tmp").c_str(), svg.c_str()) == 0,
                "cannot write the memory chart ", svg);
    if (rank_.lead) ZS_LOG_INFO("memory profile of the last step: {} and {} (per rank)", json, svg);
  }
  if (rank_.lead) {
    std::printf("%s%s", result.memory_table.c_str(), result.traffic_table.c_str());
    std::fflush(stdout);
  }
}

}  // namespace zs::train
