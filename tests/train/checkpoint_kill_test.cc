// The atomicity of sharded checkpoints under SIGKILL (issue 13: "a crash or SIGKILL at any
// instant leaves the previous checkpoint complete and loadable"). zs-train runs as a child
// process (its path comes from CMake as ZS_TRAIN_BINARY) with 2 local ranks on a tiny GPT that
// saves after every step, and is killed with SIGKILL after a random delay drawn uniformly over
// the time the rest of its run takes, so that many kills land inside a save (about half of a
// step's time is the save). The runs form chains, as a preempted job does: each run resumes
// (--resume auto) from what the killed one left, until one finishes. After every kill the
// directory must hold (1) a `latest` that names a complete checkpoint, never an older one than
// before the run, (2) only complete step directories (meta.json parses and every rank file has
// its size and checksum, verified with the checkpoint code's own Checksum/FileChecksum), and
// (3) a copy of it must resume with --resume auto to the end, exit 0, from exactly the newest step
// directory (newer than `latest` after a kill between a save's rename and `latest`; or from
// scratch), whatever .tmp-* leftovers it holds. The seed is printed (rerun with
// ZS_KILL_SEED=<seed>); ZS_KILL_ITERATIONS changes the number of kills. One test, single-threaded;
// the children are its own and are always reaped.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/shard_files.h"
#include "tests/support/child_process.h"
#include "tests/support/scratch.h"

namespace zs::checkpoint {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using zs::testing::Child;
using zs::testing::run_child;

constexpr int kRanks = 2;
constexpr int kSteps = 20;
constexpr int kKeep = 2;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::atoi(value) : fallback;
}

// zs-train's flags for a run in `dir`; `interval` 1 saves after every step.
std::vector<std::string> train_args(const std::string& dir, int interval) {
  return {ZS_TRAIN_BINARY,
          "--text",
          ZS_SOURCE_DIR "/README.md",
          "--layers",
          "2",
          "--width",
          "64",
          "--heads",
          "2",
          "--context",
          "32",
          "--micro-batch",
          "1",
          "--steps",
          std::to_string(kSteps),
          "--ranks",
          std::to_string(kRanks),
          "--threads",
          "1",
          "--eval-batches",
          "1",
          "--no-progress",
          "--checkpoint-dir",
          dir,
          "--checkpoint-interval",
          std::to_string(interval),
          "--keep-checkpoints",
          std::to_string(kKeep),
          "--resume",
          "auto"};
}

// Empty when `step_dir` is a complete checkpoint of `kRanks` rank files: meta.json parses, says
// the step of the directory's name, and every file it lists has its size and its checksum.
std::string incomplete(const std::string& step_dir) {
  const std::string meta_path = (fs::path(step_dir) / "meta.json").string();
  if (!fs::exists(meta_path)) return "no meta.json";
  try {
    const nlohmann::json meta = nlohmann::json::parse(read_text(meta_path));
    const int64_t step = step_of_dir_name(fs::path(step_dir).filename().string());
    if (meta.at("completed_steps").get<int64_t>() != step) return "meta.json of another step";
    const nlohmann::json& files = meta.at("files");
    if (files.size() != kRanks) return "meta.json lists " + std::to_string(files.size()) + " files";
    for (const nlohmann::json& entry : files) {
      const std::string path = (fs::path(step_dir) / entry.at("name").get<std::string>()).string();
      if (!fs::exists(path)) return path + " is missing";
      const std::string bytes = read_text(path);
      if (bytes.size() != entry.at("bytes").get<uint64_t>()) {
        return path + " has " + std::to_string(bytes.size()) + " bytes, not " +
               entry.at("bytes").dump();
      }
      const Checksum recorded = Checksum::parse(entry.at("checksum").get<std::string>());
      if (FileChecksum::of(bytes.data(), bytes.size(), recorded.algorithm) != recorded) {
        return path + " does not match its checksum " + entry.at("checksum").dump();
      }
    }
  } catch (const std::exception& e) {
    return std::string("meta.json: ") + e.what();
  }
  return "";
}

// What a checkpoint directory holds, by kind of entry.
struct Listing {
  std::string latest;  // the name `latest` holds, "" without one
  int64_t latest_step = -1;
  std::vector<std::string> step_dirs;        // paths, newest first
  std::set<std::string> temp_dirs;           // .tmp-step-* names
  std::set<std::string> latest_temporaries;  // latest.tmp.* names (an interrupted publish)
};

