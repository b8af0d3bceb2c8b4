// Checkpoint saves and loads through a failing file layer (runtime/fault_file_system.h), the
// engine run in-process on two local ranks (the short GPT run of checkpoint_test.cc, saving at
// steps 3 and 6). The save of step 6 fails — the disk fills in the middle of a rank file, a write
// or an fsync reports EIO, meta.json cannot be written, the step directory cannot be renamed or
// synced, `latest` cannot be replaced — and in every case the run stops with an IoError naming
// the file and the reason, the checkpoint of step 3 is intact (its files have the sizes and
// checksums its metadata records), no torn step directory is published, and --resume auto
// continues from it to the same losses as the uninterrupted run. At load time a rank file read
// short or deleted under the run is an error naming it.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/shard_files.h"
#include "runtime/error.h"
#include "runtime/fault_file_system.h"
#include "tests/support/corpus.h"
#include "tests/support/scratch.h"
#include "tests/support/short_run.h"
#include "tests/support/step_bits.h"
#include "train/config.h"
#include "train/engine.h"

namespace zs::train {
namespace {

using zs::testing::error_message;
using zs::testing::file_exists;
using zs::testing::learnable_corpus;
using zs::testing::ScratchDir;
using zs::testing::write_text;

constexpr int64_t kSteps = 6;  // short_gpt_run's

TrainConfig saving_run(const std::string& corpus, const std::string& checkpoints) {
  TrainConfig c = zs::testing::short_gpt_run(corpus, 2, 3, DType::kF32);
  c.checkpoint_dir = checkpoints;
  c.checkpoint_interval = 3;
  return c;
}

// The step directory's files have the sizes and checksums its meta.json records.
void expect_verifies(const std::string& step_dir) {
  std::ifstream in(step_dir + "/meta.json");
  ASSERT_TRUE(in.good()) << step_dir << " has no meta.json";
  const nlohmann::json meta = nlohmann::json::parse(in);
  ASSERT_EQ(meta.at("files").size(), 2u);
  for (const auto& file : meta.at("files")) {
    const std::string path = step_dir + "/" + file.at("name").get<std::string>();
    const checkpoint::Checksum checksum =
        checkpoint::Checksum::parse(file.at("checksum").get<std::string>());
    EXPECT_EQ(checkpoint::verify_file(path, file.at("bytes").get<uint64_t>(), checksum), checksum)
        << path;
  }
}

struct Fault {
  const char* name;
  FaultRule rule;
  std::vector<std::string> message_parts;  // what the run's error must say
  bool step6_published;                    // only `latest` failed: step 6 is complete
};

void PrintTo(const Fault& fault, std::ostream* out) { *out << fault.name; }

FaultRule rule(const std::string& path_regex, FileOp op, int error_number, uint64_t after_bytes = 0,
               int64_t after_calls = 0) {
  FaultRule r;
  r.path = path_regex;
  r.regex = true;
  r.op = op;
  r.error_number = error_number;
  r.after_bytes = after_bytes;
  r.after_calls = after_calls;
  return r;
}

// The save of step 6 writes into DIR/.tmp-step-000006-<token>/.
const std::string kStep6 = R"(\.tmp-step-000006-[0-9]+)";

class CheckpointFaults : public ::testing::TestWithParam<Fault> {
 protected:
  CheckpointFaults() { write_text(corpus, learnable_corpus()); }
  ScratchDir dir;
  const std::string corpus = dir.path("corpus.txt");
};

TEST_P(CheckpointFaults, TheRunStopsNamingTheFileAndStep3ResumesToTheSameLosses) {
  const Fault fault = GetParam();
  const TrainResult full = run_training(saving_run(corpus, dir.path("full")));
  ASSERT_EQ(full.steps.size(), static_cast<size_t>(kSteps));

  const std::string checkpoints = dir.path("ckpt");
  FaultFileSystem faults;
  const size_t index = faults.add_rule(fault.rule);
  TrainConfig faulty = saving_run(corpus, checkpoints);
  faulty.file_system = &faults;
  const std::string message = error_message<IoError>([&] { run_training(faulty); });
  EXPECT_EQ(faults.fired(index), 1) << "the fault was injected once, into the save of step 6";
  for (const std::string& part : fault.message_parts) EXPECT_CONTAINS(message, part);

  // Step 3 is intact and still `latest`; nothing torn is published under a step name.
  EXPECT_EQ(checkpoint::read_latest(checkpoints), "step-000003");
  expect_verifies(checkpoints + "/step-000003");
  std::vector<std::string> published = {checkpoints + "/step-000003"};
  if (fault.step6_published) {
    published.insert(published.begin(), checkpoints + "/step-000006");
    expect_verifies(checkpoints + "/step-000006");
  }
  EXPECT_EQ(checkpoint::step_dirs(checkpoints), published);

  // --resume auto (on a healthy disk) continues from the newest complete step (3, or 6 when only
  // `latest` failed: issue 28's finding 10) to the uninterrupted run's losses.
  TrainConfig resumed = saving_run(corpus, checkpoints);
  resumed.resume = "auto";
  const TrainResult second = run_training(resumed);
  const size_t from = fault.step6_published ? 6 : 3;
  ASSERT_EQ(second.steps.size(), static_cast<size_t>(kSteps) - from);
  for (size_t i = 0; i < second.steps.size(); ++i) {
    zs::testing::expect_same_step_bits(full.steps[from + i], second.steps[i]);
  }
  EXPECT_EQ(checkpoint::read_latest(checkpoints), "step-000006");
  expect_verifies(checkpoints + "/step-000006");
}

INSTANTIATE_TEST_SUITE_P(
    SaveOfStep6, CheckpointFaults,
    ::testing::Values(
        Fault{"disk_full_in_rank_file",
              rule(kStep6 + "/rank-00000\\.bin", FileOp::kWrite, ENOSPC, 64 << 10),
              {"rank-00000.bin", "at byte 65536", "No space left on device", "the disk is full"},
              false},
        Fault{"eio_on_write",
              rule(kStep6 + "/rank-00000\\.bin", FileOp::kWrite, EIO),
              {"write of '", "rank-00000.bin", "Input/output error"},
              false},
        // Rank 0 reports a peer's failure by the peer's file and with the peer's own reason.
        Fault{"eio_on_peer_write",
              rule(kStep6 + "/rank-00001\\.bin", FileOp::kWrite, EIO),
              {"rank 1 could not write rank-00001.bin", "previous checkpoints are intact",
               "Input/output error"},
              false},
        Fault{"fsync_fails",
              rule(kStep6 + "/rank-00000\\.bin", FileOp::kSync, EIO),
              {"fsync of '", "rank-00000.bin", "Input/output error"},
              false},
        Fault{"meta_json_disk_full",
              rule(kStep6 + "/meta\\.json", FileOp::kWrite, ENOSPC),
              {"meta.json", "No space left on device"},
              false},
        Fault{"step_dir_rename_fails",
              rule(kStep6 + "$", FileOp::kRename, EIO),
              {"rename of '", ".tmp-step-000006-", "' to '", "/step-000006' failed",
               "Input/output error"},
              false},
        // The temporary directory is fsynced after each rank file and meta.json are renamed
        // into it, then by the commit of the directory itself: that fourth one fails.
        Fault{"step_dir_fsync_fails",
              rule(kStep6 + "$", FileOp::kSyncDirectory, EIO, 0, 3),
              {"directory fsync of '", ".tmp-step-000006-", "Input/output error"},
              false},
        // The save of step 3 replaced `latest` too: the second replacement fails.
        Fault{"latest_not_replaced",
              rule("/latest\\.tmp\\.", FileOp::kRename, ENOSPC, 0, 1),
              {"/latest' failed: No space left on device"},
              true}),
    [](const ::testing::TestParamInfo<Fault>& info) { return info.param.name; });

class CheckpointLoadFaults : public ::testing::Test {
 protected:
  CheckpointLoadFaults() { write_text(corpus, learnable_corpus()); }
  ScratchDir dir;
  const std::string corpus = dir.path("corpus.txt");
};

TEST_F(CheckpointLoadFaults, AShortReadOfARankFileIsCorruptNamingIt) {
  const std::string checkpoints = dir.path("ckpt");
  run_training(saving_run(corpus, checkpoints));
  FaultFileSystem faults;
  FaultRule short_read;
  short_read.path = "step-000003/rank-00001.bin";
  short_read.op = FileOp::kRead;
  short_read.action = FaultAction::kShortRead;
  short_read.after_bytes = 1000;
  faults.add_rule(short_read);
  TrainConfig resumed = saving_run(corpus, checkpoints);
  resumed.resume = checkpoints + "/step-000003";
  resumed.file_system = &faults;
  const std::string message = error_message<CorruptCheckpoint>([&] { run_training(resumed); });
  EXPECT_CONTAINS(message, checkpoints + "/step-000003/rank-00001.bin' has 1000 bytes, expected");
}

TEST_F(CheckpointLoadFaults, ARankFileDeletedUnderTheRunIsAnErrorNamingIt) {
  const std::string checkpoints = dir.path("ckpt");
  run_training(saving_run(corpus, checkpoints));
  FaultFileSystem faults;
  FaultRule remove;
  remove.path = "step-000006/rank-00000.bin";
  remove.op = FileOp::kOpen;
  remove.action = FaultAction::kDelete;
  faults.add_rule(remove);
  TrainConfig resumed = saving_run(corpus, checkpoints);
  resumed.resume = checkpoints + "/step-000006";
  resumed.file_system = &faults;
  const std::string message = error_message<CorruptCheckpoint>([&] { run_training(resumed); });
  EXPECT_CONTAINS(message, checkpoints + "/step-000006/rank-00000.bin' cannot be read (missing?)");
  EXPECT_CONTAINS(message, "No such file or directory");
  EXPECT_FALSE(file_exists(checkpoints + "/step-000006/rank-00000.bin"));
}

}  // namespace
}  // namespace zs::train
