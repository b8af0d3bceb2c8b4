// The disk's own bandwidth, for the benches that quote their I/O against it (zs-bench-checkpoint,
// zs-bench-offload): O_DIRECT sequential writes and reads of 4 KiB-aligned 8 MiB requests, a few
// in flight per file, fsync after the writes (buffered + fsync + fadvise(DONTNEED) where the
// filesystem refuses O_DIRECT; RawResult::direct says which). Exits the program on an error.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace zs::bench {

constexpr size_t kAlign = 4096;
constexpr size_t kChunk = 8 << 20;

struct RawResult {
  double write_gbs = 0;  // per stream
  double read_gbs = 0;
  bool direct = true;
};

inline void fail(const char* call, const std::string& path) {
  std::fprintf(stderr, "zs-bench: %s %s: %s\n", call, path.c_str(), std::strerror(errno));
  std::exit(1);
}

inline void drop_from_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("open", path);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Requests in flight per file: one synchronous O_DIRECT request at a time leaves the device idle
// between requests, where the page cache's readahead (what the checkpoint load gets) keeps
// several going; the raw figures are meant to be the device's limit.
constexpr size_t kQueueDepth = 4;

// Every kQueueDepth-th chunk of [0, bytes) from `first`, with `io(offset, length)`.
template <typename Io>
void for_each_chunk(size_t bytes, size_t first, Io&& io) {
  for (size_t offset = first * kChunk; offset < bytes; offset += kQueueDepth * kChunk) {
    io(offset, std::min(kChunk, (bytes - offset + kAlign - 1) / kAlign * kAlign));
  }
}

// Writes `bytes` (rounded up to the alignment) into `path`, kQueueDepth requests in flight, and
// fsyncs; O_DIRECT when `direct`.
inline void raw_write(const std::string& path, size_t bytes, bool direct, const char* buffer) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0644);
  if (fd < 0) fail("open", path);
  std::vector<std::thread> queue;
  for (size_t q = 0; q < kQueueDepth; ++q) {
    queue.emplace_back([&, q] {
      for_each_chunk(bytes, q, [&](size_t offset, size_t length) {
        if (::pwrite(fd, buffer, length, static_cast<off_t>(offset)) !=
            static_cast<ssize_t>(length)) {
          fail("write", path);
        }
      });
    });
  }
  for (auto& t : queue) t.join();
  if (::fsync(fd) != 0) fail("fsync", path);
  ::close(fd);
}

inline void raw_read(const std::string& path, size_t bytes, bool direct, char* buffers) {
  if (!direct) drop_from_page_cache(path);
  const int fd = ::open(path.c_str(), O_RDONLY | (direct ? O_DIRECT : 0));
  if (fd < 0) fail("open", path);
  std::vector<std::thread> queue;
  for (size_t q = 0; q < kQueueDepth; ++q) {
    queue.emplace_back([&, q] {
      for_each_chunk(bytes, q, [&](size_t offset, size_t length) {
        if (::pread(fd, buffers + q * kChunk, length, static_cast<off_t>(offset)) < 0) {
          fail("read", path);
        }
      });
    });
  }
  for (auto& t : queue) t.join();
  ::close(fd);
}

// Does this filesystem take O_DIRECT (tmpfs and some overlays refuse it with EINVAL)?
inline bool direct_io_works(const std::string& dir) {
  const std::string probe = dir + "/direct-probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  return fd >= 0;
}

// `streams` files of `bytes` each, written (and then read) concurrently.
inline RawResult raw_bandwidth(const std::string& dir, int streams, size_t bytes, int repeats) {
  RawResult result;
  result.direct = direct_io_works(dir);
  std::vector<char*> buffers;
  for (int s = 0; s < streams; ++s) {
    // One chunk per request in flight: the reads land in their own; the writes share chunk 0.
    char* b = static_cast<char*>(std::aligned_alloc(kAlign, kQueueDepth * kChunk));
    for (size_t i = 0; i < kQueueDepth * kChunk; ++i) b[i] = static_cast<char>(i * 131 + s);
    buffers.push_back(b);
  }
  auto file = [&](int s) { return dir + "/raw-" + std::to_string(s) + ".bin"; };
  for (int r = 0; r < repeats; ++r) {
    auto run = [&](auto&& body) {
      std::vector<std::thread> threads;
      const auto start = std::chrono::steady_clock::now();
      for (int s = 0; s < streams; ++s) threads.emplace_back([&, s] { body(s); });
      for (auto& t : threads) t.join();
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      return static_cast<double>(bytes) / took.count() / 1e9;
    };
    result.write_gbs =
        std::max(result.write_gbs,
                 run([&](int s) { raw_write(file(s), bytes, result.direct, buffers[s]); }));
    result.read_gbs = std::max(
        result.read_gbs, run([&](int s) { raw_read(file(s), bytes, result.direct, buffers[s]); }));
  }
  for (int s = 0; s < streams; ++s) {
    ::unlink(file(s).c_str());
    std::free(buffers[s]);
  }
  return result;
}

}  // namespace zs::bench
