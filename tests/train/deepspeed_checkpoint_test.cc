// DeepSpeed's checkpoint keys in a ds_config.json (train/config.cc, apply_deepspeed_json): the
// "nebula" section's storage path, retention and load switch become --checkpoint-dir,
// --keep-checkpoints and --resume (flags still win), checkpoint.writer.decoupled becomes
// --checkpoint-async; the rest of the "checkpoint" section and the
// zero_optimization keys about saving are accepted with a note saying what zeroshard does
// instead; node-local storage, which zeroshard's shared checkpoint directory cannot use, and
// malformed values are errors naming the key.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/error.h"
#include "tests/support/error_text.h"
#include "tests/support/scratch.h"
#include "train/cli.h"
#include "train/config.h"

namespace zs::train {
namespace {

using testing::contains;
using testing::error_message;
using testing::ScratchDir;
using testing::write_text;

// The notes of applying `json` to a default TrainConfig (written into *config if given).
std::vector<std::string> notes_of(const std::string& json, TrainConfig* config = nullptr) {
  TrainConfig local;
  std::vector<std::string> notes;
  apply_deepspeed_json(json, "ds.json", config ? *config : local, &notes);
  return notes;
}

// The one note that starts with `key`, or "" (and a failure) if there is not exactly one.
std::string note_for(const std::vector<std::string>& notes, const std::string& key) {
  std::string found;
  int count = 0;
  for (const std::string& note : notes) {
    if (note.rfind(key + " = ", 0) == 0) {
      found = note;
      ++count;
    }
  }
  EXPECT_EQ(count, 1) << "notes for " << key;
  return found;
}

TEST(DeepSpeedCheckpointKeys, CheckpointSectionIsAcceptedWithWhatZeroshardDoesInstead) {
  TrainConfig c;
  const TrainConfig before = c;
  const std::vector<std::string> notes = notes_of(R"({"checkpoint": {
      "tag_validation": "Fail", "load_universal": true, "use_node_local_storage": false,
      "parallel_write": {"pipeline_stage": true}, "checkpoint_serialization": false,
      "writer": {"type": "fast", "decoupled": true, "io_buffer_size": 64e6,
                 "io_buffer_double": true, "show_statistics": false}}})",
                                                  &c);
  EXPECT_TRUE(contains(note_for(notes, "checkpoint.tag_validation"), "by its step"));
  EXPECT_TRUE(contains(note_for(notes, "checkpoint.load_universal"),
                       "every zeroshard checkpoint is universal"));
  EXPECT_TRUE(contains(note_for(notes, "checkpoint.load_universal"), "reshards"));
  EXPECT_TRUE(contains(note_for(notes, "checkpoint.parallel_write.pipeline_stage"),
                       "writes its own shard file in parallel"));
  EXPECT_TRUE(contains(note_for(notes, "checkpoint.checkpoint_serialization"), "JSON index"));
  EXPECT_TRUE(contains(note_for(notes, "checkpoint.writer.type"), "one checkpoint writer"));
  EXPECT_TRUE(contains(note_for(notes, "checkpoint.writer.io_buffer_size"), "--checkpoint-buffer"));
  // Every key but use_node_local_storage = false (the default) and writer.decoupled (mapped).
  EXPECT_EQ(notes.size(), 8u);
  EXPECT_TRUE(c.checkpoint_async);
  // Nothing about where or how often to save changes: DeepSpeed has no key for that.
  EXPECT_EQ(c.checkpoint_dir, before.checkpoint_dir);
  EXPECT_EQ(c.checkpoint_interval, before.checkpoint_interval);
  EXPECT_EQ(c.keep_checkpoints, before.keep_checkpoints);
  EXPECT_EQ(c.resume, before.resume);
}

TEST(DeepSpeedCheckpointKeys, ADecoupledWriterIsAnAsynchronousSave) {
  TrainConfig c;
  notes_of(R"({"checkpoint": {"writer": {"decoupled": false}}})", &c);
  EXPECT_FALSE(c.checkpoint_async);
  notes_of(R"({"checkpoint": {"writer": {"decoupled": true}}})", &c);
  EXPECT_TRUE(c.checkpoint_async);
  const std::string error = error_message<InvalidArgument>(
      [&] { notes_of(R"({"checkpoint": {"writer": {"decoupled": "yes"}}})"); });
  EXPECT_TRUE(contains(error, "checkpoint.writer.decoupled")) << error;
}

