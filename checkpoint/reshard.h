// Resharding on load: fills this rank's masters and optimizer state from a sharded checkpoint
// saved at another world size, stage or hybrid group (checkpoint/shard_files.h describes the
// files and the layout JSON this reads).
//
// Parameters are matched by NAME, not by position: the saved layout gives each parameter's
// offset in its unit's flat buffer and each rank file's element range of every unit, and this
// rank's new layout gives where the same parameter sits in its unit and which elements are its
// master (ShardedModel::master_range). Padding, alignment and unit boundaries may differ. For
// every element range a set of saved files covers the saved buffer once (stage 0: every rank's
// slice, or rank 0's whole replica in checkpoints written before stage 0 saved slices; hybrid:
// the first shard group's files); a rank opens and verifies (size and whole-file checksum) only
// the files that hold some of its elements, and copies only the byte ranges it needs, for the
// masters and each optimizer state tensor. Padding is zero. No rank ever holds more of the model
// than its own shards.
//
// The same reader serves a restore with the saved unit plan whose masters are spread over
// several files (stage 0 on several ranks: each rank needs the whole buffer): it then copies
// whole buffer ranges, padding included, so that the resumed run is bit for bit the one that
// saved.
//
// A ReshardReader is built and used by one rank's thread; it owns the mappings of the files it
// opened. Errors name the checkpoint, the file or the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "optim/optimizer.h"
#include "runtime/file_io.h"
#include "sharding/sharded_model.h"

namespace zs::checkpoint {

// `value` of a checkpoint's meta.json as an integer; CorruptCheckpoint naming `what` and `source`
// when it is of another type (a float is refused, not converted: one out of range would be
// undefined behaviour).
int64_t metadata_integer(const nlohmann::json& value, const std::string& source, const char* what);

// Throws InvalidArgument unless every parameter of `model` is in `layout` (from layout_json of
// the saved run) under its name with the same shape (a mismatch names the tensor and both
// shapes), each saved parameter is in `model`, and the optimizer state names agree. Offsets,
// padding and unit boundaries may differ. `source` names the checkpoint.
void check_tensors(const nlohmann::json& layout, const sharding::ShardedModel& model,
                   const optim::Optimizer& optimizer, const std::string& source);

// The saved layout of a sharded checkpoint as byte ranges of its rank files: where any
// elements of a saved parameter lie, for its masters and for each optimizer state tensor. For
// every unit the covering files (stage 0: every rank's slice; hybrid: the first shard group's)
// hold each element once. ReshardReader plans its copies with it; zs-ckpt export reads whole
// parameters through it. Immutable after construction.
class SavedLayout {
 public:
  // `meta`: the checkpoint's metadata (meta.json); `source` names the checkpoint in errors.
  SavedLayout(const nlohmann::json& meta, const std::string& source);

  // `count` fp32 values at byte `file_offset` of rank file `rank` are elements
  // [element, element + count) of the parameter.
  struct Span {
    int rank;
    uint64_t file_offset;
    int64_t element;
    int64_t count;
  };
  // Elements [lo, hi) of saved parameter `name` in tensor `tensor` (0: the master, 1 + i:
  // optimizer state i), in element order. InvalidArgument for a name the checkpoint lacks.
  std::vector<Span> spans(const std::string& name, int64_t lo, int64_t hi, size_t tensor) const;
  // Elements [lo, hi) of saved unit `unit`'s padded buffer in tensor `tensor`, in element order
  // (Span::element: the buffer element).
  std::vector<Span> unit_spans(size_t unit, int64_t lo, int64_t hi, size_t tensor) const;
  // The size rank file `rank` must have.
  uint64_t file_bytes(int rank) const;
  int world_size() const { return static_cast<int>(unit_bytes_.size()); }
  // Every saved parameter, in the saved order (units, then their parameters).
  struct Parameter {
    std::string name;
    Shape shape;
  };
  const std::vector<Parameter>& parameters() const { return parameters_; }

 private:
  struct Where {
    size_t unit;
    int64_t offset;  // in the unit's flat buffer
    int64_t numel;
  };
  std::string source_;
  size_t tensors_;                                                // 1 + optimizer state tensors
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ranges_;  // [unit][rank]
  std::vector<std::vector<int>> cover_;                           // [unit]: covering ranks
  std::vector<std::vector<uint64_t>> unit_bytes_;  // [rank][unit]: byte offset; [units]: size
  std::vector<Parameter> parameters_;
  std::map<std::string, Where> where_;
};

class ReshardReader {
 public:
  // Plans the copies for rank `world_rank` of `model` from checkpoint `dir` with metadata
  // `meta`, then opens and verifies the rank files they read (CorruptCheckpoint naming a file
  // that is missing, of another size or with another checksum). Call check_tensors first, or
  // with `same_layout` (the checkpoint has this run's unit plan) check_layout: the copies are
  // then whole buffer ranges of each unit, padding included, not parameters by name.
  ReshardReader(const std::string& dir, const nlohmann::json& meta,
                const sharding::ShardedModel& model, int world_rank,
                const optim::Optimizer& optimizer, bool same_layout);
  // Writes the planned elements into the optimizer's views' masters and state tensors (the step
  // count and compute copies are the caller's, as for RankFileReader::apply).
  void apply(const optim::Optimizer& optimizer) const;

 private:
  // `count` fp32 values at byte `file_offset` of files_[file] go to elements [element, +count)
  // of tensor `tensor` (0: the master, 1 + i: state i) of view `view`.
  struct Copy {
    size_t file;
    uint64_t file_offset;
    size_t view;
    size_t tensor;
    int64_t element;
    int64_t count;
  };
  std::vector<int> ranks_;  // saved rank of files_[i]
  std::vector<detail::MappedFile> files_;
  std::vector<Copy> copies_;
};

}  // namespace zs::checkpoint
