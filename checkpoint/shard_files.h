// What one rank writes into a sharded checkpoint, and the part of the metadata that describes
// it: the layout of every unit's flat buffer and which elements each rank file covers.
//
// A rank file (rank-00003.bin) is raw little-endian fp32, unit by unit in units() order: the
// rank's master elements of the unit (ShardedModel::master_range: stage 0 the whole padded
// buffer, else its slice), then each optimizer state tensor of the unit over the same elements,
// in the optimizer's state_names() order (AdamW: exp_avg, exp_avg_sq; SGD: momentum_buffer or
// nothing). Nothing that can be recomputed (gathered parameters, compute-dtype copies,
// gradients) is written. Its checksum (FNV-1a, 64 bits, over the whole file) goes into the
// metadata, so a torn or corrupted file is found before anything is loaded.
//
// The layout JSON ("units": name, numel, padded numel, shard numel, each parameter's name, shape
// and offset in the buffer, the element range of every rank file) is what a later loader at
// another world size or stage needs to map files back to tensors.
//
// Device tensors are copied through host memory (Tensor::copy_to_host/copy_from_host). Free
// functions and a reader object used by one rank's thread; errors name the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "optim/optimizer.h"
#include "runtime/file_io.h"
#include "sharding/sharded_model.h"

namespace zs::checkpoint {

constexpr uint64_t kFnv64Basis = 14695981039346656037ull;
// FNV-1a over `count` bytes, continuing from `hash`.
uint64_t fnv1a64(const void* bytes, size_t count, uint64_t hash = kFnv64Basis);
// "fnv1a64:0123456789abcdef": how checksums are written in the metadata.
std::string checksum_text(uint64_t checksum);

// The checksum of a "fnv1a64:..." text; CorruptCheckpoint for another form.
uint64_t parse_checksum(const std::string& text);
// Maps the rank file at `path` after checking that it has `bytes` bytes and checksum
// `checksum`; CorruptCheckpoint naming `path` (and both checksums) when it is missing, of
// another size or corrupt.
// `fs` is the file layer it goes through.
detail::MappedFile open_verified(const std::string& path, uint64_t bytes, uint64_t checksum,
                                 const FileSystem& fs = posix_file_system());
// The same checks as open_verified, reading the file through a small buffer instead of mapping
// it (for tools that must not hold a whole rank file in memory); returns the file's checksum.
uint64_t verify_file(const std::string& path, uint64_t bytes, uint64_t checksum);

// "rank-00003.bin".
std::string rank_file_name(int rank);
// The bytes of this rank's file: its masters and their optimizer state.
uint64_t rank_file_bytes(const optim::Optimizer& optimizer);

// Writes this rank's file at `path` (fsynced before it appears under its name) and returns its
// checksum. `optimizer` must be the one built over model.local_shards().
uint64_t write_rank_file(const std::string& path, const optim::Optimizer& optimizer,
                         const FileSystem& fs = posix_file_system());

// One rank's file, opened and verified (size and checksum) before anything is changed; apply()
// then writes it into the masters and the optimizer state.
class RankFileReader {
 public:
  // Throws CorruptCheckpoint naming `path` when it is missing, has another size, or its
  // checksum differs from `checksum` (both printed).
  RankFileReader(const std::string& path, const optim::Optimizer& optimizer, uint64_t checksum,
                 const FileSystem& fs = posix_file_system());
  // Copies the file into the optimizer's views' masters and state tensors (the step count and
  // the compute copies are the caller's: Optimizer::set_steps, ShardedModel::refresh_from_masters).
  void apply(const optim::Optimizer& optimizer) const;

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