Listing list(const std::string& dir) {
  Listing l;
  if (!fs::is_directory(dir)) return l;
  l.latest = read_latest(dir);
  l.latest_step = l.latest.empty() ? -1 : step_of_dir_name(l.latest);
  l.step_dirs = step_dirs(dir);
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".tmp-", 0) == 0) l.temp_dirs.insert(name);
    if (name.rfind("latest.tmp.", 0) == 0) l.latest_temporaries.insert(name);
  }
  return l;
}

std::string describe(const std::string& dir) {
  std::ostringstream text;
  text << dir << ":";
  if (!fs::is_directory(dir)) return text.str() + " (none)";
  for (const auto& entry : fs::directory_iterator(dir)) {
    text << "\n  " << entry.path().filename().string();
    if (entry.is_directory()) {
      for (const auto& file : fs::directory_iterator(entry.path())) {
        text << "\n    " << file.path().filename().string() << " " << file.file_size();
      }
    }
  }
  return text.str() + "\n  latest = '" + read_latest(dir) + "'";
}

// Whether any of `names` holds ".<pid>" or "-<pid>" as its token: a file of the run `pid`.
bool has_token(const std::set<std::string>& names, pid_t pid) {
  const std::string id = std::to_string(pid & 0xffffff);
  for (const std::string& name : names) {
    const size_t at = name.find("-" + id);
    const size_t dot = name.find("." + id + ".");
    if ((at != std::string::npos && at + 1 + id.size() == name.size()) ||
        dot != std::string::npos) {
      return true;
    }
  }
  return false;
}

