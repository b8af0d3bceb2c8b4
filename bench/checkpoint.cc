// Sharded checkpoint bandwidth next to the disk's own, measured in the same run: for a GPT whose
// shape the flags give (default: 6 layers × 512 wide, vocab 4096 — about 21M parameters, 250 MB
// of fp32 masters and AdamW state) on 1 and 2 local ranks (ZeRO stage 3, so each rank file holds
// 1/ranks of the state):
//   raw write  O_DIRECT from 4 KiB-aligned buffers into one file per rank of the rank file's
//              size, the ranks' files written concurrently, then fsync (buffered + fsync +
//              fadvise(DONTNEED) where the filesystem refuses O_DIRECT; the table says which)
//   raw read   the same files read back with O_DIRECT (so from the device, not the page cache)
//   save       the final checkpoint of a one-step zs-train run (train::run_training, its
//              checkpointer: rank files, meta.json, the directory rename, `latest`), timed by a
//              file layer that notes the save's first and last file operation
//   load       each rank's open_verified (the map and checksum pass of RankFileReader, every byte
//              from the device: the files are dropped from the page cache first with
//              fadvise(DONTNEED)), ranks concurrently; the copy into the optimizer's tensors is
//              not included
//   export     `zs-ckpt export` of the checkpoint to safetensors as a child process: its peak
//              RSS (wait4's ru_maxrss) next to the model's fp32 size
// and prints each bandwidth per rank with its ratio to the raw figure (the target is >= 70%).
// Best of --repeats runs of each. Prints; never asserts.
//
// Usage: zs-bench-checkpoint [--layers 6] [--width 512] [--heads 8] [--vocab 4096]
//                            [--context 64] [--dir /tmp] [--repeats 2] [--zs-ckpt PATH]
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/shard_files.h"
#include "runtime/file_system.h"
#include "runtime/logging.h"
#include "train/engine.h"

extern char** environ;

namespace {

namespace stdfs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Options {
  int64_t layers = 6, width = 512, heads = 8, vocab = 4096, context = 64;
  std::string dir = "/tmp";
  int repeats = 2;
  std::string zs_ckpt;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--layers") {
      o.layers = std::atoll(value.c_str());
    } else if (key == "--width") {
      o.width = std::atoll(value.c_str());
    } else if (key == "--heads") {
      o.heads = std::atoll(value.c_str());
    } else if (key == "--vocab") {
      o.vocab = std::atoll(value.c_str());
    } else if (key == "--context") {
      o.context = std::atoll(value.c_str());
    } else if (key == "--dir") {
      o.dir = value;
    } else if (key == "--repeats") {
      o.repeats = std::max(1, std::atoi(value.c_str()));
    } else if (key == "--zs-ckpt") {
      o.zs_ckpt = value;
    } else {
      std::fprintf(stderr, "zs-bench-checkpoint: unknown flag %s (see the file's header)\n",
                   key.c_str());
      std::exit(2);
    }
  }
  if (o.zs_ckpt.empty()) {
    // Built next to this program: build/bench/zs-bench-checkpoint, build/apps/zs-ckpt.
    o.zs_ckpt =
        (stdfs::read_symlink("/proc/self/exe").parent_path().parent_path() / "apps" / "zs-ckpt")
            .string();
  }
  return o;
}

// ---- the disk's own bandwidth ----

constexpr size_t kAlign = 4096;
constexpr size_t kChunk = 8 << 20;

struct RawResult {
  double write_gbs = 0;  // per stream
  double read_gbs = 0;
  bool direct = true;
};

void fail(const char* call, const std::string& path) {
  std::fprintf(stderr, "zs-bench-checkpoint: %s %s: %s\n", call, path.c_str(),
               std::strerror(errno));
  std::exit(1);
}

void drop_from_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("open", path);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Writes `bytes` (rounded up to the alignment) into `path` and fsyncs; O_DIRECT when `direct`.
void raw_write(const std::string& path, size_t bytes, bool direct, const char* buffer) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0644);
  if (fd < 0) fail("open", path);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kChunk, (bytes - done + kAlign - 1) / kAlign * kAlign);
    const ssize_t w = ::write(fd, buffer, n);
    if (w <= 0) fail("write", path);
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) fail("fsync", path);
  ::close(fd);
}

void raw_read(const std::string& path, bool direct, char* buffer) {
  if (!direct) drop_from_page_cache(path);
  const int fd = ::open(path.c_str(), O_RDONLY | (direct ? O_DIRECT : 0));
  if (fd < 0) fail("open", path);
  while (true) {
    const ssize_t r = ::read(fd, buffer, kChunk);
    if (r < 0) fail("read", path);
    if (r == 0) break;
  }
  ::close(fd);
}

