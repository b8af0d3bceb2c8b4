// Regression tests for what fuzzing the sharded-checkpoint reader found (fuzz/
// sharded_checkpoint_fuzz.cc, docs/fuzzing.md): meta.json is outside input, so a key that is
// missing or of another type, a float where an integer belongs, or a range or offset outside its
// unit is a CorruptCheckpoint naming the checkpoint — from `zs-ckpt inspect` and from the weight
// reader behind `zs-ckpt export` and `zs-train --init-from` — never an escaping JSON exception
// (which ended zs-ckpt with std::terminate), a float-to-integer conversion out of range or a read
// outside a rank file.
#include <gtest/gtest.h>

#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_weights.h"
#include "checkpoint/file_checksum.h"
#include "checkpoint/reshard.h"
#include "checkpoint/shard_files.h"
#include "checkpoint_test_util.h"

namespace zs::checkpoint {
namespace {

using nlohmann::json;
using testing::error_message;
using testing::ScratchDir;
using testing::write_bytes;

// One rank, no optimizer state, one unit of 8 elements holding parameter "w" of shape [2, 4]:
// the smallest metadata that inspect and CheckpointWeights accept.
json valid_meta(const std::vector<uint8_t>& rank_file) {
  json meta = json::parse(R"({
    "format": "zeroshard sharded checkpoint", "format_version": 1, "completed_steps": 1,
    "world_size": 1, "stage": 3, "hybrid_group": 0, "alignment": 8,
    "model": {"n_layer": 1, "width": 4, "n_head": 1, "vocab_size": 2, "context": 4},
    "optimizer": {"kind": "sgd", "steps": 1, "hyperparameters": {}},
    "loss_scaler": null,
    "layout": {"optimizer_state": [], "units": [{"name": "<root>", "numel": 8,
      "padded_numel": 8, "shard_numel": 8, "rank_ranges": [[0, 8]],
      "parameters": [{"name": "w", "dtype": "fp32", "offset": 0, "shape": [2, 4]}]}]},
    "files": [{"name": "rank-00000.bin", "rank": 0}]
  })");
  meta["files"][0]["bytes"] = rank_file.size();
  meta["files"][0]["checksum"] =
      Checksum{ChecksumAlgorithm::kFnv1a64, fnv1a64(rank_file.data(), rank_file.size())}.text();
  return meta;
}

class CheckpointMetadata : public ::testing::Test {
 protected:
  CheckpointMetadata() {
    for (int i = 0; i < 8; ++i) {
      const float value = static_cast<float>(i);
      const auto* bytes = reinterpret_cast<const uint8_t*>(&value);
      rank_file_.insert(rank_file_.end(), bytes, bytes + sizeof(float));
    }
    write_bytes(dir_.path("rank-00000.bin"), rank_file_);
  }
  // Writes `meta` as the checkpoint's meta.json.
  void write_meta(const json& meta) {
    zs::testing::write_text(dir_.path("meta.json"), meta.dump());
  }
  // The CorruptCheckpoint messages of inspect and of the weight reader on `meta`; each names
  // the checkpoint.
  void expect_corrupt(const json& meta, const std::string& part) {
    write_meta(meta);
    const std::string dir = dir_.path("");
    const std::vector<std::function<void()>> readers = {[&] {
                                                          std::ostringstream out;
                                                          inspect_checkpoint(dir, out);
                                                        },
                                                        [&] { CheckpointWeights weights(dir); }};
    for (const auto& read : readers) {
      const std::string message = error_message<CorruptCheckpoint>(read);
      EXPECT_NE(message.find(part), std::string::npos) << message;
    }
  }

  ScratchDir dir_;
  std::vector<uint8_t> rank_file_;
};

TEST_F(CheckpointMetadata, TheValidMetadataReads) {
  write_meta(valid_meta(rank_file_));
  std::ostringstream out;
  inspect_checkpoint(dir_.path(""), out);
  EXPECT_NE(out.str().find("rank-00000.bin"), std::string::npos) << out.str();
  CheckpointWeights weights(dir_.path(""));
  std::vector<float> w(8);
  weights.fill("w", {2, 4}, w.data());
  EXPECT_EQ(w, (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
}

// The fuzzer's first find: a layout without "units" threw json::out_of_range out of zs-ckpt.
TEST_F(CheckpointMetadata, AMissingKeyIsCorrupt) {
  json meta = valid_meta(rank_file_);
  meta["layout"].erase("units");
  expect_corrupt(meta, "not what zeroshard writes");
  meta = valid_meta(rank_file_);
  meta["model"].erase("width");
  expect_corrupt(meta, "not what zeroshard writes");
}

TEST_F(CheckpointMetadata, AValueOfAnotherTypeIsCorrupt) {
  json meta = valid_meta(rank_file_);
  meta["format_version"] = "1";
  expect_corrupt(meta, "format_version is \"1\"");
  meta = valid_meta(rank_file_);
  meta["layout"]["units"][0]["rank_ranges"][0][1] = 1e300;  // was a float → int64 conversion
  expect_corrupt(meta, "not an integer");
  meta = valid_meta(rank_file_);
  meta["layout"]["units"][0]["parameters"][0]["shape"] = {2.5, 4};
  expect_corrupt(meta, "not an integer");
}

TEST_F(CheckpointMetadata, ARangeOrParameterOutsideItsUnitIsCorrupt) {
  json meta = valid_meta(rank_file_);
  meta["layout"]["units"][0]["rank_ranges"][0] = {0, 4000};
  expect_corrupt(meta, "is not inside its 8 elements");
  meta = valid_meta(rank_file_);
  meta["layout"]["units"][0]["rank_ranges"][0] = {6, 2};
  expect_corrupt(meta, "is not inside its 8 elements");
  meta = valid_meta(rank_file_);
  meta["layout"]["units"][0]["parameters"][0]["offset"] = 4;
  expect_corrupt(meta, "is not inside its unit's 8 elements");
  meta = valid_meta(rank_file_);
  meta["layout"]["units"][0]["parameters"][0]["shape"] = {int64_t{1} << 62, 4};
  expect_corrupt(meta, "has the shape");
}

TEST_F(CheckpointMetadata, ZeroRanksIsCorrupt) {
  json meta = valid_meta(rank_file_);
  meta["world_size"] = 0;
  meta["files"] = json::array();
  expect_corrupt(meta, "lists 0 rank files for 0 ranks");
}

}  // namespace
}  // namespace zs::checkpoint
