// Rank files of sharded checkpoints and their layout metadata (checkpoint/shard_files.h).
#include "checkpoint/shard_files.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "runtime/error.h"

namespace zs::checkpoint {
namespace {

using nlohmann::json;

std::string shape_text(const json& shape) { return shape.dump(); }

}  // namespace

std::string rank_file_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank-%05d.bin", rank);
  return name;
}

int file_source_rank(const sharding::ShardedModel& model, int world_rank) {
  const size_t units = model.local_shards().size();
  for (int q = 0; q < world_rank; ++q) {
    bool same = true;
    for (size_t k = 0; k < units && same; ++k) {
      same = file_range(model, k, q) == file_range(model, k, world_rank);
    }
    if (same) return q;
  }
  return world_rank;
}

std::string rank_file_path(const std::string& dir, const json& meta, int rank) {
  const json& entry = meta.at("files").at(static_cast<size_t>(rank));
  const std::string name = entry.at("name").get<std::string>();
  int source = -1;
  char tail = 0;
  ZS_CHECK_AS(CorruptCheckpoint,
              std::sscanf(name.c_str(), "rank-%5d.bin%c", &source, &tail) == 1 && source >= 0 &&
                  source <= rank && name == rank_file_name(source),
              "checkpoint '", dir, "': the file of rank ", rank, " is named '", name,
              "', which is not the rank file of this rank or of a lower one; the metadata is "
              "corrupt — resume from another checkpoint");
  return (std::filesystem::path(dir) / name).string();
}

std::pair<int64_t, int64_t> file_range(const sharding::ShardedModel& model, size_t unit,
                                       int world_rank) {
  if (model.policy().masters_sharded) return model.master_range(unit, world_rank);
  const int64_t shard = model.units().at(unit).shard_numel;
  return {world_rank * shard, (world_rank + 1) * shard};
}

bool file_holds_masters(const sharding::ShardedModel& model, int world_rank) {
  for (size_t k = 0; k < model.local_shards().size(); ++k) {
    if (file_range(model, k, world_rank) != model.master_range(k, world_rank)) return false;
  }
  return true;
}

void for_each_rank_file_tensor(const sharding::ShardedModel& model, int world_rank,
                               const optim::Optimizer& optimizer, bool written,
                               const TensorVisitor& visit) {
  ZS_CHECK(optimizer.num_views() == model.local_shards().size(),
           "checkpoint: ", optimizer.num_views(), " optimizer views for ",
           model.local_shards().size(), " units");
  for (size_t k = 0; k < optimizer.num_views(); ++k) {
    const auto [begin, end] = file_range(model, k, world_rank);
    const int64_t offset = begin - model.master_range(k, world_rank).first;
    // A plain variable for the lambda: capturing a structured binding is C++20 (clang 14 refuses).
    const int64_t count = end - begin;
    // The file's part of a tensor: the tensor itself where the file holds all of it.
    const auto part = [&](const Tensor& t) {
      ZS_CHECK(t.dtype() == DType::kF32, "checkpoint: '", t.name(), "' is ", dtype_name(t.dtype()),
               ", expected fp32 masters and optimizer state");
      return offset == 0 && count == t.numel() ? t : t.slice(offset, {count});
    };
    optim::Optimizer::StateAccess master = optimizer.access_master(k);
    visit(part(master.tensors().front()));
    optim::Optimizer::StateAccess state = optimizer.access_state(k);
    for (const Tensor& t : state.tensors()) visit(part(t));
    if (written) {  // after the visits: a failed restore writes nothing back
      master.mark_written();
      state.mark_written();
    }
  }
  if (written) optimizer.flush_state();
}

uint64_t rank_file_bytes(const sharding::ShardedModel& model, int world_rank,
                         const optim::Optimizer& optimizer) {
  const uint64_t tensors = 1 + optimizer.state_names().size();
  uint64_t bytes = 0;
  for (size_t k = 0; k < optimizer.num_views(); ++k) {
    const auto [begin, end] = file_range(model, k, world_rank);
    bytes += tensors * static_cast<uint64_t>(end - begin) * sizeof(float);
  }
  return bytes;
}

namespace {

// The size and checksum checks of a rank file, for both ways of reading it.
void check_rank_file(const std::string& path, uint64_t size, uint64_t bytes, const Checksum& found,
                     const Checksum& checksum) {
  ZS_CHECK_AS(CorruptCheckpoint, size == bytes, "checkpoint rank file '", path, "' has ", size,
              " bytes, expected ", bytes, " (truncated or of another run); use another checkpoint");
  ZS_CHECK_AS(CorruptCheckpoint, found == checksum, "checkpoint rank file '", path,
              "' is corrupt: its checksum is ", found.text(), ", the metadata says ",
              checksum.text(), "; use another checkpoint");
}

}  // namespace

detail::MappedFile open_verified(const std::string& path, uint64_t bytes, const Checksum& checksum,
                                 const FileSystem& fs) {
  detail::MappedFile file = [&] {
    try {
      return fs.map(path, "checkpoint rank file");
    } catch (const IoError& e) {
      ZS_THROW(CorruptCheckpoint, "checkpoint rank file '", path,
               "' cannot be read (missing?): ", e.what());
    }
  }();
  const Checksum found = file.size() == bytes
                             ? FileChecksum::of(file.data(), file.size(), checksum.algorithm)
                             : Checksum{checksum.algorithm, 0};
  check_rank_file(path, file.size(), bytes, found, checksum);
  return file;
}

