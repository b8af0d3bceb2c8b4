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
// start where the covered part ends (stage 0: every rank, or rank 0 alone where its file holds
// the whole replica; hybrid: the first shard group).
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

int64_t metadata_integer(const json& value, const std::string& source, const char* what) {
  ZS_CHECK_AS(CorruptCheckpoint, value.is_number_integer(), "checkpoint '", source, "': ", what,
              " is ", value.dump(), " in its meta.json, not an integer; the metadata is corrupt — ",
              "resume from another checkpoint");
  return value.get<int64_t>();
}

SavedLayout::SavedLayout(const json& meta, const std::string& source) : source_(source) {
  // meta.json is outside input: every number the spans and file sizes are computed from is
  // checked here (ranges inside their unit, parameters inside their buffer, sizes that fit 64
  // bits), and a key of the wrong type is a CorruptCheckpoint rather than a JSON exception.
  const auto corrupt = [&](const auto&... what) {
    ZS_THROW(CorruptCheckpoint, "checkpoint '", source, "': ", what...,
             " in its meta.json; the metadata is corrupt — resume from another checkpoint");
  };
  try {
    const json& layout = meta.at("layout");
    const json& units = layout.at("units");
    tensors_ = 1 + layout.at("optimizer_state").size();
    const size_t world = meta.at("files").size();
    unit_bytes_.assign(world, std::vector<uint64_t>(units.size() + 1, 0));
    for (size_t u = 0; u < units.size(); ++u) {
      const json& rr = units[u].at("rank_ranges");
      ZS_CHECK_AS(CorruptCheckpoint, rr.size() == world, "checkpoint '", source, "': unit ", u,
                  " has ", rr.size(), " rank ranges for ", world, " rank files");
      const int64_t padded = metadata_integer(units[u].at("padded_numel"), source, "padded_numel");
      if (padded < 0) corrupt("unit ", u, " has ", padded, " elements");
      ranges_.emplace_back();
      for (size_t r = 0; r < world; ++r) {
        const int64_t begin = metadata_integer(rr[r].at(0), source, "a rank range's begin");
        const int64_t end = metadata_integer(rr[r].at(1), source, "a rank range's end");
        if (begin < 0 || begin > end || end > padded) {
          corrupt("unit ", u, "'s range [", begin, ", ", end, ") of rank file ", r,
                  " is not inside its ", padded, " elements");
        }
        ranges_[u].emplace_back(begin, end);
      }
      cover_.push_back(covering_ranks(units[u], source));
      for (const json& p : units[u].at("parameters")) {
        const std::string name = p.at("name").get<std::string>();
        Shape shape;
        int64_t numel = 1;
        for (const json& dim : p.at("shape")) {
          shape.push_back(metadata_integer(dim, source, "a dimension of a parameter's shape"));
          if (shape.back() < 0 || __builtin_mul_overflow(numel, shape.back(), &numel)) {
            corrupt("parameter '", name, "' has the shape ", p.at("shape").dump());
          }
        }
        const int64_t offset = metadata_integer(p.at("offset"), source, "a parameter's offset");
        if (offset < 0 || numel > padded || offset > padded - numel) {
          corrupt("parameter '", name, "' (", numel, " elements at offset ", offset,
                  ") is not inside its unit's ", padded, " elements");
        }
        parameters_.push_back({name, shape});
        where_[name] = {u, offset, numel};
      }
    }
  } catch (const json::exception& e) {
    corrupt("the layout is not what zeroshard writes (", e.what(), ")");
  }
  // Byte offset of each unit in each rank file, and each file's size.
  for (size_t r = 0; r < unit_bytes_.size(); ++r) {
    for (size_t u = 0; u + 1 < unit_bytes_[r].size(); ++u) {
      const auto [begin, end] = ranges_[u][r];
      uint64_t bytes = 0;
      if (__builtin_mul_overflow(static_cast<uint64_t>(end - begin), tensors_ * sizeof(float),
                                 &bytes) ||
          __builtin_add_overflow(unit_bytes_[r][u], bytes, &unit_bytes_[r][u + 1])) {
        corrupt("rank file ", r, " would be larger than 2^64 bytes");
      }
    }
  }
}

std::vector<SavedLayout::Span> SavedLayout::spans(const std::string& name, int64_t lo, int64_t hi,
                                                  size_t tensor) const {
  const auto found = where_.find(name);
  ZS_CHECK(found != where_.end(), "checkpoint '", source_, "' has no tensor '", name, "'");
  const Where& from = found->second;
  std::vector<Span> out = unit_spans(from.unit, from.offset + std::max(lo, int64_t{0}),
                                     from.offset + std::min(hi, from.numel), tensor);
  for (Span& span : out) span.element -= from.offset;
  return out;
}

