// What one rank writes into a sharded checkpoint, and the part of the metadata that describes
// it: the layout of every unit's flat buffer and which elements each rank file covers.
//
// A rank file (rank-00003.bin) is raw little-endian fp32, unit by unit in units() order: the
// elements of the unit that the file holds (file_range: where masters are sharded, the rank's
// master; at stage 0, where every rank holds the whole padded buffer, the slice the rank would
// own if they were sharded, so that the world's files hold every element once and are written in
// parallel), then each optimizer state tensor of the unit over the same elements, in the
// optimizer's state_names() order (AdamW: exp_avg, exp_avg_sq; SGD: momentum_buffer or nothing).
// Nothing that can be recomputed (gathered parameters, compute-dtype copies, gradients) is
// written. Its checksum (checkpoint/file_checksum.h: XXH3 64 over the whole file; FNV-1a 64 in
// older checkpoints) goes into the metadata, so a torn or corrupted file is found before
// anything is loaded.
//
// The layout JSON ("units": name, numel, padded numel, shard numel, each parameter's name, shape
// and offset in the buffer, the element range of every rank file) is what a later loader at
// another world size or stage needs to map files back to tensors; a loader whose masters are not
// all in its own file (stage 0 on several ranks) reads them from the files that hold them
// (checkpoint/reshard.h).
//
// Rank files are written by checkpoint/rank_file_writer.h. Device tensors are copied through host
// memory (Tensor::copy_to_host/copy_from_host). Free functions and a reader object used by one
// rank's thread; errors name the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/file_checksum.h"
#include "checkpoint/rank_file_writer.h"
#include "optim/optimizer.h"
#include "runtime/file_io.h"
#include "sharding/sharded_model.h"

namespace zs::checkpoint {

// Maps the rank file at `path` after checking that it has `bytes` bytes and checksum
// `checksum` (computed with the algorithm `checksum` names); CorruptCheckpoint naming `path`
// (and both checksums) when it is missing, of another size or corrupt.
// `fs` is the file layer it goes through.
detail::MappedFile open_verified(const std::string& path, uint64_t bytes, const Checksum& checksum,
                                 const FileSystem& fs = posix_file_system());
// The same checks as open_verified, reading the file through a small buffer instead of mapping
// it (for tools that must not hold a whole rank file in memory); returns the file's checksum.
Checksum verify_file(const std::string& path, uint64_t bytes, const Checksum& checksum);

// "rank-00003.bin".
std::string rank_file_name(int rank);
// The rank whose file holds rank `world_rank`'s part of the state: the lowest rank whose file
// ranges equal its own in every unit. Itself, except for the replicas of a hybrid run — the
// ranks at the same position of another shard group hold bitwise the same shards — which write
// no file of their own: their metadata entry names their source's file (format version 2).
int file_source_rank(const sharding::ShardedModel& model, int world_rank);
// The path of rank `rank`'s file in checkpoint `dir`: the file its entry in `meta` names (a hybrid
// replica's names its source's). CorruptCheckpoint for a name that is not a rank file's.
std::string rank_file_path(const std::string& dir, const nlohmann::json& meta, int rank);
// The elements [begin, end) of unit `unit`'s padded buffer that rank `world_rank`'s file holds:
// its master range (ShardedModel::master_range) where masters are sharded (stages 1–3, hybrid);
// where every rank holds the whole buffer (stage 0), the rank's slice of shard_numel elements.
std::pair<int64_t, int64_t> file_range(const sharding::ShardedModel& model, size_t unit,
                                       int world_rank);
// Whether rank `world_rank`'s file holds all of its masters (false at stage 0 on several ranks:
// a restore there reads the other ranks' files too).
bool file_holds_masters(const sharding::ShardedModel& model, int world_rank);
// Hands `visit` the tensors rank `world_rank`'s file holds, in file order: per unit, the
// file_range of its master, then of each optimizer state tensor (views of `optimizer`'s tensors,
// which must be this rank's, built over model.local_shards()). Paged optimizer state
// (optim/optimizer.h) is brought in one unit at a time, so a tensor is valid during its call
// only. `written`: the caller writes into them (a restore), so paged state is written back (and
// flushed before this returns).
void for_each_rank_file_tensor(const sharding::ShardedModel& model, int world_rank,
                               const optim::Optimizer& optimizer, bool written,
                               const TensorVisitor& visit);
// The bytes of rank `world_rank`'s file.
uint64_t rank_file_bytes(const sharding::ShardedModel& model, int world_rank,
                         const optim::Optimizer& optimizer);

// One rank's file, opened and verified (size and checksum) before anything is changed; apply()
// then writes it into the tensors it holds.
class RankFileReader {
 public:
  // Throws CorruptCheckpoint naming `path` when it is missing, has another size than `bytes`,
  // or its checksum differs from `checksum` (both printed).
  RankFileReader(const std::string& path, uint64_t bytes, const Checksum& checksum,
                 const FileSystem& fs = posix_file_system());
  // Copies the file into the tensors `tensors` hands out (for_each_rank_file_tensor, written
  // true, of the rank that reads it, whose file holds all its masters: file_holds_masters). The
  // step count and the compute copies are the caller's: Optimizer::set_steps,
  // ShardedModel::refresh_from_masters.
  void apply(const TensorSource& tensors) const;

 private:
  detail::MappedFile file_;
};

// The layout of `model` on a world of `world_size` ranks, with the optimizer's state names.
nlohmann::json layout_json(const sharding::ShardedModel& model, int world_size,
                           const optim::Optimizer& optimizer);
// Throws InvalidArgument unless `layout` holds the state tensors `optimizer` has (AdamW's m and
// v, SGD's momentum or none), in the same order; `source` names the checkpoint.
void check_optimizer_state(const nlohmann::json& layout, const optim::Optimizer& optimizer,
                           const std::string& source);
// Throws InvalidArgument unless `layout` (from layout_json of the saved run) describes the same
// units, parameters (a mismatch names the tensor and both shapes) and optimizer state as
// `model` and `optimizer` here; `source` names the checkpoint.
void check_layout(const nlohmann::json& layout, const sharding::ShardedModel& model,
                  const optim::Optimizer& optimizer, const std::string& source);

}  // namespace zs::checkpoint
