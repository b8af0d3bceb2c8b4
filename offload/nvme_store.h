// NvmeStore: the NVMe tier of one rank (ZeRO-Infinity's swap space) — a byte address space
// striped over swap files, one per directory given (several directories on several drives act
// as a RAID 0 without RAID), read and written asynchronously in large aligned requests.
//
// Files. `<dir>/<name>.swap` in every directory of NvmeStoreOptions::paths, created with O_DIRECT
// (no page cache: the host memory the tier exists to save is not spent twice, and the disk's rate
// is what is measured) and preallocated with fallocate to their share of the capacity, so that a
// full disk, a missing directory or a filesystem without O_DIRECT is an error at construction —
// before training starts — and never in the middle of a step. The files are scratch: the
// destructor removes them (checkpoints save the state, wherever the tier keeps it).
//
// Layout. The store's offsets [0, capacity) are cut into stripes of `stripe_bytes`; stripe s
// lives in file s % files at byte (s / files) · stripe_bytes. reserve() hands out aligned
// regions of that space (a bump allocator: the optimizer's state has a fixed size).
//
// I/O. read() and write() queue a request and return at once; wait() blocks until it is done and
// throws its first error. A request is split at stripe boundaries into chunks of at most
// `stripe_bytes`, and one I/O thread keeps up to `queue_depth` chunks in flight. Engines:
//   - io_uring (liburing, when the build found it and the kernel allows it): the thread submits
//     chunks in batches and reaps completions; every chunk first passes FileSystem::admit_io, so
//     the fault wrapper (runtime/fault_file_system.h) reaches this I/O too;
//   - blocking: pread_some / pwrite_some through the FileSystem on the I/O thread, one chunk at
//     a time — where io_uring is missing or refused (the log says which engine runs).
// Buffers must be aligned to kAlignment and lengths multiples of it (O_DIRECT's rule, checked with
// an InvalidArgument that says so).
//
// Errors. Every failure is an IoError naming the call, the file, the byte offset in it and
// errno's text, with what to do (runtime/file_system.h throw_file_error) — never an assert. A
// read that finds the file shorter than what was written (truncated under the run) is one too.
// A failed chunk fails its request only; the store stays usable.
//
// Ownership: the store owns its files and its I/O thread; buffers given to read/write must stay
// alive and untouched until the request's wait() returns. If the engine itself fails (not one
// request's I/O), the store waits for the kernel to finish the requests it holds, fails them and
// every later request with that error. The FileSystem must outlive the store.
// Thread-safety: reserve, read, write and wait may be called from any thread; a request is waited
// for once.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/file_system.h"

namespace zs::offload {

struct NvmeStoreOptions {
  // Directories of the swap files (zs-train --nvme-path, repeated to stripe over several drives).
  std::vector<std::string> paths;
  // The files' name without ".swap": unique per rank and tier ("rank-00003-optimizer").
  std::string name = "zs";
  // Bytes the store holds (rounded up to whole stripes per file); preallocated.
  uint64_t capacity = 0;
  // The stripe unit and the largest request sent to the disk: a multiple of kAlignment.
  uint64_t stripe_bytes = uint64_t{1} << 20;
  // Chunks in flight at once (io_uring's queue depth).
  int queue_depth = 32;
  // O_DIRECT (true) or through the page cache (false: filesystems without O_DIRECT, tests).
  bool direct = true;
  // "auto" (io_uring where it works, else blocking), "io_uring" (an error where it does not
  // work) or "blocking".
  std::string engine = "auto";
};

// Bytes moved and the time the I/O thread had requests in flight, since construction.
struct NvmeStoreStats {
  uint64_t bytes_written = 0;
  uint64_t bytes_read = 0;
  double busy_seconds = 0.0;
};

namespace detail {
struct NvmeRequest;
struct NvmeChunk;
class NvmeEngine;
}  // namespace detail

class NvmeStore {
 public:
  // O_DIRECT's alignment of buffers, offsets and lengths (a 4 KiB logical block covers every
  // common drive).
  static constexpr uint64_t kAlignment = 4096;

  // A queued read or write; wait for it with wait().
  class Io {
   public:
    Io() = default;
    bool valid() const { return request_ != nullptr; }

   private:
    friend class NvmeStore;
    explicit Io(std::shared_ptr<detail::NvmeRequest> request) : request_(std::move(request)) {}
    std::shared_ptr<detail::NvmeRequest> request_;
  };

  // Creates and preallocates the files (IoError: a missing or read-only directory, no O_DIRECT,
  // a full disk) and starts the I/O thread. InvalidArgument for options out of range.
  explicit NvmeStore(const NvmeStoreOptions& options,
                     const FileSystem& file_system = posix_file_system());
  // Waits for the requests in flight, stops the thread and removes the files (errors logged).
  ~NvmeStore();
  NvmeStore(const NvmeStore&) = delete;
  NvmeStore& operator=(const NvmeStore&) = delete;

  // Whether this build and kernel can run the io_uring engine; if not, `why` says why.
  static bool io_uring_supported(std::string* why = nullptr);

  uint64_t capacity() const { return capacity_; }
  // The bytes reserve() has handed out.
  uint64_t reserved() const;
  // "io_uring" or "blocking".
  const char* engine_name() const;
  // The swap files, in stripe order.
  std::vector<std::string> file_paths() const;

  // A region of `bytes` (rounded up to kAlignment) of the store; returns its offset. Throws
  // OutOfMemory naming the store and its capacity when it does not fit.
  uint64_t reserve(uint64_t bytes);

  // Queues a write of `bytes` from `data` to the store's `offset` / a read into `data`. `data`
  // aligned to kAlignment, `offset` and `bytes` multiples of it, [offset, offset + bytes) inside
  // the capacity (InvalidArgument otherwise).
  Io write(uint64_t offset, const void* data, uint64_t bytes);
  Io read(uint64_t offset, void* data, uint64_t bytes);
  // Blocks until the request is done; throws its first IoError. An invalid Io returns at once.
  void wait(Io& io);
  // Whether the request is over (done or failed) without waiting; an invalid Io is.
  bool done(const Io& io) const;

  NvmeStoreStats stats() const;

 private:
  using Chunk = detail::NvmeChunk;
  friend class detail::NvmeEngine;
  Io submit(bool is_write, uint64_t offset, void* data, uint64_t bytes);
  void start_engine();
  void run();  // the I/O thread
  // Called by the engine on the I/O thread when a chunk ends: `error` null on success.
  void finish_chunk(Chunk* chunk, std::exception_ptr error);

  NvmeStoreOptions options_;
  const FileSystem& file_system_;
  std::vector<File> files_;
  uint64_t capacity_ = 0;
  uint64_t per_file_ = 0;

  mutable std::mutex mutex_;
  std::condition_variable work_ready_;  // the I/O thread: chunks queued, or stop
  std::condition_variable io_done_;     // waiters: a request finished
  std::deque<std::unique_ptr<Chunk>> queued_;
  int in_flight_ = 0;
  bool stopping_ = false;
  std::exception_ptr broken_;  // the engine's own failure: every request fails with it
  uint64_t next_free_ = 0;
  NvmeStoreStats stats_;

  std::unique_ptr<detail::NvmeEngine> engine_;
  std::thread thread_;
};

}  // namespace zs::offload
