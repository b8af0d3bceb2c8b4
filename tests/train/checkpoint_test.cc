// Sharded checkpoints through zs-train's engine on two local ranks (a 2-layer GPT, as in
// param_hash_test.cc): a run resumed from the checkpoint of step 3 continues bit for bit like
// the run that saved it — losses, gradient norms, learning rates, loss scales and the final
// parameters (the bytes of --save-weights) — at stages 0–3 in fp32, hybrid on 4 ranks, in bf16,
// in fp16 with the dynamic loss scaler, and with SGD's momentum; --keep-checkpoints prunes; the
// metadata says what it covers; a corrupt or missing rank file is an error naming the file;
// --resume auto skips a torn or corrupt checkpoint with a warning naming it; a future format
// version, another global batch or another model is refused. Rank files carry XXH3 checksums; a
// checkpoint with FNV-1a ones (written before) still loads, an unknown algorithm is refused by
// name. Saves are asynchronous by default:
// sync and async saves (and one streamed through a buffer smaller than a rank file) write the
// same bytes and resume alike, the log line gives the stall and the write time, and a failed
// background write (a file size limit makes it fail) stops the run naming the file, publishes
// nothing more and leaves the previous checkpoint loadable.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_weights.h"
#include "checkpoint/file_checksum.h"
#include "checkpoint/shard_files.h"
#include "runtime/error.h"
#include "runtime/logging.h"
#include "tests/support/corpus.h"
#include "tests/support/log_capture.h"
#include "tests/support/scratch.h"
#include "tests/support/short_run.h"
#include "tests/support/step_bits.h"
#include "train/cli.h"
#include "train/config.h"
#include "train/engine.h"

