// The checkpoint directory layout (checkpoint/checkpoint_dir.h): step directory names, the
// temporary directory and its commit under the step name (replacing an unpublished leftover),
// `latest`, the listing newest first (temporary directories and other names left out), pruning,
// and the FNV-1a checksum of the rank files against its published test vectors.
#include "checkpoint/checkpoint_dir.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/shard_files.h"
#include "tests/support/scratch.h"

namespace zs::checkpoint {
namespace {

namespace fs = std::filesystem;
using zs::testing::ScratchDir;
using zs::testing::write_text;

TEST(CheckpointDir, StepNamesRoundTrip) {
  EXPECT_EQ(step_dir_name(120), "step-000120");
  EXPECT_EQ(step_dir_name(12345678), "step-12345678");
  EXPECT_EQ(step_of_dir_name("step-000120"), 120);
  EXPECT_EQ(step_of_dir_name("step-12345678"), 12345678);
  EXPECT_EQ(step_of_dir_name("step-"), -1);
  EXPECT_EQ(step_of_dir_name("step-12a"), -1);
  EXPECT_EQ(step_of_dir_name(".tmp-step-000120-7"), -1);
  EXPECT_EQ(step_of_dir_name("latest"), -1);
}

TEST(CheckpointDir, ACommittedStepIsListedPublishedAndPruned) {
  ScratchDir scratch;
  const std::string dir = scratch.path("ckpt");
  EXPECT_EQ(read_latest(dir), "");
  EXPECT_TRUE(step_dirs(dir).empty());
  for (int64_t step : {10, 20, 30}) {
    const std::string temp = make_temp_step_dir(dir, step, 77);
    EXPECT_EQ(fs::path(temp).filename().string(), ".tmp-" + step_dir_name(step) + "-77");
    write_text(temp + "/meta.json", "{}");
    EXPECT_EQ(commit_step_dir(temp, dir, step), dir + "/" + step_dir_name(step));
    EXPECT_FALSE(fs::exists(temp));
    publish_latest(dir, step);
    EXPECT_EQ(read_latest(dir), step_dir_name(step));
  }
  fs::create_directory(dir + "/.tmp-step-000040-1");  // a torn save: never listed
  EXPECT_EQ(step_dirs(dir), (std::vector<std::string>{dir + "/step-000030", dir + "/step-000020",
                                                      dir + "/step-000010"}));
  EXPECT_EQ(prune_step_dirs(dir, 2), std::vector<std::string>{dir + "/step-000010"});
  EXPECT_EQ(step_dirs(dir), (std::vector<std::string>{dir + "/step-000030", dir + "/step-000020"}));
  EXPECT_TRUE(fs::exists(dir + "/.tmp-step-000040-1"));
}

TEST(CheckpointDir, ACommitReplacesAnUnpublishedDirectoryOfTheSameStep) {
  ScratchDir scratch;
  const std::string dir = scratch.path("ckpt");
  std::string temp = make_temp_step_dir(dir, 5, 1);
  write_text(temp + "/old", "x");
  commit_step_dir(temp, dir, 5);
  temp = make_temp_step_dir(dir, 5, 2);
  write_text(temp + "/new", "y");
  commit_step_dir(temp, dir, 5);
  EXPECT_FALSE(fs::exists(dir + "/step-000005/old"));
  EXPECT_TRUE(fs::exists(dir + "/step-000005/new"));
}

TEST(CheckpointDir, Fnv1a64MatchesItsTestVectors) {
  EXPECT_EQ(fnv1a64("", 0), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a", 1), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar", 6), 0x85944171f73967e8ull);
  // Continuing a hash equals hashing the concatenation.
  EXPECT_EQ(fnv1a64("bar", 3, fnv1a64("foo", 3)), fnv1a64("foobar", 6));
  EXPECT_EQ((Checksum{ChecksumAlgorithm::kFnv1a64, 0xabcull}.text()), "fnv1a64:0000000000000abc");
  EXPECT_EQ(rank_file_name(3), "rank-00003.bin");
}

}  // namespace
}  // namespace zs::checkpoint