TEST(DeepSpeedCheckpointKeys, ZeroKeysAboutSavingSayWhereTheirFeatureIs) {
  const std::vector<std::string> notes = notes_of(R"({"zero_optimization": {
      "stage": 3, "stage3_gather_16bit_weights_on_model_save": true,
      "gather_16bit_weights_on_model_save": true, "elastic_checkpoint": true,
      "load_from_fp32_weights": true}})");
  for (const char* key : {"zero_optimization.stage3_gather_16bit_weights_on_model_save",
                          "zero_optimization.gather_16bit_weights_on_model_save"}) {
    const std::string note = note_for(notes, key);
    EXPECT_TRUE(contains(note, "--save-weights")) << note;
    EXPECT_TRUE(contains(note, "zs-ckpt export")) << note;
  }
  EXPECT_TRUE(contains(note_for(notes, "zero_optimization.elastic_checkpoint"),
                       "reshards it to any world size and stage"));
  EXPECT_TRUE(
      contains(note_for(notes, "zero_optimization.load_from_fp32_weights"), "fp32 masters"));
}

TEST(DeepSpeedCheckpointKeys, NebulaMapsOntoCheckpointDirKeepAndResume) {
  TrainConfig c;
  const std::vector<std::string> notes = notes_of(R"({"nebula": {
      "enabled": true, "persistent_storage_path": "/shared/ckpt", "persistent_time_interval": 100,
      "num_of_version_in_retention": 2, "enable_nebula_load": true}})",
                                                  &c);
  EXPECT_EQ(c.checkpoint_dir, "/shared/ckpt");
  EXPECT_EQ(c.keep_checkpoints, 2);
  EXPECT_EQ(c.resume, "auto");
  EXPECT_TRUE(
      contains(note_for(notes, "nebula.persistent_time_interval"), "--checkpoint-interval"));

  TrainConfig with_path;
  notes_of(R"({"nebula": {"enabled": true, "persistent_storage_path": "/shared/ckpt",
               "enable_nebula_load": true, "load_path": "/shared/ckpt/step-000040"}})",
           &with_path);
  EXPECT_EQ(with_path.resume, "/shared/ckpt/step-000040");

  // Disabled, as in DeepSpeed, the section changes nothing.
  TrainConfig off;
  notes_of(R"({"nebula": {"enabled": false, "persistent_storage_path": "/shared/ckpt",
               "num_of_version_in_retention": 7, "enable_nebula_load": true}})",
           &off);
  EXPECT_EQ(off.checkpoint_dir, TrainConfig{}.checkpoint_dir);
  EXPECT_EQ(off.keep_checkpoints, TrainConfig{}.keep_checkpoints);
  EXPECT_EQ(off.resume, TrainConfig{}.resume);
}

TEST(DeepSpeedCheckpointKeys, FlagsWinOverTheNebulaKeys) {
  ScratchDir dir;
  const std::string ds = dir.path("ds_config.json");
  write_text(ds, R"({"nebula": {"enabled": true, "persistent_storage_path": "/from/json",
                                "num_of_version_in_retention": 2}})");
  const char* argv[] = {"zs-train", "--deepspeed", ds.c_str(), "--checkpoint-dir", "/from/flag"};
  TrainConfig c;
  EXPECT_FALSE(parse_train_args(5, argv, c, nullptr, nullptr));
  EXPECT_EQ(c.checkpoint_dir, "/from/flag");
  EXPECT_EQ(c.keep_checkpoints, 2);  // no flag: the file's
}

TEST(DeepSpeedCheckpointKeys, WhatCannotWorkIsAnErrorNamingTheKey) {
  const auto error = [](const std::string& json) {
    return error_message<InvalidArgument>([&] { notes_of(json); });
  };
  const std::string local = error(R"({"checkpoint": {"use_node_local_storage": true}})");
  EXPECT_TRUE(contains(local, "'checkpoint.use_node_local_storage' = true")) << local;
  EXPECT_TRUE(contains(local, "storage every node sees")) << local;
  const std::string tag = error(R"({"checkpoint": {"tag_validation": "Sometimes"}})");
  EXPECT_TRUE(contains(tag, "checkpoint.tag_validation")) << tag;
  EXPECT_TRUE(contains(tag, "Ignore, Warn or Fail")) << tag;
  const std::string universal = error(R"({"checkpoint": {"load_universal": "yes"}})");
  EXPECT_TRUE(contains(universal, "checkpoint.load_universal")) << universal;
  const std::string keep = error(R"({"nebula": {"enabled": true,
                                                "num_of_version_in_retention": -1}})");
  EXPECT_TRUE(contains(keep, "nebula.num_of_version_in_retention")) << keep;
  // A misspelt key inside the new sections is listed with its path, as everywhere else.
  const std::string typo = error(R"({"checkpoint": {"load_univeral": true,
                                     "writer": {"decoupld": true}}})");
  EXPECT_TRUE(contains(typo, "checkpoint.load_univeral")) << typo;
  EXPECT_TRUE(contains(typo, "checkpoint.writer.decoupld")) << typo;
}

}  // namespace
}  // namespace zs::train
