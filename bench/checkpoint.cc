// Sharded checkpoint bandwidth next to the disk's own, measured in the same run: for a GPT whose
// shape the flags give (default: 6 layers × 512 wide, vocab 4096 — about 21M parameters, 250 MB
// of fp32 masters and AdamW state) on 1 and 2 local ranks (ZeRO stage 3, so each rank file holds
// 1/ranks of the state):
//   raw write  O_DIRECT from 4 KiB-aligned 8 MiB buffers, 4 requests in flight per file, into one
//              file per rank of the rank file's size, the ranks' files written concurrently,
//              then fsync (buffered + fsync + fadvise(DONTNEED) where the filesystem refuses
//              O_DIRECT; the output says which)
//   raw read   the same files read back the same way (O_DIRECT: from the device, not the page
//              cache)
//   save       the final checkpoint of a one-step zs-train run (train::run_training, its
//              checkpointer: rank files, meta.json, the directory rename, `latest`), saved
//              synchronously and timed by a file layer that notes the save's first and last file
//              operation; the rank files' bodies go with O_DIRECT where the filesystem takes it
//              (checkpoint/rank_file_writer.h). The same save again with O_DIRECT refused by that
//              file layer, as tmpfs would: the page-cache path, for comparison
//   load       each rank's open_verified (the map and checksum pass of RankFileReader, every byte
//              from the device: the files are dropped from the page cache first with
//              fadvise(DONTNEED)), ranks concurrently; the copy into the optimizer's tensors is
//              not included
//   export     `zs-ckpt export` of the checkpoint to safetensors as a child process: its peak
//              RSS (wait4's ru_maxrss) next to the model's fp32 size (its largest tensor bounds
//              what a streaming export needs; the rest is the program itself)
// and prints each bandwidth per rank with its ratio to the raw figure (the target is >= 70%).
// The disk's rate drifts with the host's load (2x here), so each repeat measures the raw write
// and read, both saves (in alternating order) and the raw write and read again, back to back; the
// table shows the best of each, and a second list each repeat's saves against the mean of the
// two raw writes around them, and their median.
// Then: where rank 0's save went (the copy into the snapshot buffer, checksum, writes, fsync:
// TrainResult::saves), the checksums' own speed, and the training loop's stall at an
// asynchronous save next to the time of a synchronous one (runs of 4 steps saving every 2).
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

#include "bench/disk.h"
#include "bench/quiet_stdout.h"
#include "checkpoint/file_checksum.h"
#include "checkpoint/shard_files.h"
#include "runtime/file_system.h"
#include "runtime/logging.h"
#include "runtime/measured_limit.h"
#include "train/engine.h"

extern char** environ;

namespace {

namespace stdfs = std::filesystem;
using Clock = std::chrono::steady_clock;
using zs::bench::drop_from_page_cache;
using zs::bench::fail;
using zs::bench::kAlign;
using zs::bench::QuietStdout;
using zs::bench::raw_bandwidth;
using zs::bench::RawResult;

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
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::printf(
          "Usage: zs-bench-checkpoint [--layers 6] [--width 512] [--heads 8] [--vocab 4096]\n"
          "                           [--context 64] [--dir /tmp] [--repeats 2] [--zs-ckpt PATH]\n"
          "Sharded checkpoint save/load GB/s per rank next to the disk's raw bandwidth, where a\n"
          "save's time goes, export peak RSS, and the async save stall vs a sync save.\n");
      std::exit(0);
    }
  }
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

// ---- the checkpoint's ----