// Does this filesystem take O_DIRECT (tmpfs and some overlays refuse it with EINVAL)?
bool direct_io_works(const std::string& dir) {
  const std::string probe = dir + "/direct-probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  return fd >= 0;
}

// `streams` files of `bytes` each, written (and then read) concurrently.
RawResult raw_bandwidth(const std::string& dir, int streams, size_t bytes, int repeats) {
  RawResult result;
  result.direct = direct_io_works(dir);
  std::vector<char*> buffers;
  for (int s = 0; s < streams; ++s) {
    char* b = static_cast<char*>(std::aligned_alloc(kAlign, kChunk));
    for (size_t i = 0; i < kChunk; ++i) b[i] = static_cast<char>(i * 131 + s);
    buffers.push_back(b);
  }
  auto file = [&](int s) { return dir + "/raw-" + std::to_string(s) + ".bin"; };
  for (int r = 0; r < repeats; ++r) {
    auto run = [&](auto&& body) {
      std::vector<std::thread> threads;
      const auto start = Clock::now();
      for (int s = 0; s < streams; ++s) threads.emplace_back([&, s] { body(s); });
      for (auto& t : threads) t.join();
      return static_cast<double>(bytes) / seconds_between(start, Clock::now()) / 1e9;
    };
    result.write_gbs =
        std::max(result.write_gbs,
                 run([&](int s) { raw_write(file(s), bytes, result.direct, buffers[s]); }));
    result.read_gbs = std::max(result.read_gbs,
                               run([&](int s) { raw_read(file(s), result.direct, buffers[s]); }));
  }
  for (int s = 0; s < streams; ++s) {
    ::unlink(file(s).c_str());
    std::free(buffers[s]);
  }
  return result;
}

// ---- the checkpoint's ----

// Notes when the save's first file operation (rank 0 creating DIR) began and when its last
// directory fsync (after `latest` is replaced) ended: the save's wall time as the file layer sees
// it, whatever thread does the writing.
class SaveClock final : public zs::FileSystemWrapper {
 public:
  SaveClock() : FileSystemWrapper(zs::posix_file_system()) {}
  void make_directories(const std::string& path) const override {
    note(first_, Clock::now(), true);
    base().make_directories(path);
  }
  void sync_directory(const std::string& path) const override {
    base().sync_directory(path);
    note(last_, Clock::now(), false);
  }
  double seconds() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return seconds_between(first_, last_);
  }

 private:
  void note(Clock::time_point& at, Clock::time_point now, bool earliest) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (at == Clock::time_point{} || (earliest ? now < at : now > at)) at = now;
  }
  mutable std::mutex mutex_;
  mutable Clock::time_point first_{}, last_{};
};

zs::train::TrainConfig one_step_run(const Options& o, const std::string& corpus, int ranks,
                                    const std::string& checkpoints) {
  zs::train::TrainConfig c;
  c.text = {corpus};
  c.n_layer = o.layers;
  c.width = o.width;
  c.n_head = o.heads;
  c.vocab_size = o.vocab;
  c.context = o.context;
  c.micro_batch = 1;
  c.ranks = ranks;
  c.stage = 3;
  c.steps = 1;
  c.eval_batches = 1;
  c.log_interval = 1000;
  c.progress = false;
  c.checkpoint_dir = checkpoints;
  return c;
}

struct RankFile {
  std::string path;
  uint64_t bytes;
  uint64_t checksum;
};

