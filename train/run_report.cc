// RunReport (train/run_report.h).
#include "train/run_report.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "offload/nvme_pager.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace zs::train {
namespace {

// Peaks restart, and with profiling the tracker records the step from its current bytes.
void start_profile(MemoryTracker& tracker, bool profile, CategoryBytes& start) {
  tracker.reset_peaks();
  if (!profile) return;
  for (int cat = 0; cat < kNumMemoryCategories; ++cat) {
    start.bytes[cat] = tracker.current(static_cast<MemoryCategory>(cat));
  }
  tracker.enable_timeline(true);
  tracker.mark("step begins");
}

void end_profile(MemoryTracker& tracker, bool profile) {
  if (!profile) return;
  tracker.mark("step ends");
  tracker.enable_timeline(false);
}

// Every rank's peaks of `tracker`, spread over ranks (one all-gather). `with_devices`: the
// ranks' GPU indices travel along, so that the device table names each rank's GPU.
MemorySpread gather_peaks(const RankContext& rank, const MemoryTracker& tracker,
                          bool with_devices) {
  std::vector<uint64_t> mine;
  for (int cat = 0; cat < kNumMemoryCategories; ++cat) {
    mine.push_back(tracker.peak(static_cast<MemoryCategory>(cat)));
  }
  mine.push_back(tracker.peak_total());
  // The rank's GPU index, or kOnCpu.
  constexpr uint64_t kOnCpu = ~uint64_t{0};
  mine.push_back(with_devices && rank.device ? static_cast<uint64_t>(rank.device->device().index)
                                             : kOnCpu);
  const auto all = gather_u64(rank.comm, rank.compute, mine);
  std::vector<RankMemory> ranks(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    for (int cat = 0; cat < kNumMemoryCategories; ++cat) ranks[r].peak.bytes[cat] = all[r][cat];
    ranks[r].peak_total = all[r][kNumMemoryCategories];
    const uint64_t gpu = all[r][kNumMemoryCategories + 1];
    if (gpu != kOnCpu) ranks[r].device = Device::cuda(static_cast<int>(gpu)).str();
  }
  return memory_spread(ranks);
}

// The JSON timeline and the SVG chart of `tracker`'s profiled step, at `json` and `svg`.
void write_profile(const MemoryTracker& tracker, const CategoryBytes& start,
                   const std::string& json, const std::string& svg, int stage) {
  tracker.write_timeline_json(json);
  std::ofstream out(svg + ".tmp", std::ios::trunc);
  out << memory_svg(tracker.timeline(), start,
                    "memory by category over one step, " + tracker.device_name() + " (ZeRO stage " +
                        std::to_string(stage) + ")");
  out.close();
  ZS_CHECK_AS(IoError, out.good() && std::rename((svg + ".tmp").c_str(), svg.c_str()) == 0,
              "cannot write the memory chart ", svg);
}

}  // namespace

void RunReport::before_step(int64_t /*step*/, bool last) {
  if (!last) return;
  comm::Communicator& world = rank_.comm;
  sharding::ShardedModel& sharded = rank_.sharded;
  world.stats().reset();
  if (&sharded.shard_group() != &world) sharded.shard_group().stats().reset();
  if (sharded.replica_group()) sharded.replica_group()->stats().reset();
  const bool profile = !rank_.config.profile_memory.empty();
  start_profile(rank_.tracker, profile, profile_start_);
  if (rank_.host_tier) start_profile(*rank_.host_tier, profile, host_profile_start_);
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
  const bool profile = !rank_.config.profile_memory.empty();
  end_profile(rank_.tracker, profile);
  if (rank_.host_tier) end_profile(*rank_.host_tier, profile);
}

void RunReport::on_end(int64_t /*steps*/) {
  const TrainConfig& c = rank_.config;
  MemoryTracker& tracker = rank_.tracker;
  sharding::ShardedModel& sharded = rank_.sharded;
  TrainResult& result = rank_.result;
  // Memory: every rank's peaks, min/max over ranks; the host tier's as its own table.
  const MemorySpread spread = gather_peaks(rank_, tracker, /*with_devices=*/true);
  for (const Spread& s : spread.peak) {
    result.peak_min.push_back(s.min);
    result.peak_max.push_back(s.max);
  }
  result.peak_total_max = spread.peak_total.max;
  result.memory_table = memory_table(spread, c.memory_budget);
  if (rank_.host_tier) {
    const MemorySpread host = gather_peaks(rank_, *rank_.host_tier, /*with_devices=*/false);
    for (const Spread& s : host.peak) {
      result.host_peak_min.push_back(s.min);
      result.host_peak_max.push_back(s.max);
    }
    result.host_peak_total_max = host.peak_total.max;
    result.memory_table += host_memory_table(host, c.host_memory_budget);
  }
  const auto pagers = rank_.nvme_pagers();
  if (!pagers.empty()) {
    // The NVMe tier: the bytes in each rank's swap files (the optimizer state's, the masters' and
    // the parameter shards'); this rank's traffic.
    const RankContext::NvmeTraffic traffic = rank_.nvme_traffic();
    result.nvme_bytes_read = traffic.read;
    result.nvme_bytes_written = traffic.written;
    result.nvme_wait_seconds = traffic.wait_seconds;
    uint64_t reserved = 0;
    std::string what;
    for (const auto& [pager, label] : pagers) {
      reserved += pager->store().reserved();
      what += std::string(what.empty() ? "" : ", ") + label;
    }
    uint64_t low = UINT64_MAX;
    uint64_t high = 0;
    for (const std::vector<uint64_t>& r : gather_u64(rank_.comm, rank_.compute, {reserved})) {
      low = std::min(low, r.at(0));
      high = std::max(high, r.at(0));
    }
    result.nvme_bytes_max = high;
    result.memory_table += "NVMe tier per rank (" + what + ", --nvme-path): " + format_bytes(low) +
                           (low == high ? "" : " to " + format_bytes(high)) + "\n";
  }

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
    write_profile(tracker, profile_start_, json, svg, c.stage);
    std::string host_files;
    if (rank_.host_tier) {
      // FILE.host.json and FILE.host.svg (per rank as the device's).
      const std::string host_json = rank_path(c.profile_memory, rank, world, ".host.json");
      const std::string host_svg = rank_path(c.profile_memory, rank, world, ".host.svg");
      write_profile(*rank_.host_tier, host_profile_start_, host_json, host_svg, c.stage);
      host_files = ", host tier: " + host_json + " and " + host_svg;
    }
    if (rank_.lead) {
      ZS_LOG_INFO("memory profile of the last step: {} and {} (per rank){}", json, svg, host_files);
    }
  }
  if (rank_.lead) {
    std::printf("%s%s", result.memory_table.c_str(), result.traffic_table.c_str());
    std::fflush(stdout);
  }
}

}  // namespace zs::train