// Notes when the save's first file operation (rank 0 creating DIR) began and when its last
// directory fsync (after `latest` is replaced) ended: the save's wall time as the file layer sees
// it, whatever thread does the writing. In between, when the first rank file was created and
// when the last was renamed into place: what the save spends before, on and after the rank files.
// With `direct` false it also refuses O_DIRECT, as tmpfs does: the save then takes the rank file
// writer's page-cache path (checkpoint/rank_file_writer.h), for comparison.
class SaveClock final : public zs::FileSystemWrapper {
 public:
  explicit SaveClock(bool direct) : FileSystemWrapper(zs::posix_file_system()), direct_(direct) {}
  zs::File open_for_direct_write(const std::string& path) const override {
    return direct_ ? base().open_for_direct_write(path) : zs::File();
  }
  void make_directories(const std::string& path) const override {
    note(first_, Clock::now(), true);
    base().make_directories(path);
  }
  zs::File create(const std::string& path, bool exclusive) const override {
    if (path.find("/rank-") != std::string::npos) note(files_begin_, Clock::now(), true);
    return base().create(path, exclusive);
  }
  void rename(const std::string& from, const std::string& to) const override {
    base().rename(from, to);
    if (from.find("/rank-") != std::string::npos) note(files_end_, Clock::now(), false);
  }
  void sync_directory(const std::string& path) const override {
    base().sync_directory(path);
    note(last_, Clock::now(), false);
  }
  double seconds() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return seconds_between(first_, last_);
  }
  // Seconds before the first rank file, from its creation to the last one's rename, and after.
  struct Phases {
    double before = 0, files = 0, after = 0;
  };
  Phases phases() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return {seconds_between(first_, files_begin_), seconds_between(files_begin_, files_end_),
            seconds_between(files_end_, last_)};
  }

 private:
  void note(Clock::time_point& at, Clock::time_point now, bool earliest) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (at == Clock::time_point{} || (earliest ? now < at : now > at)) at = now;
  }
  const bool direct_;
  mutable std::mutex mutex_;
  mutable Clock::time_point first_{}, last_{}, files_begin_{}, files_end_{};
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
  zs::checkpoint::Checksum checksum;
};