std::vector<RankFile> rank_files(const std::string& step_dir) {
  std::ifstream in(step_dir + "/meta.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  std::vector<RankFile> files;
  for (const auto& f : meta.at("files")) {
    files.push_back({step_dir + "/" + f.at("name").get<std::string>(),
                     f.at("bytes").get<uint64_t>(),
                     zs::checkpoint::parse_checksum(f.at("checksum").get<std::string>())});
  }
  return files;
}

// Every rank's open_verified at once, from the device; GB/s per rank.
double load_bandwidth(const std::vector<RankFile>& files) {
  for (const RankFile& f : files) drop_from_page_cache(f.path);
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (const RankFile& f : files) {
    threads.emplace_back([&f] { zs::checkpoint::open_verified(f.path, f.bytes, f.checksum); });
  }
  for (auto& t : threads) t.join();
  return static_cast<double>(files.front().bytes) / seconds_between(start, Clock::now()) / 1e9;
}

// Runs `zs-ckpt export step_dir out` as a child; its peak RSS in bytes, or -1 when it failed.
double export_peak_rss(const std::string& zs_ckpt, const std::string& step_dir,
                       const std::string& out) {
  std::vector<std::string> args = {zs_ckpt, "export", step_dir, out, "--dtype", "f32"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, zs_ckpt.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    std::fprintf(stderr, "zs-bench-checkpoint: cannot run %s: %s (pass --zs-ckpt PATH)\n",
                 zs_ckpt.c_str(), std::strerror(spawned));
    return -1;
  }
  int status = 0;
  rusage usage{};
  ::wait4(pid, &status, 0, &usage);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  return static_cast<double>(usage.ru_maxrss) * 1024.0;  // Linux: kilobytes
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  zs::logger().set_level(spdlog::level::warn);
  const std::string work = o.dir + "/zs-bench-checkpoint-" + std::to_string(::getpid());
  stdfs::create_directories(work);
  const std::string corpus = work + "/corpus.txt";
  {
    std::ofstream text(corpus);
    for (int i = 0; i < 20000; ++i) text << "the quick brown fox " << i << " jumps over the dog\n";
  }

  std::printf(
      "zs-bench-checkpoint: GPT %lld layers x %lld wide, vocab %lld, context %lld; ZeRO stage 3; "
      "files in %s; best of %d\n",
      static_cast<long long>(o.layers), static_cast<long long>(o.width),
      static_cast<long long>(o.vocab), static_cast<long long>(o.context), o.dir.c_str(), o.repeats);
  std::printf("%5s %10s %10s | %9s %9s %6s | %9s %9s %6s | %9s %9s\n", "ranks", "state MB",
              "file MB", "raw wr", "save", "ratio", "raw rd", "load", "ratio", "export", "model");
  std::printf("%5s %10s %10s | %9s %9s %6s | %9s %9s %6s | %9s %9s\n", "", "", "per rank", "GB/s",
              "GB/s/rank", "", "GB/s", "GB/s/rank", "", "peak RSS", "fp32 MB");
  bool direct = true;
  for (int ranks : {1, 2}) {
    const std::string checkpoints = work + "/ckpt-" + std::to_string(ranks);
    double save_gbs = 0, load_gbs = 0;
    std::vector<RankFile> files;
    int64_t parameters = 0;
    for (int r = 0; r < o.repeats; ++r) {
      stdfs::remove_all(checkpoints);
      SaveClock clock;
      zs::train::TrainConfig c = one_step_run(o, corpus, ranks, checkpoints);
      c.file_system = &clock;
      parameters = zs::train::run_training(c).parameters;
      files = rank_files(checkpoints + "/step-000001");
      save_gbs =
          std::max(save_gbs, static_cast<double>(files.front().bytes) / clock.seconds() / 1e9);
      load_gbs = std::max(load_gbs, load_bandwidth(files));
    }
    const RawResult raw = raw_bandwidth(work, ranks, files.front().bytes, o.repeats);
    direct = direct && raw.direct;
    const double rss =
        export_peak_rss(o.zs_ckpt, checkpoints + "/step-000001", work + "/export.safetensors");
    const double state_mb = static_cast<double>(files.front().bytes) * ranks / 1e6;
    std::printf("%5d %10.1f %10.1f | %9.3f %9.3f %5.0f%% | %9.3f %9.3f %5.0f%% | %6.0f MB %9.1f\n",
                ranks, state_mb, static_cast<double>(files.front().bytes) / 1e6, raw.write_gbs,
                save_gbs, 100 * save_gbs / raw.write_gbs, raw.read_gbs, load_gbs,
                100 * load_gbs / raw.read_gbs, rss / 1e6,
                static_cast<double>(parameters) * 4 / 1e6);
    stdfs::remove_all(checkpoints);
    stdfs::remove(work + "/export.safetensors");
  }
  std::printf("raw I/O: %s\n", direct ? "O_DIRECT, 4 KiB-aligned 8 MiB writes and reads"
                                      : "buffered + fsync, page cache dropped before reads "
                                        "(this filesystem refuses O_DIRECT)");
  // ---- stall vs sync: the place for --checkpoint-async ----
  // TODO(lead, after merging the asynchronous saves): run one_step_run with
  // --checkpoint-async on and off and print the training step's stall at the save (async) next
  // to the synchronous save's time above. Not measured in this build: saves are synchronous.
  std::printf("async save stall vs sync save: not measured (synchronous saves in this build)\n");
  stdfs::remove_all(work);
  return 0;
}