TEST(CheckpointKill, SigkillAtRandomPointsLeavesTheLastCheckpointLoadable) {
  zs::testing::ScratchDir scratch("zs_kill_");
  const uint64_t seed = static_cast<uint64_t>(
      env_int("ZS_KILL_SEED", static_cast<int>(std::random_device{}() & 0x7fffffff)));
  const int iterations = env_int("ZS_KILL_ITERATIONS", 40);
  // A bound on the whole test (the machine may be busy): later iterations are left out, but
  // never below a third of them.
  const double budget_seconds = 45;
  std::printf("checkpoint kill test: seed %llu (rerun with ZS_KILL_SEED=%llu), %d iterations\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed),
              iterations);
  std::mt19937_64 rng(seed);

  // One uninterrupted run: it must finish, and its duration spreads the kills.
  const std::string reference = scratch.path("reference");
  const Child full = run_child(train_args(reference, 1), scratch.path("reference.log"), -1);
  ASSERT_EQ(full.exit_code, 0) << read_text(scratch.path("reference.log"));
  ASSERT_EQ(list(reference).latest_step, kSteps) << describe(reference);
  // The same run once more: it resumes after the last step, so it only starts, restores and
  // evaluates; what a resumed run spends before its first step.
  const Child again = run_child(train_args(reference, 1), scratch.path("reference.log"), -1);
  ASSERT_EQ(again.exit_code, 0) << read_text(scratch.path("reference.log"));
  const double start_seconds = std::min(again.seconds, full.seconds);
  const double step_seconds = (full.seconds - start_seconds) / kSteps;
  std::printf("checkpoint kill test: a run takes %.3f s, %.3f s of it before the first step\n",
              full.seconds, start_seconds);

  const std::string dir = scratch.path("run");
  const std::regex resumed_re("resumed from checkpoint (\\S+) after (\\d+) steps");
  const auto test_start = Clock::now();
  int done = 0, killed = 0, mid_save = 0, resumes = 0, fresh = 0, with_leftovers = 0;
  int leftovers_after = 0;
  for (int it = 0; it < iterations; ++it) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - test_start).count();
    if (elapsed > budget_seconds && it >= iterations / 3) break;
    const Listing before = list(dir);
    // The run resumes after `before.latest_step` steps: draw the kill over what it runs, the
    // last quarter of its start (restoring) and its remaining steps, so that kills spread over
    // its saves (with a micro-batch of 32 tokens, a step is mostly its save).
    const int64_t resumed_at = std::max<int64_t>(before.latest_step, 0);
    const double span = start_seconds + step_seconds * static_cast<double>(kSteps - resumed_at);
    const double delay = std::uniform_real_distribution<double>(start_seconds * 0.75, span)(rng);
    const std::string log = scratch.path("run.log");
    const Child child = run_child(train_args(dir, 1), log, delay);
    const std::string where = "iteration " + std::to_string(it) + " (seed " + std::to_string(seed) +
                              ", kill after " + std::to_string(delay) + " s, resumed at step " +
                              std::to_string(resumed_at) + ")";
    ASSERT_TRUE(child.killed || child.exit_code == 0)
        << where << ": exit code " << child.exit_code << "\n"
        << read_text(log);
    ++done;
    const Listing after = list(dir);
    std::printf("  %s: %s after %.3f s, latest %lld -> %lld, %zu step dirs, %zu .tmp-* dirs\n",
                where.c_str(), child.killed ? "killed" : "finished", child.seconds,
                static_cast<long long>(before.latest_step),
                static_cast<long long>(after.latest_step), after.step_dirs.size(),
                after.temp_dirs.size());
    if (child.killed) {
      ++killed;
      std::set<std::string> before_steps(before.step_dirs.begin(), before.step_dirs.end());
      bool unpublished = false;
      for (const std::string& path : after.step_dirs) {
        if (step_of_dir_name(fs::path(path).filename().string()) > after.latest_step &&
            !before_steps.count(path)) {
          unpublished = true;
        }
      }
      // Inside the temporary directory, between its rename and `latest`, inside the publish of
      // `latest`, or before pruning finished.
      if (has_token(after.temp_dirs, child.pid) || unpublished ||
          has_token(after.latest_temporaries, child.pid) ||
          (after.step_dirs.size() > static_cast<size_t>(kKeep) &&
           after.step_dirs.size() > before.step_dirs.size())) {
        ++mid_save;
      }
    }
    // (1) `latest` names a complete checkpoint, never an older one than before the run.
    EXPECT_GE(after.latest_step, before.latest_step) << where << "\n" << describe(dir);
    if (!after.latest.empty()) {
      ASSERT_GE(after.latest_step, 0) << where << ": latest = '" << after.latest << "'";
      const std::string named = (fs::path(dir) / after.latest).string();
      ASSERT_TRUE(fs::is_directory(named)) << where << "\n" << describe(dir);
      ASSERT_EQ(incomplete(named), "") << where << ": latest\n" << describe(dir);
    }
    // (2) Every step directory (no .tmp prefix) is complete: saves appear by a rename, and
    // pruning and replacing delete a step directory only after renaming it to a .tmp- name.
    for (const std::string& path : after.step_dirs) {
      ASSERT_EQ(incomplete(path), "") << where << ": " << path << "\n" << describe(dir);
    }
    // (3) A copy resumes to the end with --resume auto from exactly the newest step directory
    // (from scratch without any), the .tmp-* leftovers ignored.
    const std::string copy = scratch.path("copy");
    fs::remove_all(copy);
    if (fs::exists(dir)) fs::copy(dir, copy, fs::copy_options::recursive);
    // The newest step directory: a kill between a save's rename and `latest` leaves one newer
    // than `latest`, complete, and the resume takes it (issue 28, finding 10).
    const int64_t expected =
        after.step_dirs.empty()
            ? -1
            : step_of_dir_name(fs::path(after.step_dirs.front()).filename().string());
    const std::string copy_log = scratch.path("copy.log");
    const Child resume = run_child(train_args(copy, 0), copy_log, -1);
    const std::string text = read_text(copy_log);
    ASSERT_EQ(resume.exit_code, 0) << where << ": the resume failed\n"
                                   << describe(copy) << "\n"
                                   << text;
    std::smatch match;
    if (expected < 0) {
      EXPECT_TRUE(std::regex_search(text, match, resumed_re) == false &&
                  text.find("starting from scratch") != std::string::npos)
          << where << "\n"
          << text;
      ++fresh;
    } else {
      ASSERT_TRUE(std::regex_search(text, match, resumed_re)) << where << "\n" << text;
      EXPECT_EQ(std::stoll(match[2].str()), expected) << where << "\n" << describe(dir) << text;
      EXPECT_EQ(fs::path(match[1].str()).filename().string(), step_dir_name(expected)) << where;
      EXPECT_EQ(text.find("skipping checkpoint"), std::string::npos) << where << "\n" << text;
      ++resumes;
    }
    if (!after.temp_dirs.empty()) ++with_leftovers;
    EXPECT_EQ(list(copy).latest_step, kSteps) << where << "\n" << describe(copy);
    leftovers_after = std::max(leftovers_after, static_cast<int>(list(copy).temp_dirs.size()));
    if (HasFailure()) return;
    // A finished chain (the run ended, or was killed after its last save) starts over in an
    // empty directory.
    if (!child.killed || after.latest_step == kSteps) fs::remove_all(dir);
  }
  std::printf(
      "checkpoint kill test: %d iterations, %d killed (%d during a save), %d ran to the end; "
      "%d resumes verified (%d with .tmp-* leftovers), %d fresh starts; up to %d .tmp-* "
      "directories still there after a resumed run finished\n",
      done, killed, mid_save, done - killed, resumes, with_leftovers, fresh, leftovers_after);
  EXPECT_GE(done, iterations / 3);
}

}  // namespace
}  // namespace zs::checkpoint