namespace zs::train {
namespace {

namespace fs = std::filesystem;
using zs::testing::error_message;
using zs::testing::learnable_corpus;
using zs::testing::LogCapture;
using zs::testing::ScratchDir;
using zs::testing::write_text;

constexpr int64_t kSteps = 6;  // short_gpt_run's

TrainConfig tiny_run(const std::string& corpus, int stage, DType precision, int hybrid_group = 0) {
  TrainConfig c = zs::testing::short_gpt_run(corpus, hybrid_group > 0 ? 4 : 2, stage, precision);
  c.hybrid_group = hybrid_group;
  // fp16: the scale grows every 2 good steps, so the scaler's counters matter at the resume.
  c.loss_scaler.growth_interval = 2;
  return c;
}

// Overwrites the byte at `offset` of `path` with `value`.
void overwrite_byte(const std::string& path, std::streamoff offset, char value) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(offset);
  f.put(value);
  ASSERT_TRUE(f.good()) << path;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The resumed run's records equal the full run's from `from` on, bit for bit (a skipped fp16
// step's NaN gradient norm included).
void expect_same_steps(const std::vector<StepRecord>& full, const std::vector<StepRecord>& resumed,
                       int64_t from) {
  ASSERT_EQ(resumed.size(), full.size() - static_cast<size_t>(from));
  for (size_t i = 0; i < resumed.size(); ++i) {
    zs::testing::expect_same_step_bits(full[static_cast<size_t>(from) + i], resumed[i]);
  }
}

// A run of kSteps that checkpoints every 3 steps into dir/ckpt and writes its final weights.
struct SavedRun {
  TrainResult result;
  std::string checkpoints;
  std::string weights;
};

SavedRun run_saving(const ScratchDir& dir, const std::string& corpus, int stage, DType precision,
                    int hybrid_group = 0, const char* optimizer = "adamw", bool async = true,
                    const std::string& name = "ckpt") {
  TrainConfig c = tiny_run(corpus, stage, precision, hybrid_group);
  c.optimizer = optimizer;
  c.checkpoint_async = async;
  c.checkpoint_dir = dir.path(name);
  c.checkpoint_interval = 3;
  c.save_weights = dir.path(name + ".safetensors");
  SavedRun run;
  run.result = run_training(c);
  run.checkpoints = c.checkpoint_dir;
  run.weights = c.save_weights;
  return run;
}

std::string step3(const SavedRun& run) { return run.checkpoints + "/step-000003"; }

// Each test's scratch directory, with the corpus the runs train on.
class Checkpoints : public ::testing::Test {
 protected:
  Checkpoints() { write_text(corpus, learnable_corpus()); }
  ScratchDir dir;
  const std::string corpus = dir.path("corpus.txt");
};

struct Resumable {
  int stage;
  DType precision;
  int hybrid_group = 0;  // > 0: on 4 ranks
  const char* optimizer = "adamw";
  bool async = true;  // --checkpoint-async, of the run that saves and of the resumed one
};

class CheckpointResume : public Checkpoints, public ::testing::WithParamInterface<Resumable> {};

TEST_P(CheckpointResume, ContinuesBitForBitLikeTheRunThatSaved) {
  const Resumable p = GetParam();
  const SavedRun full =
      run_saving(dir, corpus, p.stage, p.precision, p.hybrid_group, p.optimizer, p.async);
  ASSERT_EQ(full.result.steps.size(), static_cast<size_t>(kSteps));

  TrainConfig resumed = tiny_run(corpus, p.stage, p.precision, p.hybrid_group);
  resumed.optimizer = p.optimizer;
  resumed.checkpoint_async = p.async;
  resumed.resume = step3(full);
  resumed.save_weights = dir.path("resumed.safetensors");
  const TrainResult second = run_training(resumed);
  expect_same_steps(full.result.steps, second.steps, 3);
  EXPECT_TRUE(read_bytes(full.weights) == read_bytes(resumed.save_weights))
      << "the final parameters differ";
}

INSTANTIATE_TEST_SUITE_P(Stages, CheckpointResume,
                         ::testing::Values(Resumable{0, DType::kF32}, Resumable{1, DType::kF32},
                                           Resumable{2, DType::kF32}, Resumable{3, DType::kF32},
                                           Resumable{3, DType::kBF16}, Resumable{2, DType::kF16},
                                           Resumable{3, DType::kF32, 2},
                                           Resumable{1, DType::kF32, 0, "sgd"},
                                           Resumable{0, DType::kF32, 0, "adamw", false},
                                           Resumable{2, DType::kF16, 0, "adamw", false}),
                         [](const ::testing::TestParamInfo<Resumable>& info) {
                           return "stage" + std::to_string(info.param.stage) + "_" +
                                  dtype_name(info.param.precision) +
                                  (info.param.hybrid_group > 0 ? "_hybrid2x2" : "") + "_" +
                                  info.param.optimizer + (info.param.async ? "" : "_sync");
                         });

// Hybrid 2 x 2: the replica group's ranks hold bitwise the shards of the first group's, so they
// write no file; their entries name their source's file, with its checksum, and a resume reads
// them from there (the resume itself: the hybrid case of the parameterized test above).
TEST_F(Checkpoints, HybridReplicasWriteNoDuplicateFiles) {
  const SavedRun full = run_saving(dir, corpus, 3, DType::kF32, /*hybrid_group=*/2);
  const std::string step = step3(full);
  EXPECT_TRUE(std::filesystem::exists(step + "/rank-00000.bin"));
  EXPECT_TRUE(std::filesystem::exists(step + "/rank-00001.bin"));
  EXPECT_FALSE(std::filesystem::exists(step + "/rank-00002.bin"));
  EXPECT_FALSE(std::filesystem::exists(step + "/rank-00003.bin"));
  std::ifstream in(step + "/meta.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  const nlohmann::json& files = meta.at("files");
  ASSERT_EQ(files.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(files[r].at("rank"), r);
    EXPECT_EQ(files[r].at("name"), checkpoint::rank_file_name(r % 2)) << r;
    EXPECT_EQ(files[r].at("checksum"), files[r % 2].at("checksum")) << r;
  }
  // A name that is no rank file's, or a higher rank's, is corrupt metadata, not a path to follow.
  nlohmann::json bad = meta;
  bad.at("files")[1]["name"] = "../rank-00000.bin";
  EXPECT_THROW((void)checkpoint::rank_file_path(step, bad, 1), CorruptCheckpoint);
  bad.at("files")[1]["name"] = "rank-00003.bin";
  EXPECT_THROW((void)checkpoint::rank_file_path(step, bad, 1), CorruptCheckpoint);
  EXPECT_EQ(checkpoint::rank_file_path(step, meta, 3), step + "/rank-00001.bin");
}

TEST_F(Checkpoints, TheMetadataDescribesTheFilesAndTheRun) {
  const SavedRun full = run_saving(dir, corpus, 3, DType::kF16);
  std::ifstream in(step3(full) + "/meta.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  EXPECT_EQ(meta.at("format_version"), 3);
  EXPECT_EQ(meta.at("completed_steps"), 3);
  EXPECT_NO_THROW(checkpoint::check_checkpoint_meta_seal(meta, "meta.json"));
  EXPECT_EQ(meta.at("world_size"), 2);
  EXPECT_EQ(meta.at("stage"), 3);
  EXPECT_EQ(meta.at("optimizer").at("kind"), "adamw");
  EXPECT_EQ(meta.at("optimizer").at("steps").get<int64_t>() +
                meta.at("loss_scaler").at("skipped_steps").get<int64_t>(),
            3);
  EXPECT_EQ(meta.at("data").at("micro_batches_per_step"), 2);
  EXPECT_EQ(meta.at("rng").at("seed"), 1234);
  EXPECT_EQ(meta.at("flags").at("precision"), "fp16");
  ASSERT_EQ(meta.at("files").size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const auto& file = meta.at("files")[static_cast<size_t>(r)];
    const std::string path = step3(full) + "/" + file.at("name").get<std::string>();
    EXPECT_EQ(fs::file_size(path), file.at("bytes").get<uint64_t>());
    EXPECT_EQ(file.at("checksum").get<std::string>().rfind("xxh3:", 0), 0u);
  }
  // Each unit's two rank ranges split its padded buffer (stage 3).
  for (const auto& unit : meta.at("layout").at("units")) {
    const int64_t padded = unit.at("padded_numel");
    EXPECT_EQ(unit.at("rank_ranges")[0][0], 0);
    EXPECT_EQ(unit.at("rank_ranges")[0][1], padded / 2);
    EXPECT_EQ(unit.at("rank_ranges")[1][1], padded);
    EXPECT_FALSE(unit.at("parameters").empty());
  }
  // The final save at the end of the run is the one `latest` names.
  EXPECT_EQ(checkpoint::read_latest(full.checkpoints), "step-000006");
}

// Stage 0: every rank holds the whole replica but writes only its slice, so the files together
// hold each element of the masters and of each optimizer state tensor once, and a same-plan
// resume (which reads every rank's file) is still exact.
TEST_F(Checkpoints, AStageZeroCheckpointHoldsEachElementOnceAndResumesBitForBit) {
  constexpr int kRanks = 3;
  TrainConfig c = tiny_run(corpus, 0, DType::kF32);
  c.ranks = kRanks;
  c.checkpoint_dir = dir.path("ckpt");
  c.checkpoint_interval = 3;
  c.save_weights = dir.path("full.safetensors");
  const TrainResult full = run_training(c);
  const std::string saved = c.checkpoint_dir + "/step-000003";
  const nlohmann::json meta = nlohmann::json::parse(std::ifstream(saved + "/meta.json"));
  const auto& layout = meta.at("layout");
  const uint64_t tensors = 1 + layout.at("optimizer_state").size();
  ASSERT_EQ(tensors, 3u);  // AdamW: master, exp_avg, exp_avg_sq
  uint64_t replica = 0;
  for (const auto& unit : layout.at("units")) {
    const int64_t padded = unit.at("padded_numel");
    replica += tensors * static_cast<uint64_t>(padded) * sizeof(float);
    // The ranks' ranges split the buffer: rank r holds [r, r + 1) x padded / ranks.
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_EQ(unit.at("rank_ranges")[static_cast<size_t>(r)][0], r * padded / kRanks);
      EXPECT_EQ(unit.at("rank_ranges")[static_cast<size_t>(r)][1], (r + 1) * padded / kRanks);
    }
  }
  uint64_t total = 0;
  for (int r = 0; r < kRanks; ++r) {
    const std::string file =
        saved + "/" + meta.at("files")[static_cast<size_t>(r)].at("name").get<std::string>();
    EXPECT_EQ(fs::file_size(file), replica / kRanks) << file;
    total += fs::file_size(file);
  }
  EXPECT_EQ(total, replica);

  TrainConfig resumed = tiny_run(corpus, 0, DType::kF32);
  resumed.ranks = kRanks;
  resumed.resume = saved;
  resumed.save_weights = dir.path("resumed.safetensors");
  const TrainResult second = run_training(resumed);
  expect_same_steps(full.steps, second.steps, 3);
  EXPECT_TRUE(read_bytes(c.save_weights) == read_bytes(resumed.save_weights))
      << "the final parameters differ";
}

TEST_F(Checkpoints, KeepCheckpointsDeletesTheOlderOnes) {
  TrainConfig c = tiny_run(corpus, 2, DType::kF32);
  c.checkpoint_dir = dir.path("ckpt");
  c.checkpoint_interval = 1;
  c.keep_checkpoints = 2;
  run_training(c);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(c.checkpoint_dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".lock", "latest", "step-000005", "step-000006"}));
}

TEST_F(Checkpoints, ACorruptRankFileIsAnErrorNamingIt) {
  const SavedRun full = run_saving(dir, corpus, 1, DType::kF32);
  const std::string file = step3(full) + "/rank-00001.bin";
  overwrite_byte(file, 100, '\x5a');
  TrainConfig resumed = tiny_run(corpus, 1, DType::kF32);
  resumed.resume = step3(full);
  const std::string message = error_message<CorruptCheckpoint>([&] { run_training(resumed); });
  EXPECT_NE(message.find("rank-00001.bin"), std::string::npos) << message;
  EXPECT_NE(message.find("checksum"), std::string::npos) << message;
}

// `step_dir`'s meta.json with every rank file's checksum recomputed with `algorithm`, or set to
// `text` when it is given; sealed again (meta_checksum) as a writer of that metadata would.
void rewrite_checksums(const std::string& step_dir, checkpoint::ChecksumAlgorithm algorithm,
                       const std::string& text = "") {
  const std::string meta_path = step_dir + "/meta.json";
  nlohmann::json meta = nlohmann::json::parse(std::ifstream(meta_path));
  for (auto& file : meta.at("files")) {
    const std::vector<uint8_t> bytes =
        read_bytes(step_dir + "/" + file.at("name").get<std::string>());
    file["checksum"] =
        text.empty() ? checkpoint::FileChecksum::of(bytes.data(), bytes.size(), algorithm).text()
                     : text;
  }
  write_text(meta_path, checkpoint::seal_checkpoint_meta(meta));
}

TEST_F(Checkpoints, ACheckpointWithFnv1aChecksumsStillLoads) {
  // Checkpoints written before XXH3 carry FNV-1a checksums: they verify with FNV-1a and resume
  // bit for bit, from the same-plan reader (stage 3 on 2 ranks) and the resharding one (1 rank).
  const SavedRun full = run_saving(dir, corpus, 3, DType::kF32);
  rewrite_checksums(step3(full), checkpoint::ChecksumAlgorithm::kFnv1a64);
  TrainConfig resumed = tiny_run(corpus, 3, DType::kF32);
  resumed.resume = step3(full);
  resumed.save_weights = dir.path("resumed.safetensors");
  expect_same_steps(full.result.steps, run_training(resumed).steps, 3);
  EXPECT_TRUE(read_bytes(full.weights) == read_bytes(resumed.save_weights));
  TrainConfig one_rank = tiny_run(corpus, 3, DType::kF32);
  one_rank.ranks = 1;
  one_rank.micro_batch *= 2;  // the same global batch
  one_rank.resume = step3(full);
  EXPECT_EQ(run_training(one_rank).steps.size(), static_cast<size_t>(kSteps - 3));
  // A corrupt byte is still found with FNV-1a.
  overwrite_byte(step3(full) + "/rank-00000.bin", 64, '\x33');
  const std::string message = error_message<CorruptCheckpoint>([&] { run_training(resumed); });
  EXPECT_NE(message.find("rank-00000.bin' is corrupt: its checksum is fnv1a64:"), std::string::npos)
      << message;
}

TEST_F(Checkpoints, AnUnknownChecksumAlgorithmIsCorruptAndNamed) {
  const SavedRun full = run_saving(dir, corpus, 3, DType::kF32);
  rewrite_checksums(step3(full), checkpoint::ChecksumAlgorithm::kXxh3, "crc99:0123456789abcdef");
  TrainConfig resumed = tiny_run(corpus, 3, DType::kF32);
  resumed.resume = step3(full);
  const std::string message = error_message<CorruptCheckpoint>([&] { run_training(resumed); });
  EXPECT_NE(message.find("unknown checksum algorithm 'crc99'"), std::string::npos) << message;
}

TEST_F(Checkpoints, AMissingRankFileIsAnErrorNamingIt) {
  const SavedRun full = run_saving(dir, corpus, 3, DType::kF32);
  fs::remove(step3(full) + "/rank-00001.bin");
  TrainConfig resumed = tiny_run(corpus, 3, DType::kF32);
  resumed.resume = step3(full);
  const std::string message = error_message<CorruptCheckpoint>([&] { run_training(resumed); });
  EXPECT_NE(message.find("rank-00001.bin"), std::string::npos) << message;
  // A step directory that is not there at all.
  resumed.resume = full.checkpoints + "/step-000004";
  const std::string missing_dir = error_message<IoError>([&] { run_training(resumed); });
  EXPECT_NE(missing_dir.find("step-000004' does not exist"), std::string::npos) << missing_dir;
}

TEST_F(Checkpoints, ResumeAutoSkipsTornAndCorruptCheckpointsWithAWarning) {
  const SavedRun full = run_saving(dir, corpus, 2, DType::kF32);
  // A save of step 9 that died before it was published, `latest` naming it anyway, and a
  // corrupt step 6: only step 3 verifies.
  fs::create_directory(full.checkpoints + "/.tmp-step-000009-42");
  write_text(full.checkpoints + "/.tmp-step-000009-42/rank-00000.bin", "torn");
  write_text(full.checkpoints + "/latest", "step-000009\n");
  overwrite_byte(full.checkpoints + "/step-000006/rank-00000.bin", 8, '\x01');
  TrainConfig resumed = tiny_run(corpus, 2, DType::kF32);
  resumed.checkpoint_dir = full.checkpoints;
  resumed.resume = "auto";
  resumed.save_weights = dir.path("resumed.safetensors");
  LogCapture log;
  const TrainResult second = run_training(resumed);
  expect_same_steps(full.result.steps, second.steps, 3);
  EXPECT_TRUE(read_bytes(full.weights) == read_bytes(resumed.save_weights));
  const std::string text = log.text();
  EXPECT_NE(text.find("step-000009"), std::string::npos) << text;
  EXPECT_NE(text.find("skipping checkpoint '" + full.checkpoints + "/step-000006'"),
            std::string::npos)
      << text;
  // The resumed run's own final save replaced the corrupt step 6 and is `latest` now.
  EXPECT_EQ(checkpoint::read_latest(full.checkpoints), "step-000006");
}

// A save that ended after its step directory was renamed but before `latest` moved (finding 10 of
// issue 28): --resume auto takes the newer, complete step (it used to follow `latest` and lose a
// step), and says so; zs-ckpt inspect DIR and --init-from DIR pick the same one, and fall back
// past a step whose metadata does not read, naming it.
TEST_F(Checkpoints, ResumeAutoAndInspectTakeTheNewestCompleteStepNotJustLatest) {
  const SavedRun full = run_saving(dir, corpus, 2, DType::kF32);  // saves steps 3 and 6
  write_text(full.checkpoints + "/latest", "step-000003\n");
  TrainConfig resumed = tiny_run(corpus, 2, DType::kF32);
  resumed.checkpoint_dir = full.checkpoints;
  resumed.resume = "auto";
  {
    LogCapture log;
    run_training(resumed);
    const std::string text = log.text();
    EXPECT_NE(text.find("latest names step-000003, but step-000006 is newer and complete"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("resumed from checkpoint " + full.checkpoints + "/step-000006 after 6"),
              std::string::npos)
        << text;
  }
  EXPECT_EQ(checkpoint::resolve_step_dir(full.checkpoints), full.checkpoints + "/step-000006");
  // Metadata that does not read: inspect falls back to step 3, naming step 6 and why.
  write_text(full.checkpoints + "/step-000006/meta.json", "{ torn");
  LogCapture log;
  EXPECT_EQ(checkpoint::resolve_step_dir(full.checkpoints), full.checkpoints + "/step-000003");
  EXPECT_NE(log.text().find("skipped " + full.checkpoints + "/step-000006"), std::string::npos)
      << log.text();
  // A `latest` that holds no step name is quoted, cut, and not followed.
  write_text(full.checkpoints + "/latest", std::string(100, 'x') + "\x01");
  std::string note;
  checkpoint::resume_candidates(full.checkpoints, &note);
  EXPECT_NE(note.find("holds '" + std::string(40, 'x') + "...', not a step name"),
            std::string::npos)
      << note;
}

// One run per checkpoint directory (finding 8 of issue 28): a second run on a directory whose
// lock another run holds is refused before any work, naming the holder; a lock file left by a
// run that no longer holds it is taken over with a log line; a finished run leaves it free.
TEST_F(Checkpoints, ASecondRunOnTheSameCheckpointDirectoryIsRefused) {
  TrainConfig c = tiny_run(corpus, 2, DType::kF32);
  c.checkpoint_dir = dir.path("locked");
  {
    const checkpoint::DirectoryLock first(c.checkpoint_dir);  // a run in progress
    const std::string message = error_message<InvalidArgument>([&] { run_training(c); });
    EXPECT_NE(
        message.find("checkpoint directory '" + c.checkpoint_dir + "' is in use by another run ("),
        std::string::npos)
        << message;
    EXPECT_NE(message.find(" pid " + std::to_string(getpid())), std::string::npos) << message;
    EXPECT_TRUE(checkpoint::step_dirs(c.checkpoint_dir).empty());  // nothing was run or saved
  }
  // A lock file naming a run that ended without clearing it (killed): taken over.
  write_text(c.checkpoint_dir + "/.lock", "otherhost pid 12345\n");
  {
    LogCapture log;
    run_training(c);
    EXPECT_NE(log.text().find("taking over " + c.checkpoint_dir +
                              "/.lock, left by otherhost pid 12345, which no longer runs"),
              std::string::npos)
        << log.text();
  }
  // The run ended: the lock is free and its file cleared.
  const checkpoint::DirectoryLock after(c.checkpoint_dir);
  EXPECT_EQ(after.previous(), "");
  EXPECT_FALSE(checkpoint::step_dirs(c.checkpoint_dir).empty());
}

// meta.json carries its own checksum (finding 3 of issue 28): an edited completed_steps (8 -> 9
// skipped a batch silently; 10^12 spun for minutes; -5 was logged) or an edited file size is a
// corrupt checkpoint, named, which --resume auto skips; a completed_steps out of range is refused
// by name even when the seal is made to match.
TEST_F(Checkpoints, AnEditedMetadataFileIsCorruptAndResumeAutoSkipsIt) {
  const SavedRun full = run_saving(dir, corpus, 2, DType::kF32);  // steps 3 and 6
  const std::string meta_path = full.checkpoints + "/step-000006/meta.json";
  const std::vector<uint8_t> bytes = read_bytes(meta_path);
  const std::string text(bytes.begin(), bytes.end());
  const size_t at = text.find("\"completed_steps\": 6");
  ASSERT_NE(at, std::string::npos) << text;
  write_text(meta_path, text.substr(0, at) + "\"completed_steps\": 5" +
                            text.substr(at + std::string("\"completed_steps\": 6").size()));
  TrainConfig resumed = tiny_run(corpus, 2, DType::kF32);
  resumed.resume = full.checkpoints + "/step-000006";
  EXPECT_CONTAINS(error_message<CorruptCheckpoint>([&] { run_training(resumed); }),
                  "does not match its meta_checksum");
  EXPECT_CONTAINS(error_message<CorruptCheckpoint>(
                      [&] { checkpoint::read_checkpoint_meta(full.checkpoints + "/step-000006"); }),
                  "it was edited after the save");
  // --resume auto skips it, naming it, and continues from step 3 to the same bits.
  resumed.resume = "auto";
  resumed.checkpoint_dir = full.checkpoints;
  LogCapture log;
  const TrainResult second = run_training(resumed);
  EXPECT_CONTAINS(log.text(), "skipping checkpoint '" + full.checkpoints + "/step-000006'");
  expect_same_steps(full.result.steps, second.steps, 3);
  // Sealed again (as a tool that rewrites it on purpose would), a completed_steps out of range
  // is still refused by name.
  for (const int64_t steps : {int64_t{-5}, int64_t{1'000'000'000'000'000}}) {
    nlohmann::json meta = nlohmann::json::parse(std::ifstream(step3(full) + "/meta.json"));
    meta["completed_steps"] = steps;
    write_text(step3(full) + "/meta.json", checkpoint::seal_checkpoint_meta(meta));
    resumed.resume = step3(full);
    EXPECT_CONTAINS(error_message<CorruptCheckpoint>([&] { run_training(resumed); }),
                    "completed_steps is " + std::to_string(steps) + ", not a step count");
  }
}

TEST_F(Checkpoints, ResumeAutoWithoutACheckpointStartsFresh) {
  TrainConfig c = tiny_run(corpus, 3, DType::kF32);
  c.checkpoint_dir = dir.path("empty");
  c.resume = "auto";
  c.steps = 2;
  EXPECT_EQ(run_training(c).steps.size(), 2u);
  EXPECT_TRUE(fs::is_directory(dir.path("empty/step-000002")));
}

TEST_F(Checkpoints, IncompatibleCheckpointsAreRefusedWithTheReason) {
  const SavedRun full = run_saving(dir, corpus, 3, DType::kF32);

  TrainConfig one_rank = tiny_run(corpus, 3, DType::kF32);
  one_rank.ranks = 1;
  one_rank.resume = step3(full);
  const std::string world = error_message<InvalidArgument>([&] { run_training(one_rank); });
  // Another world size loads (reshard_test.cc), but not with another global batch.
  EXPECT_NE(world.find("global micro-batch of 4 sequences (2 ranks)"), std::string::npos) << world;
  EXPECT_NE(world.find("this run has 2 (1 ranks)"), std::string::npos) << world;

  TrainConfig wider = tiny_run(corpus, 3, DType::kF32);
  wider.width = 48;
  wider.resume = step3(full);
  const std::string model = error_message<InvalidArgument>([&] { run_training(wider); });
  EXPECT_NE(model.find("[256,32]"), std::string::npos) << model;
  EXPECT_NE(model.find("[256,48]"), std::string::npos) << model;

  // A metadata file from a future format.
  const std::string meta_path = step3(full) + "/meta.json";
  nlohmann::json meta = nlohmann::json::parse(std::ifstream(meta_path));
  meta["format_version"] = 999;
  write_text(meta_path, meta.dump());
  TrainConfig same = tiny_run(corpus, 3, DType::kF32);
  same.resume = step3(full);
  const std::string future = error_message<InvalidArgument>([&] { run_training(same); });
  EXPECT_NE(future.find("format version 999"), std::string::npos) << future;
}

// Issue 28: a checkpoint directory that cannot be made was an IoError at the first save, after
// the steps before it had trained; it is now refused before the first step, naming it.
TEST_F(Checkpoints, ASaveThatCannotWriteStopsEveryRankWithTheReason) {
  TrainConfig c = tiny_run(corpus, 3, DType::kF32);
  c.checkpoint_dir = corpus + "/ckpt";  // under a regular file: no directory can be made there
  c.checkpoint_interval = 2;
  const std::string message = error_message<InvalidArgument>([&] { run_training(c); });
  EXPECT_NE(message.find(c.checkpoint_dir), std::string::npos) << message;
  EXPECT_NE(message.find("is a file"), std::string::npos) << message;
}

// The rank files of `run`'s checkpoint of `step`, in rank order.
std::vector<std::vector<uint8_t>> rank_files(const SavedRun& run, const std::string& step) {
  std::vector<std::vector<uint8_t>> files;
  for (int r = 0; r < 2; ++r) {
    files.push_back(
        read_bytes(run.checkpoints + "/" + step + "/rank-0000" + std::to_string(r) + ".bin"));
  }
  return files;
}

TEST_F(Checkpoints, SyncAndAsyncSavesWriteTheSameFilesAndLogTheStall) {
  LogCapture log;
  const SavedRun async = run_saving(dir, corpus, 0, DType::kF32, 0, "adamw", true, "async");
  const SavedRun sync = run_saving(dir, corpus, 0, DType::kF32, 0, "adamw", false, "sync");
  expect_same_steps(async.result.steps, sync.result.steps, 0);
  for (const char* step : {"step-000003", "step-000006"}) {
    const auto files = rank_files(async, step);
    EXPECT_FALSE(files[0].empty());
    EXPECT_TRUE(files == rank_files(sync, step)) << step;
  }
  // Each save's line: the loop's stall and the background write, separately.
  const std::string text = log.text();
  for (const SavedRun* run : {&async, &sync}) {
    for (const char* step : {"step-000003", "step-000006"}) {
      const std::regex line("saved checkpoint " + run->checkpoints + "/" + step +
                            " \\(2 ranks x [0-9]+ bytes\\): training stalled [0-9]+\\.[0-9]{3} s, "
                            "write [0-9]+\\.[0-9]{3} s");
      EXPECT_TRUE(std::regex_search(text, line)) << run->checkpoints << "/" << step << "\n" << text;
    }
    // The same figures in the result, with rank 0's write broken down.
    ASSERT_EQ(run->result.saves.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      const SaveRecord& save = run->result.saves[i];
      EXPECT_EQ(save.step, 3 * static_cast<int64_t>(i + 1));
      EXPECT_GT(save.stall_seconds, 0.0);
      EXPECT_GT(save.write_seconds, 0.0);
      EXPECT_GT(save.copy_seconds, 0.0);
      EXPECT_LE(save.checksum_seconds + save.file_write_seconds + save.commit_seconds,
                save.write_seconds);
    }
    // A synchronous save stalls the loop for its write.
    if (run == &sync) {
      EXPECT_GE(sync.result.saves[0].stall_seconds, sync.result.saves[0].write_seconds);
    }
  }
  // Each resumes like the run that saved, with saves of the other kind.
  for (const SavedRun* run : {&async, &sync}) {
    TrainConfig resumed = tiny_run(corpus, 0, DType::kF32);
    resumed.resume = run->checkpoints + "/step-000003";
    resumed.checkpoint_async = run == &sync;
    const std::string name = run == &sync ? "resumed_async" : "resumed_sync";
    resumed.checkpoint_dir = dir.path(name);
    resumed.save_weights = dir.path(name + ".safetensors");
    const TrainResult second = run_training(resumed);
    expect_same_steps(async.result.steps, second.steps, 3);
    EXPECT_TRUE(read_bytes(async.weights) == read_bytes(resumed.save_weights));
    EXPECT_TRUE(rank_files(async, "step-000006") ==
                rank_files(SavedRun{second, resumed.checkpoint_dir, ""}, "step-000006"));
  }
}

TEST_F(Checkpoints, ABufferSmallerThanARankFileStreamsIt) {
  const SavedRun whole = run_saving(dir, corpus, 3, DType::kF32, 0, "adamw", true, "whole");
  TrainConfig c = tiny_run(corpus, 3, DType::kF32);
  c.checkpoint_dir = dir.path("streamed");
  c.checkpoint_interval = 3;
  c.checkpoint_buffer = 1002;  // 250 fp32 values: the ring wraps many times within a tensor
  const TrainResult streamed = run_training(c);
  expect_same_steps(whole.result.steps, streamed.steps, 0);
  const SavedRun streamed_run{streamed, c.checkpoint_dir, ""};
  const auto files = rank_files(whole, "step-000003");
  ASSERT_GT(files[0].size(), 10 * c.checkpoint_buffer);
  EXPECT_TRUE(files == rank_files(streamed_run, "step-000003"));
  EXPECT_TRUE(rank_files(whole, "step-000006") == rank_files(streamed_run, "step-000006"));

  TrainConfig resumed = tiny_run(corpus, 3, DType::kF32);
  resumed.resume = c.checkpoint_dir + "/step-000003";
  resumed.save_weights = dir.path("resumed.safetensors");
  const TrainResult second = run_training(resumed);
  expect_same_steps(whole.result.steps, second.steps, 3);
  EXPECT_TRUE(read_bytes(whole.weights) == read_bytes(resumed.save_weights));
}

// While it lives, this process's writes past `bytes` of a file fail with EFBIG (SIGXFSZ
// ignored): a background write that cannot finish, without a fault wrapper.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    EXPECT_EQ(::getrlimit(RLIMIT_FSIZE, &saved_), 0);
    previous_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previous_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*previous_)(int) = nullptr;
};

TEST_F(Checkpoints, AFailedBackgroundWriteStopsTheRunAndPublishesNothing) {
  TrainConfig first = tiny_run(corpus, 2, DType::kF32);
  first.checkpoint_dir = dir.path("ckpt");
  first.steps = 3;
  run_training(first);
  ASSERT_EQ(checkpoint::read_latest(first.checkpoint_dir), "step-000003");
  const auto rank_bytes = fs::file_size(first.checkpoint_dir + "/step-000003/rank-00000.bin");

  // The continuation saves after every step; no rank file can be written whole.
  TrainConfig more = tiny_run(corpus, 2, DType::kF32);
  more.checkpoint_dir = first.checkpoint_dir;
  more.checkpoint_interval = 1;
  more.resume = "auto";
  LogCapture log;
  std::string message;
  {
    FileSizeLimit limit(static_cast<rlim_t>(rank_bytes / 2));
    message = error_message<IoError>([&] { run_training(more); });
  }
  EXPECT_NE(message.find(".tmp-step-000004-"), std::string::npos) << message;
  EXPECT_NE(message.find("rank-0000"), std::string::npos) << message;
  EXPECT_EQ(log.text().find("saved checkpoint"), std::string::npos) << log.text();
  EXPECT_EQ(checkpoint::read_latest(first.checkpoint_dir), "step-000003");
  EXPECT_EQ(checkpoint::step_dirs(first.checkpoint_dir),
            std::vector<std::string>{first.checkpoint_dir + "/step-000003"});

  // The previous checkpoint still loads, and the run continues from it.
  const TrainResult resumed = run_training(more);
  ASSERT_EQ(resumed.steps.size(), 3u);
  EXPECT_EQ(resumed.steps.front().step, 3);
  EXPECT_EQ(checkpoint::read_latest(first.checkpoint_dir), "step-000006");
}

TEST(CheckpointFlags, SetTheConfigAndBadCombinationsAreRefused) {
  std::vector<const char*> args = {"zs-train",   "--text",
                                   "unused.txt", "--checkpoint-dir",
                                   "ck",         "--checkpoint-interval",
                                   "50",         "--keep-checkpoints",
                                   "2",          "--resume",
                                   "auto",       "--checkpoint-async",
                                   "off",        "--checkpoint-buffer",
                                   "512MiB"};
  TrainConfig c;
  EXPECT_FALSE(parse_train_args(static_cast<int>(args.size()), args.data(), c, nullptr, nullptr));
  EXPECT_EQ(c.checkpoint_dir, "ck");
  EXPECT_EQ(c.checkpoint_interval, 50);
  EXPECT_EQ(c.keep_checkpoints, 2);
  EXPECT_EQ(c.resume, "auto");
  EXPECT_FALSE(c.checkpoint_async);
  EXPECT_EQ(c.checkpoint_buffer, size_t{512} << 20);
  validate(c, 1);
  EXPECT_EQ(TrainConfig{}.keep_checkpoints, 3);
  EXPECT_TRUE(TrainConfig{}.checkpoint_async);
  EXPECT_EQ(TrainConfig{}.checkpoint_buffer, size_t{1} << 30);

  TrainConfig no_dir;
  no_dir.resume = "auto";
  EXPECT_NE(error_message<InvalidArgument>([&] { validate(no_dir, 1); }).find("--checkpoint-dir"),
            std::string::npos);
  TrainConfig interval_only;
  interval_only.checkpoint_interval = 10;
  EXPECT_NE(
      error_message<InvalidArgument>([&] { validate(interval_only, 1); }).find("--checkpoint-dir"),
      std::string::npos);
  TrainConfig keep_none = c;
  keep_none.keep_checkpoints = 0;
  EXPECT_NE(
      error_message<InvalidArgument>([&] { validate(keep_none, 1); }).find("--keep-checkpoints"),
      std::string::npos);
}

}  // namespace
}  // namespace zs::train