std::vector<RankFile> rank_files(const std::string& step_dir) {
  std::ifstream in(step_dir + "/meta.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  std::vector<RankFile> files;
  for (const auto& f : meta.at("files")) {
    files.push_back({step_dir + "/" + f.at("name").get<std::string>(),
                     f.at("bytes").get<uint64_t>(),
                     zs::checkpoint::Checksum::parse(f.at("checksum").get<std::string>())});
  }
  return files;
}

// A checksum over `bytes` in memory, one thread: every byte of a save and of a load goes
// through it, so it bounds both whatever the disk does. GB/s, best of `repeats`.
double checksum_bandwidth(zs::checkpoint::ChecksumAlgorithm algorithm, size_t bytes, int repeats) {
  std::vector<uint8_t> buffer(bytes);
  for (size_t i = 0; i < bytes; ++i) buffer[i] = static_cast<uint8_t>(i * 131);
  double best = 0;
  uint64_t sink = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    sink ^= zs::checkpoint::FileChecksum::of(buffer.data(), buffer.size(), algorithm).value;
    best = std::max(best, static_cast<double>(bytes) / seconds_between(start, Clock::now()) / 1e9);
  }
  if (sink == 42) std::printf(" ");  // keeps the checksum from being optimized away
  return best;
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

// Runs zs-ckpt for the benchmark and reports its peak RSS. The child is started by a
// small process forked before the benchmark allocates anything: Linux carries the high-water RSS
// of the address space a process had before exec() into its ru_maxrss, and a child forked (or
// vforked) from this process, holding the model state, would inherit this process's.
class ExportRunner {
 public:
  ExportRunner() {
    int to_child[2], from_child[2];
    if (::pipe(to_child) != 0 || ::pipe(from_child) != 0) fail("pipe", "");
    pid_ = ::fork();
    if (pid_ < 0) fail("fork", "");
    if (pid_ == 0) {
      ::close(to_child[1]);
      ::close(from_child[0]);
      serve(to_child[0], from_child[1]);
      ::_exit(0);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    requests_ = to_child[1];
    replies_ = from_child[0];
  }
  ~ExportRunner() {
    ::close(requests_);
    ::close(replies_);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  ExportRunner(const ExportRunner&) = delete;
  ExportRunner& operator=(const ExportRunner&) = delete;

  // Runs `args` (args[0] the program's path) with stdout to /dev/null; its peak RSS in bytes,
  // or -1 when it could not run or did not exit with 0.
  double peak_rss(const std::vector<std::string>& args) {
    std::string request;
    for (const std::string& arg : args) request += arg + "\n";
    request += "\n";
    if (::write(requests_, request.data(), request.size()) !=
        static_cast<ssize_t>(request.size())) {
      fail("write to the export runner", "");
    }
    char reply[64] = {};
    if (::read(replies_, reply, sizeof(reply) - 1) <= 0) fail("read from the export runner", "");
    return std::atof(reply);
  }

 private:
  // One line without its newline; `end` when the pipe closed before any byte.
  static std::string read_line(int fd, bool* end) {
    std::string line;
    char c = 0;
    *end = true;
    while (::read(fd, &c, 1) == 1) {
      *end = false;
      if (c == '\n') break;
      line += c;
    }
    return line;
  }

  // The child: requests are arguments one per line, closed by an empty line.
  static void serve(int requests, int replies) {
    for (;;) {
      std::vector<std::string> args;
      bool end = false;
      for (std::string arg = read_line(requests, &end); !arg.empty();
           arg = read_line(requests, &end)) {
        args.push_back(arg);
      }
      if (end || args.empty()) return;
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      posix_spawn_file_actions_t actions;
      posix_spawn_file_actions_init(&actions);
      posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
      pid_t pid = 0;
      double rss = -1;
      const int spawned =
          posix_spawn(&pid, args[0].c_str(), &actions, nullptr, argv.data(), environ);
      posix_spawn_file_actions_destroy(&actions);
      if (spawned == 0) {
        int status = 0;
        rusage usage{};
        ::wait4(pid, &status, 0, &usage);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
          rss = static_cast<double>(usage.ru_maxrss) * 1024.0;  // Linux: KiB
        }
      } else {
        std::fprintf(stderr, "zs-bench-checkpoint: cannot run %s: %s (pass --zs-ckpt PATH)\n",
                     args[0].c_str(), std::strerror(spawned));
      }
      const std::string reply = std::to_string(rss) + "\n";
      if (::write(replies, reply.data(), reply.size()) < 0) return;
    }
  }

  pid_t pid_ = -1;
  int requests_ = -1;
  int replies_ = -1;
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  ExportRunner exporter;  // first: forked while this process is still small
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
  // What zs-ckpt holds before it reads anything (its shared libraries' pages count too).
  const double baseline_rss = exporter.peak_rss({o.zs_ckpt, "--help"});
  // Per ranks: rank 0's part of the fastest save (the run's only save, waited for at its end).
  std::vector<std::pair<int, zs::train::SaveRecord>> breakdowns;
  std::vector<SaveClock::Phases> save_phases;  // of the same saves, as the file layer saw them
  // Per ranks: each repeat's save and page-cache save against the raw write measured between
  // them, in percent (the disk's rate drifts with the host's load; a pair taken back to back
  // does not see that).
  std::vector<std::pair<int, std::vector<double>>> pair_ratios, page_pair_ratios;
  for (int ranks : {1, 2}) {
    const std::string checkpoints = work + "/ckpt-" + std::to_string(ranks);
    double save_gbs = 0, page_gbs = 0, load_gbs = 0;
    RawResult raw;
    raw.direct = true;
    std::vector<RankFile> files;
    int64_t parameters = 0;
    zs::train::SaveRecord breakdown;
    SaveClock::Phases phases;
    double best_direct = 0;
    // One save of the run's final checkpoint, as the file layer's clock sees it: GB/s per rank.
    const auto save = [&](bool direct_path) {
      stdfs::remove_all(checkpoints);
      SaveClock clock(direct_path);
      zs::train::TrainConfig c = one_step_run(o, corpus, ranks, checkpoints);
      c.file_system = &clock;
      // Synchronous: the clock then spans the save alone. An asynchronous final save is waited
      // for only after the end-of-run evaluation, which the clock would count too.
      c.checkpoint_async = false;
      zs::train::TrainResult result;
      {
        QuietStdout quiet;
        // The page-cache save's warning that O_DIRECT was refused (on purpose here) is not news.
        zs::logger().set_level(direct_path ? spdlog::level::warn : spdlog::level::err);
        result = zs::train::run_training(c);
        zs::logger().set_level(spdlog::level::warn);
      }
      parameters = result.parameters;
      files = rank_files(checkpoints + "/step-000001");
      const double gbs = static_cast<double>(files.front().bytes) / clock.seconds() / 1e9;
      if (direct_path && gbs > best_direct && !result.saves.empty()) {
        best_direct = gbs;
        breakdown = result.saves.front();
        phases = clock.phases();
      }
      return gbs;
    };
    std::vector<double> ratios, page_ratios;
    save(true);  // a first run, not counted: the rank file's size, and everything warmed up
    const auto measure_raw = [&] {
      const RawResult now = raw_bandwidth(work, ranks, files.front().bytes, 1);
      raw.write_gbs = std::max(raw.write_gbs, now.write_gbs);
      raw.read_gbs = std::max(raw.read_gbs, now.read_gbs);
      raw.direct = raw.direct && now.direct;
      return now.write_gbs;
    };
    for (int r = 0; r < o.repeats; ++r) {
      // The raw write, both saves, the raw write again; which save goes first alternates, and
      // each is set against the mean of the two raw writes around them.
      const double raw_before = measure_raw();
      double gbs = 0, page = 0;
      for (const bool direct_path : {r % 2 == 0, r % 2 != 0}) {
        (direct_path ? gbs : page) = save(direct_path);
        if (direct_path) load_gbs = std::max(load_gbs, load_bandwidth(files));
      }
      const double raw_around = (raw_before + measure_raw()) / 2;
      save_gbs = std::max(save_gbs, gbs);
      page_gbs = std::max(page_gbs, page);
      ratios.push_back(gbs / raw_around);
      page_ratios.push_back(page / raw_around);
    }
    breakdowns.emplace_back(ranks, breakdown);
    save_phases.push_back(phases);
    pair_ratios.emplace_back(ranks, ratios);
    page_pair_ratios.emplace_back(ranks, page_ratios);
    // A save or load faster than the raw disk means the raw rate was measured low (the disk was
    // busy then): measured again, and the ratio is "—" if it still reads low
    // (runtime/measured_limit.h).
    raw.write_gbs = zs::remeasured_limit(raw.write_gbs, save_gbs, measure_raw);
    raw.read_gbs = zs::remeasured_limit(raw.read_gbs, load_gbs, [&] {
      measure_raw();
      return raw.read_gbs;
    });
    direct = direct && raw.direct;
    const double rss = exporter.peak_rss({o.zs_ckpt, "export", checkpoints + "/step-000001",
                                          work + "/export.safetensors", "--dtype", "f32"});
    const double state_mb = static_cast<double>(files.front().bytes) * ranks / 1e6;
    std::printf("%5d %10.1f %10.1f | %9.3f %9.3f %6s | %9.3f %9.3f %6s | %6.0f MB %9.1f\n",
                ranks, state_mb, static_cast<double>(files.front().bytes) / 1e6, raw.write_gbs,
                save_gbs, zs::percent_of_limit(save_gbs, raw.write_gbs, "%.0f%%").c_str(),
                raw.read_gbs, load_gbs,
                zs::percent_of_limit(load_gbs, raw.read_gbs, "%.0f%%").c_str(), rss / 1e6,
                static_cast<double>(parameters) * 4 / 1e6);
    // The page cache is not bounded by the disk: this ratio may pass 100% and is a comparison.
    std::printf("%5s %21s | %9s %9.3f %5.0f%% | the save through the page cache\n", "", "", "",
                page_gbs, 100 * page_gbs / raw.write_gbs);
    stdfs::remove_all(checkpoints);
    stdfs::remove(work + "/export.safetensors");
  }
  // The same ratios pair by pair, and their median.
  // A save's ratio above 1 (the raw writes around it read low) is shown as "—"; the page
  // cache's may pass 1 (`bounded` false).
  const auto print_pairs = [](const char* what, int ranks, std::vector<double> ratios,
                              bool bounded) {
    const auto shown = [&](double ratio) {
      return bounded ? zs::percent_of_limit(ratio, 1.0, "%.0f%%")
                     : std::to_string(static_cast<int>(100 * ratio + 0.5)) + "%";
    };
    std::printf("  %d rank%s, %s:", ranks, ranks == 1 ? " " : "s", what);
    for (double ratio : ratios) std::printf(" %5s", shown(ratio).c_str());
    std::sort(ratios.begin(), ratios.end());
    const size_t n = ratios.size();
    std::printf("   median %4s\n",
                shown(n % 2 ? ratios[n / 2] : (ratios[n / 2 - 1] + ratios[n / 2]) / 2).c_str());
  };
  std::printf(
      "each repeat's save against the mean of the raw writes just before and after it (raw, "
      "save, page-cache save, raw; the saves' order alternates):\n");
  for (size_t i = 0; i < pair_ratios.size(); ++i) {
    print_pairs("save      ", pair_ratios[i].first, pair_ratios[i].second, true);
    print_pairs("page cache", page_pair_ratios[i].first, page_pair_ratios[i].second, false);
  }
  std::printf(
      "export peak RSS includes zs-ckpt's own %.0f MB (its peak RSS for --help: the "
      "program and its shared libraries)\n",
      baseline_rss / 1e6);
  std::printf(
      "checksums (every saved and loaded byte, one thread per rank): xxh3 %.3f GB/s (new "
      "checkpoints), fnv1a64 %.3f GB/s (older ones)\n",
      checksum_bandwidth(zs::checkpoint::ChecksumAlgorithm::kXxh3, 64 << 20, o.repeats),
      checksum_bandwidth(zs::checkpoint::ChecksumAlgorithm::kFnv1a64, 64 << 20, o.repeats));
  std::printf("raw I/O: %s\n", direct
                                   ? "O_DIRECT, 4 KiB-aligned 8 MiB requests, 4 in flight per file"
                                   : "buffered + fsync, page cache dropped before reads "
                                     "(this filesystem refuses O_DIRECT)");
  std::printf("save: %s\n",
              direct ? "the rank file's body O_DIRECT, 8 MiB pieces one at a time; its tail under "
                       "4 KiB through the page cache"
                     : "through the page cache (this filesystem refuses O_DIRECT)");
  // Where the fastest save's time went, rank 0 (RankFileWriter::Written through SaveRecord).
  std::printf(
      "\nthe fastest save, seconds: rank 0's write — the copy into the buffer (the rank's "
      "thread) | on the writer thread: checksum, write (the disk thread's write calls, "
      "overlapping the checksum), commit (fsync, rename, dir fsync) | the whole write || the "
      "save as the file layer saw it: before the first rank file, the rank files, after the "
      "last (meta.json, renames, `latest`)\n");
  std::printf("%5s %9s | %9s %9s %9s | %9s || %9s %9s %9s\n", "ranks", "copy", "checksum", "write",
              "commit", "write", "before", "files", "after");
  for (size_t i = 0; i < breakdowns.size(); ++i) {
    const zs::train::SaveRecord& b = breakdowns[i].second;
    const SaveClock::Phases& p = save_phases[i];
    std::printf("%5d %9.3f | %9.3f %9.3f %9.3f | %9.3f || %9.3f %9.3f %9.3f\n", breakdowns[i].first,
                b.copy_seconds, b.checksum_seconds, b.file_write_seconds, b.commit_seconds,
                b.write_seconds, p.before, p.files, p.after);
  }
  // The training loop's stall at an asynchronous save next to a synchronous save's time: runs of
  // kStallSteps steps with a checkpoint every 2 (a save in the middle and one at the end); the
  // middle one's stall, whose write overlaps the steps after it (the end-of-run save waits for
  // its write either way). Best of --repeats.
  constexpr int64_t kStallSteps = 4;
  std::printf(
      "\nasync save stall vs sync save: %lld steps, a checkpoint every 2; the step-2 "
      "save as the loop saw it (zs-train's log line: training stalled X s), best of %d\n",
      static_cast<long long>(kStallSteps), o.repeats);
  std::printf("%5s %9s | %11s | %11s %9s | %6s\n", "ranks", "step s", "sync save s", "async stall",
              "write s", "ratio");
  for (int ranks : {1, 2}) {
    double stall[2] = {1e30, 1e30}, write = 1e30, step = 1e30;  // [async, sync]
    for (int r = 0; r < o.repeats; ++r) {
      for (const bool async : {true, false}) {
        const std::string checkpoints = work + "/stall-" + std::to_string(ranks);
        stdfs::remove_all(checkpoints);
        zs::train::TrainConfig c = one_step_run(o, corpus, ranks, checkpoints);
        c.steps = kStallSteps;
        c.checkpoint_interval = 2;
        c.checkpoint_async = async;
        zs::train::TrainResult result;
        {
          QuietStdout quiet;
          result = zs::train::run_training(c);
        }
        stdfs::remove_all(checkpoints);
        if (result.saves.empty() || result.saves.front().step != 2) {
          std::fprintf(stderr, "zs-bench-checkpoint: the run recorded no save of step 2\n");
          return 1;
        }
        const zs::train::SaveRecord& save = result.saves.front();
        stall[async ? 0 : 1] = std::min(stall[async ? 0 : 1], save.stall_seconds);
        if (async) write = std::min(write, save.write_seconds);
        for (const zs::train::StepRecord& s : result.steps) step = std::min(step, s.ms / 1e3);
      }
    }
    std::printf("%5d %9.3f | %11.3f | %11.3f %9.3f | %5.0f%%\n", ranks, step, stall[1], stall[0],
                write, 100 * stall[0] / stall[1]);
  }
  stdfs::remove_all(work);
  return 0;
}
