// zs-ckpt's view of a sharded checkpoint directory (checkpoint/checkpoint_dir.h): finding the
// step directory, describing it (`zs-ckpt inspect DIR`), and reading its GPT-2 weights one
// parameter at a time (`zs-ckpt export DIR out.safetensors`, and `zs-train --init-from DIR`,
// which starts from a checkpoint's weights only).
//
// CheckpointWeights verifies every rank file (size and checksum, streamed through a small
// buffer) on construction, then fill() reads only the byte ranges of one parameter's masters from
// the rank files that hold them (SavedLayout in checkpoint/reshard.h maps names and elements to
// files and bytes), so exporting holds about one tensor in memory, whatever the model's size.
// Optimizer state is never read.
//
// Errors: CorruptCheckpoint names a missing, truncated or corrupt file (with both checksums) or
// an unreadable meta.json; InvalidArgument a directory that is not a checkpoint or a checkpoint
// of something other than a GPT. A CheckpointWeights is used from one thread at a time (fill()
// moves its file positions).
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/gpt2_weights.h"
#include "checkpoint/reshard.h"
#include "models/gpt.h"

namespace zs::checkpoint {

// The step directory `path` names: `path` itself when it holds meta.json, else, for a checkpoint
// directory, the first of resume_candidates (newest first, as --resume auto tries them) whose
// metadata reads, warning about `latest` and the ones skipped. InvalidArgument when it holds no
// step directory; CorruptCheckpoint when none has readable metadata.
std::string resolve_step_dir(const std::string& path);
// meta.json's text for `meta`, sealed: with "meta_checksum", the checksum of the text without it
// (issue 28, finding 3: an edited completed_steps skipped data silently).
std::string seal_checkpoint_meta(nlohmann::json meta);
// CorruptCheckpoint (naming `path`) unless `meta`, of format version 3 or later, carries a
// meta_checksum that matches it; versions 1 and 2 carry none and pass.
void check_checkpoint_meta_seal(const nlohmann::json& meta, const std::string& path);
// The parsed meta.json of step directory `dir`; CorruptCheckpoint when missing or invalid.
nlohmann::json read_checkpoint_meta(const std::string& dir);

// The GPT shape of the checkpoint `path` names (resolve_step_dir), from its metadata alone;
// InvalidArgument for a checkpoint of another model.
models::GptConfig checkpoint_gpt_config(const std::string& path);

// Prints step, world size, stage, model, optimizer, loss scale, every rank file with its size
// and checksum (each verified: "ok", "MISMATCH" or "MISSING") and every parameter. After
// printing, throws CorruptCheckpoint naming the first file that did not verify.
void inspect_checkpoint(const std::string& path, std::ostream& out);

class CheckpointWeights {
 public:
  // `path`: a step directory, or a checkpoint directory with `latest`.
  explicit CheckpointWeights(const std::string& path);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& meta() const { return meta_; }
  const models::GptConfig& config() const { return config_; }
  const SavedLayout& layout() const { return *layout_; }
  int64_t completed_steps() const;

  // dst[0, numel(shape)) = the fp32 master values of parameter `name`; InvalidArgument if the
  // checkpoint has no such parameter or another shape (both named).
  void fill(const std::string& name, const Shape& shape, float* dst);

 private:
  std::string dir_;
  nlohmann::json meta_;
  models::GptConfig config_;
  std::unique_ptr<SavedLayout> layout_;
  std::vector<std::ifstream> files_;  // by saved rank
};

// What export_checkpoint measured: the bytes of the largest tensor buffer it held, the
// process's resident set when it started and its peak (getrusage: what the program, its
// libraries and the export held at most) and the model's fp32 bytes.
struct ExportReport {
  uint64_t largest_tensor_bytes = 0;
  uint64_t rss_before_bytes = 0;
  uint64_t peak_rss_bytes = 0;
  uint64_t model_bytes = 0;
};

// Writes the checkpoint's GPT-2 weights to `output` as `options` says, streamed one parameter at
// a time in the saved order (the order --save-weights visits them).
ExportReport export_checkpoint(const std::string& path, const std::string& output,
                               const Gpt2ExportOptions& options);

}  // namespace zs::checkpoint
