// Resharding a sharded checkpoint on load (checkpoint/reshard.h): the copy plan from the saved
// layout to this rank's masters, and the verified files it reads.
#include "checkpoint/reshard.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <utility>

#include "checkpoint/shard_files.h"
#include "runtime/error.h"

namespace zs::checkpoint {
namespace {

using nlohmann::json;

// Where a saved parameter sits: its unit in the saved layout and its element offset there.
struct SavedParameter {
  size_t unit;
  int64_t offset;
  json shape;
};

std::map<std::string, SavedParameter> saved_parameters(const json& layout) {
  std::map<std::string, SavedParameter> found;
  const json& units = layout.at("units");
  for (size_t u = 0; u < units.size(); ++u) {
    for (const json& p : units[u].at("parameters")) {
      found[p.at("name").get<std::string>()] = {u, p.at("offset").get<int64_t>(), p.at("shape")};
    }
  }
  return found;
}

// The saved ranks whose ranges of a unit cover its padded buffer once, in order: ranges that
// start where the covered part ends (stage 0: rank 0 alone; hybrid: the first shard group).
std::vector<int> covering_ranks(const json& unit, const std::string& source) {
  const json& ranges = unit.at("rank_ranges");
  const int64_t padded = unit.at("padded_numel").get<int64_t>();
  std::vector<int> ranks;
  int64_t covered = 0;
  for (size_t r = 0; r < ranges.size() && covered < padded; ++r) {
    const int64_t begin = ranges[r].at(0).get<int64_t>(), end = ranges[r].at(1).get<int64_t>();
    if (begin == covered && end > begin) {
      ranks.push_back(static_cast<int>(r));
      covered = end;
    }
  }
  ZS_CHECK_AS(CorruptCheckpoint, covered == padded, "checkpoint '", source,
              "': the rank files of unit '", unit.at("name").get<std::string>(), "' cover ",
              covered, " of its ", padded, " elements");
  return ranks;
}

}  // namespace

void check_tensors(const json& layout, const sharding::ShardedModel& model,
                   const optim::Optimizer& optimizer, const std::string& source) {
  check_optimizer_state(layout, optimizer, source);
  const std::map<std::string, SavedParameter> saved = saved_parameters(layout);
  size_t here = 0;
  for (const auto& unit : model.units()) {
    for (const auto& p : unit.parameters) {
      ++here;
      const auto it = saved.find(p.name);
      ZS_CHECK(it != saved.end(), "checkpoint '", source, "' has no tensor '", p.name,
               "' of shape ", json(p.shape).dump(), "; it is a checkpoint of another model");
      ZS_CHECK(it->second.shape == json(p.shape), "checkpoint '", source, "' holds tensor '",
               p.name, "' of shape ", it->second.shape.dump(), " where this model has '", p.name,
               "' of shape ", json(p.shape).dump(), "; it is a checkpoint of another model");
    }
  }
  ZS_CHECK(saved.size() == here, "checkpoint '", source, "' holds ", saved.size(),
           " tensors, this model has ", here, "; it is a checkpoint of another model");
}

ReshardReader::ReshardReader(const std::string& dir, const json& meta,
                             const sharding::ShardedModel& model, int world_rank,
                             const optim::Optimizer& optimizer) {
  const json& layout = meta.at("layout");
  const json& units = layout.at("units");
  const size_t tensors = 1 + optimizer.state_names().size();
  const size_t world = meta.at("files").size();
  // Byte offset of each saved unit in each rank file, and each file's size.
  std::vector<std::vector<uint64_t>> unit_bytes(world, std::vector<uint64_t>(units.size() + 1, 0));
  auto range = [&](size_t u, size_t r) {
    const json& rr = units[u].at("rank_ranges").at(r);
    return std::pair<int64_t, int64_t>(rr.at(0).get<int64_t>(), rr.at(1).get<int64_t>());
  };
  for (size_t r = 0; r < world; ++r) {
    for (size_t u = 0; u < units.size(); ++u) {
      const auto [begin, end] = range(u, r);
      unit_bytes[r][u + 1] =
          unit_bytes[r][u] + tensors * static_cast<uint64_t>(end - begin) * sizeof(float);
    }
  }
  std::vector<std::vector<int>> cover;
  for (const json& unit : units) cover.push_back(covering_ranks(unit, dir));
  const std::map<std::string, SavedParameter> saved = saved_parameters(layout);

  std::map<int, size_t> file_of_rank;
  const std::vector<sharding::ShardedModel::UnitInfo> infos = model.units();
  ZS_CHECK(infos.size() == optimizer.num_views(), "resharding: ", infos.size(), " units but ",
           optimizer.num_views(), " optimizer views");
  for (size_t k = 0; k < infos.size(); ++k) {
    const auto [begin, end] = model.master_range(k, world_rank);
    ZS_CHECK(optimizer.view(k).master.numel() == end - begin, "resharding: view ", k, " has ",
             optimizer.view(k).master.numel(), " elements, its range ", end - begin);
    for (const auto& p : infos[k].parameters) {
      const int64_t numel = shape_numel(p.shape);
      // The parameter's elements [lo, hi) that are this rank's master.
      const int64_t lo = std::max(begin, p.offset) - p.offset;
      const int64_t hi = std::min(end, p.offset + numel) - p.offset;
      if (lo >= hi) continue;
      const SavedParameter& from = saved.at(p.name);
      for (const int r : cover[from.unit]) {
        const auto [saved_begin, saved_end] = range(from.unit, static_cast<size_t>(r));
        const int64_t a = std::max({lo, saved_begin - from.offset, int64_t{0}});
        const int64_t b = std::min({hi, saved_end - from.offset, numel});
        if (a >= b) continue;
        const auto [it, added] = file_of_rank.emplace(r, ranks_.size());
        if (added) ranks_.push_back(r);
        const uint64_t saved_len = static_cast<uint64_t>(saved_end - saved_begin);
        for (size_t t = 0; t < tensors; ++t) {
          const uint64_t element =
              t * saved_len + static_cast<uint64_t>(from.offset + a - saved_begin);
          copies_.push_back(
              {it->second, unit_bytes[static_cast<size_t>(r)][from.unit] + element * sizeof(float),
               k, t, p.offset + a - begin, b - a});
        }
      }
    }
  }
  // Open and verify the files this rank reads, whole, before anything is changed.
  for (const int r : ranks_) {
    const std::string path = (std::filesystem::path(dir) / rank_file_name(r)).string();
    const json& entry = meta.at("files").at(static_cast<size_t>(r));
    const uint64_t checksum = parse_checksum(entry.at("checksum").get<std::string>());
    files_.push_back(open_verified(path, unit_bytes[static_cast<size_t>(r)].back(), checksum));
  }
}

void ReshardReader::apply(const optim::Optimizer& optimizer) const {
  std::vector<std::vector<float>> host;
  size_t next = 0;
  for (size_t k = 0; k < optimizer.num_views(); ++k) {
    std::vector<Tensor> targets = {optimizer.view(k).master};
    for (const Tensor& state : optimizer.state(k)) targets.push_back(state);
    host.assign(targets.size(), std::vector<float>(static_cast<size_t>(targets[0].numel()), 0.0f));
    // The plan lists each view's copies together, in view order.
    for (; next < copies_.size() && copies_[next].view == k; ++next) {
      const Copy& c = copies_[next];
      std::memcpy(host[c.tensor].data() + c.element, files_[c.file].data() + c.file_offset,
                  static_cast<size_t>(c.count) * sizeof(float));
    }
    for (size_t t = 0; t < targets.size(); ++t) targets[t].copy_from_host(host[t].data());
  }
}

}  // namespace zs::checkpoint
