// Writes rank files (checkpoint/shard_files.h) through a bounded host buffer on a thread of its
// own, so that a save stalls the training loop only while the rank's tensors are copied out.
//
// snapshot() runs on the rank's thread at the save point: it copies the file's tensors into a
// ring buffer of at most `buffer_bytes` and returns once the last byte is copied; from then on
// the tensors may change (the next optimizer step) and the file holds their values at the save
// point. The writer thread appends what is copied to the file as it arrives (computing the
// checksum on the way), then fsyncs and renames it into place (detail::AtomicFileWriter). A file
// larger than the buffer streams through it: the copy waits for the writer to free space, so
// the stall is then about the time to write all but the last buffer's worth. Sync and async
// saves are both this: a synchronous save waits for the write right after the snapshot.
//
// The buffer is allocated with min(buffer_bytes, file bytes) by reserve() ahead of the saves, or
// else at the first snapshot, and kept for the next ones (a fresh allocation faults its pages in
// during the copy, on the stall: reserve() touches them before any save).
// It is host memory and is not charged to a MemoryTracker: the trackers account one device's
// categories and have no host tier.
//
// Ownership and threads: the object owns its thread (started in the constructor, joined in the
// destructor) and the buffer. snapshot(), finished() and wait() are called from one thread (the
// rank's). A write's error (open, write, fsync, rename) is captured on the writer thread and
// rethrown by wait(); it is never lost. Destroyed with a write unfinished, the writer abandons
// it: the temporary file is removed and nothing appears under the file's name.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/file_checksum.h"
#include "runtime/file_system.h"
#include "runtime/tensor.h"

namespace zs::checkpoint {

// A file's tensors handed out one at a time: the source calls the visitor with each (fp32, in
// file order); a tensor is valid during its call only (paged optimizer state is brought in one
// view at a time: shard_files.h for_each_rank_file_tensor).
using TensorVisitor = std::function<void(const Tensor&)>;
using TensorSource = std::function<void(const TensorVisitor&)>;

class RankFileWriter {
 public:
  // `buffer_bytes`: the most host memory a snapshot holds (at least 4: one fp32 value).
  // Files are written through `fs` (runtime/file_system.h), which must outlive the writer.
  explicit RankFileWriter(size_t buffer_bytes, const FileSystem& fs = posix_file_system());
  ~RankFileWriter();
  RankFileWriter(const RankFileWriter&) = delete;
  RankFileWriter& operator=(const RankFileWriter&) = delete;

  // Allocates the buffer for files of `file_bytes` now and touches its pages, so that no
  // snapshot pays for that. Optional; not during a write.
  void reserve(uint64_t file_bytes);
  // Starts writing `tensors` (fp32, in order) as the file `path` and returns when all of them
  // are copied into the buffer. The previous write must have been waited for. When the write
  // fails meanwhile, the copy stops early; wait() throws the error. An error of the copy itself
  // is thrown here (the write is abandoned).
  void snapshot(const std::string& path, const std::vector<Tensor>& tensors);
  // The same for tensors from a source, `bytes` in all (checked against what it hands out).
  void snapshot(const std::string& path, uint64_t bytes, const TensorSource& tensors);
  // Whether the current write is over (committed or failed), without waiting.
  bool finished() const;
  struct Written {
    Checksum checksum;   // of the whole file, with kSavedChecksum (checkpoint/file_checksum.h)
    double seconds = 0;  // from snapshot() to the file under its name, fsynced
    // Where the time went. copy: snapshot() itself (the copy into the buffer, and waiting for
    // space when the file is larger than the buffer). On the writer thread: checksum, write (the
    // file layer's write calls: into the page cache) and commit (fsync, rename, directory fsync);
    // the rest of `seconds` is the writer waiting for the copy.
    double copy_seconds = 0;
    double checksum_seconds = 0;
    double write_seconds = 0;
    double commit_seconds = 0;
  };
  // Waits for the current write and returns what it wrote; rethrows its error.
  Written wait();

 private:
  void run();
  // Makes the buffer hold min(bound_, file_bytes) (whole fp32 values); whether it was
  // reallocated. Under mutex_, with no write under way.
  bool grow_buffer(uint64_t file_bytes);
  // The write of one file from the buffer (the writer thread's part of a snapshot).
  void write_file(const std::string& path, uint64_t bytes);

  const size_t bound_;
  const FileSystem& fs_;
  std::unique_ptr<uint8_t[]> buffer_;
  size_t capacity_ = 0;  // bytes of buffer_, a multiple of 4

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  // The current write: path and size, bytes copied in and written out (monotonic; the ring
  // position is their value modulo capacity_), and how it ended.
  bool job_ = false;
  bool busy_ = false;  // job_ taken by the writer thread and not over
  bool cancel_ = false;
  bool stop_ = false;
  std::string path_;
  uint64_t bytes_ = 0;
  uint64_t copied_ = 0;
  uint64_t written_ = 0;
  bool over_ = false;
  std::exception_ptr error_;
  Written result_;  // of the current write, filled in as it goes
  std::chrono::steady_clock::time_point started_;

  std::thread thread_;  // started by the constructor once every member above is ready
};

}  // namespace zs::checkpoint