Checksum verify_file(const std::string& path, uint64_t bytes, const Checksum& checksum) {
  std::ifstream in(path, std::ios::binary);
  ZS_CHECK_AS(CorruptCheckpoint, in.good(), "checkpoint rank file '", path,
              "' cannot be read (missing?): ", std::strerror(errno));
  std::vector<char> buffer(1 << 20);
  uint64_t size = 0;
  FileChecksum running(checksum.algorithm);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const size_t got = static_cast<size_t>(in.gcount());
    running.update(buffer.data(), got);
    size += got;
  }
  ZS_CHECK_AS(CorruptCheckpoint, in.eof(), "checkpoint rank file '", path,
              "' cannot be read: ", std::strerror(errno));
  const Checksum found = running.digest();
  check_rank_file(path, size, bytes, size == bytes ? found : Checksum{checksum.algorithm, 0},
                  checksum);
  return found;
}

RankFileReader::RankFileReader(const std::string& path, uint64_t bytes, const Checksum& checksum,
                               const FileSystem& fs)
    : file_(open_verified(path, bytes, checksum, fs)) {}

void RankFileReader::apply(const TensorSource& tensors) const {
  size_t offset = 0;
  tensors([&](const Tensor& t) {
    const size_t bytes = static_cast<size_t>(t.numel()) * sizeof(float);
    ZS_CHECK(offset + bytes <= file_.size(), "checkpoint: the tensors hold more than the ",
             file_.size(), "-byte rank file");
    // The mapping is only byte-aligned to the page; copy_from_host takes any host pointer.
    t.copy_from_host(file_.data() + offset);
    offset += bytes;
  });
  ZS_CHECK(offset == file_.size(), "checkpoint: applied ", offset, " bytes of a ", file_.size(),
           "-byte rank file");
}

json layout_json(const sharding::ShardedModel& model, int world_size,
                 const optim::Optimizer& optimizer) {
  json units = json::array();
  const std::vector<sharding::ShardedModel::UnitInfo> infos = model.units();
  for (size_t k = 0; k < infos.size(); ++k) {
    const auto& info = infos[k];
    json parameters = json::array();
    for (const auto& p : info.parameters) {
      parameters.push_back(
          {{"name", p.name}, {"shape", p.shape}, {"offset", p.offset}, {"dtype", "fp32"}});
    }
    json ranges = json::array();
    for (int r = 0; r < world_size; ++r) {
      const auto range = file_range(model, k, r);
      ranges.push_back({range.first, range.second});
    }
    units.push_back({{"name", info.name},
                     {"numel", info.numel},
                     {"padded_numel", info.padded_numel},
                     {"shard_numel", info.shard_numel},
                     {"parameters", parameters},
                     {"rank_ranges", ranges}});
  }
  return {{"units", units}, {"optimizer_state", optimizer.state_names()}};
}

void check_optimizer_state(const json& layout, const optim::Optimizer& optimizer,
                           const std::string& source) {
  const std::vector<std::string> state_names = layout.at("optimizer_state");
  ZS_CHECK(state_names == optimizer.state_names(), "checkpoint '", source,
           "' holds optimizer state ", json(state_names).dump(), " but this run's optimizer has ",
           json(optimizer.state_names()).dump(), "; resume with the same --optimizer");
}

void check_layout(const json& layout, const sharding::ShardedModel& model,
                  const optim::Optimizer& optimizer, const std::string& source) {
  check_optimizer_state(layout, optimizer, source);
  const json& saved_units = layout.at("units");
  const std::vector<sharding::ShardedModel::UnitInfo> units = model.units();
  ZS_CHECK(saved_units.size() == units.size(), "checkpoint '", source, "' has ", saved_units.size(),
           " sharded units, this model has ", units.size(), " (another model or wrap policy)");
  for (size_t k = 0; k < units.size(); ++k) {
    const json& saved = saved_units[k];
    const std::string name = saved.at("name");
    ZS_CHECK(name == units[k].name, "checkpoint '", source, "': unit ", k, " is '", name,
             "', in this model it is '", units[k].name, "'");
    const json& params = saved.at("parameters");
    ZS_CHECK(params.size() == units[k].parameters.size(), "checkpoint '", source, "': unit '", name,
             "' has ", params.size(), " parameters, in this model ", units[k].parameters.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const auto& here = units[k].parameters[i];
      const std::string saved_name = params[i].at("name");
      const json saved_shape = params[i].at("shape");
      ZS_CHECK(saved_name == here.name && saved_shape == json(here.shape), "checkpoint '", source,
               "' holds tensor '", saved_name, "' of shape ", shape_text(saved_shape),
               " where this model has '", here.name, "' of shape ", shape_text(json(here.shape)),
               "; it is a checkpoint of another model");
      ZS_CHECK(params[i].at("offset").get<int64_t>() == here.offset, "checkpoint '", source,
               "': tensor '", here.name, "' sits at another offset of its unit");
    }
    ZS_CHECK(saved.at("padded_numel").get<int64_t>() == units[k].padded_numel, "checkpoint '",
             source, "': unit '", name, "' is padded to ", saved.at("padded_numel").dump(),
             " elements, here to ", units[k].padded_numel, " (another --alignment)");
  }
}

}  // namespace zs::checkpoint