std::vector<SavedLayout::Span> SavedLayout::unit_spans(size_t unit, int64_t lo, int64_t hi,
                                                       size_t tensor) const {
  ZS_CHECK(unit < cover_.size(), "checkpoint '", source_, "' has ", cover_.size(), " units, not ",
           unit);
  ZS_CHECK(tensor < tensors_, "checkpoint '", source_, "' has ", tensors_ - 1,
           " optimizer state tensors, not ", tensor);
  std::vector<Span> out;
  for (const int r : cover_[unit]) {
    const auto [saved_begin, saved_end] = ranges_[unit][static_cast<size_t>(r)];
    const int64_t a = std::max(lo, saved_begin);
    const int64_t b = std::min(hi, saved_end);
    if (a >= b) continue;
    const uint64_t saved_len = static_cast<uint64_t>(saved_end - saved_begin);
    const uint64_t element = tensor * saved_len + static_cast<uint64_t>(a - saved_begin);
    out.push_back(
        {r, unit_bytes_[static_cast<size_t>(r)][unit] + element * sizeof(float), a, b - a});
  }
  return out;
}

uint64_t SavedLayout::file_bytes(int rank) const {
  return unit_bytes_.at(static_cast<size_t>(rank)).back();
}

ReshardReader::ReshardReader(const std::string& dir, const json& meta,
                             const sharding::ShardedModel& model, int world_rank,
                             const optim::Optimizer& optimizer, bool same_layout) {
  const SavedLayout saved(meta, dir);
  const size_t tensors = 1 + optimizer.state_names().size();
  std::map<int, size_t> file_of_rank;
  const std::vector<sharding::ShardedModel::UnitInfo> infos = model.units();
  ZS_CHECK(infos.size() == optimizer.num_views(), "resharding: ", infos.size(), " units but ",
           optimizer.num_views(), " optimizer views");
  for (size_t k = 0; k < infos.size(); ++k) {
    const std::pair<int64_t, int64_t> range = model.master_range(k, world_rank);
    const int64_t begin = range.first, end = range.second;
    ZS_CHECK(optimizer.view(k).master.numel() == end - begin, "resharding: view ", k, " has ",
             optimizer.view(k).master.numel(), " elements, its range ", end - begin);
    // Plans the copy of `span` to the unit's buffer elements [element, element + count) of
    // tensor t; each file is opened once, however many copies read it.
    const auto plan = [&](const SavedLayout::Span& span, size_t t, int64_t element) {
      const auto [it, added] = file_of_rank.emplace(span.rank, ranks_.size());
      if (added) ranks_.push_back(span.rank);
      copies_.push_back({it->second, span.file_offset, k, t, element - begin, span.count});
    };
    if (same_layout) {
      for (size_t t = 0; t < tensors; ++t) {
        for (const SavedLayout::Span& span : saved.unit_spans(k, begin, end, t)) {
          plan(span, t, span.element);
        }
      }
      continue;
    }
    for (const auto& p : infos[k].parameters) {
      const int64_t numel = shape_numel(p.shape);
      // The parameter's elements [lo, hi) that are this rank's master.
      const int64_t lo = std::max(begin, p.offset) - p.offset;
      const int64_t hi = std::min(end, p.offset + numel) - p.offset;
      if (lo >= hi) continue;
      for (size_t t = 0; t < tensors; ++t) {
        for (const SavedLayout::Span& span : saved.spans(p.name, lo, hi, t)) {
          plan(span, t, p.offset + span.element);
        }
      }
    }
  }
  // Open and verify the files this rank reads, whole, before anything is changed.
  for (const int r : ranks_) {
    const std::string path = rank_file_path(dir, meta, r);
    const json& entry = meta.at("files").at(static_cast<size_t>(r));
    const Checksum checksum = Checksum::parse(entry.at("checksum").get<std::string>());
    files_.push_back(open_verified(path, saved.file_bytes(r), checksum));
  }
}

void ReshardReader::apply(const optim::Optimizer& optimizer) const {
  std::vector<std::vector<float>> host;
  size_t next = 0;
  for (size_t k = 0; k < optimizer.num_views(); ++k) {
    optim::Optimizer::StateAccess master = optimizer.access_master(k);
    optim::Optimizer::StateAccess state = optimizer.access_state(k);
    std::vector<Tensor> targets = {master.tensors().front()};
    for (const Tensor& t : state.tensors()) targets.push_back(t);
    host.assign(targets.size(), std::vector<float>(static_cast<size_t>(targets[0].numel()), 0.0f));
    // The plan lists each view's copies together, in view order.
    for (; next < copies_.size() && copies_[next].view == k; ++next) {
      const Copy& c = copies_[next];
      std::memcpy(host[c.tensor].data() + c.element, files_[c.file].data() + c.file_offset,
                  static_cast<size_t>(c.count) * sizeof(float));
    }
    for (size_t t = 0; t < targets.size(); ++t) targets[t].copy_from_host(host[t].data());
    master.mark_written();
    state.mark_written();
  }
  optimizer.flush_state();
}

}  // namespace zs::checkpoint
