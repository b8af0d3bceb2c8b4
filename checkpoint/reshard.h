// Resharding on load: fills this rank's masters and optimizer state from a sharded checkpoint
// saved at another world size, stage or hybrid group (checkpoint/shard_files.h describes the
// files and the layout JSON this reads).
//
// Parameters are matched by NAME, not by position: the saved layout gives each parameter's
// offset in its unit's flat buffer and each rank file's element range of every unit, and this
// rank's new layout gives where the same parameter sits in its unit and which elements are its
// master (ShardedModel::master_range). Padding, alignment and unit boundaries may differ. For
// every element range a set of saved files covers the saved buffer once (stage 0: rank 0's file,
// which holds the whole replica; hybrid: the first shard group's files); a rank opens and
// verifies (size and whole-file checksum) only the files that hold some of its elements, and
// copies only the byte ranges it needs, for the masters and each optimizer state tensor. Padding
// is zero. No rank ever holds more of the model than its own shards.
//
// A ReshardReader is built and used by one rank's thread; it owns the mappings of the files it
// opened. Errors name the checkpoint, the file or the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "optim/optimizer.h"
#include "runtime/file_io.h"
#include "sharding/sharded_model.h"

namespace zs::checkpoint {

// Throws InvalidArgument unless every parameter of `model` is in `layout` (from layout_json of
// the saved run) under its name with the same shape (a mismatch names the tensor and both
// shapes), each saved parameter is in `model`, and the optimizer state names agree. Offsets,
// padding and unit boundaries may differ. `source` names the checkpoint.
void check_tensors(const nlohmann::json& layout, const sharding::ShardedModel& model,
                   const optim::Optimizer& optimizer, const std::string& source);

class ReshardReader {
 public:
  // Plans the copies for rank `world_rank` of `model` from checkpoint `dir` with metadata
  // `meta`, then opens and verifies the rank files they read (CorruptCheckpoint naming a file
  // that is missing, of another size or with another checksum). Call check_tensors first.
  ReshardReader(const std::string& dir, const nlohmann::json& meta,
                const sharding::ShardedModel& model, int world_rank,
                const optim::Optimizer& optimizer);
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
