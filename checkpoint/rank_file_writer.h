// Writes rank files (checkpoint/shard_files.h) through a bounded host buffer on a thread of its
// own, so that a save stalls the training loop only while the rank's tensors are copied out.
//
// snapshot() runs on the rank's thread at the save point: it copies the file's tensors into a
// ring buffer of at most `buffer_bytes` and returns once the last byte is copied; from then on
// the tensors may change (the next optimizer step) and the file holds their values at the save
// point. The writer thread writes what is copied to the file as it arrives (computing the
// checksum on the way), then fsyncs and renames it into place (detail::AtomicFileWriter). A file
// larger than the buffer streams through it: the copy waits for the writer to free space, so
// the stall is then about the time to write all but the last buffer's worth. Sync and async
// saves are both this: a synchronous save waits for the write right after the snapshot.
//
// The write path. The file's body (its bytes up to the last whole 4 KiB block) goes to the disk
// with O_DIRECT, straight from the ring buffer, in pieces of up to 8 MiB: the page cache, where a
// buffered write's bytes would be copied and then trickle out, is skipped, and the disk sees the
// requests whose rate bench/disk.h measures as raw. A disk thread (one per file, joined before
// the write ends) writes the pieces back to back while the writer checksums the next ones and
// the copy fills the ring; in order and one at a time, because they extend the file: filesystems
// serialize such writes anyway, and several in flight would fragment the file. The tail shorter
// than a block, and the rest of a direct write cut short at an unaligned byte, go through the
// temporary file's ordinary descriptor; then one fsync, the rename and the directory fsync, as
// for any AtomicFileWriter. The bytes and the file format are the same either way. Where the
// filesystem refuses O_DIRECT (EINVAL: tmpfs before Linux 6.6, some overlays), or the buffer is
// under one 4 KiB block, the file is written through the page cache instead, and the log says so
// once per writer. Every write goes through the FileSystem, so the fault wrapper
// (runtime/fault_file_system.h) reaches both paths.
//
// The buffer is allocated by reserve() ahead of the saves, or else at the first snapshot, and
// kept for the next ones (a fresh allocation faults its pages in during the copy, on the stall:
// reserve() touches them before any save). It holds the whole file, 4 KiB-aligned, where
// `buffer_bytes` allows; otherwise as many whole pieces as fit in `buffer_bytes`, so that a piece
// never wraps around the ring's end.
// It is host memory and is not charged to a MemoryTracker: the trackers account one device's
// categories and have no host tier.
//
// Ownership and threads: the object owns its thread (started in the constructor, joined in the
// destructor), the buffer, and the disk thread of a direct write. snapshot(), finished() and
// wait() are called from one thread (the rank's). A write's error (open, write, fsync, rename),
// on the writer thread or its disk thread, is captured and rethrown by wait(); it is never lost.
// Destroyed with a write unfinished, the writer abandons it once the write in flight is over: the
// temporary file is removed and nothing appears under the file's name.
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
#include "runtime/file_io.h"
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
    // file layer's write calls: the direct path's on its disk thread, which run while the writer
    // checksums the pieces after them; the page cache's on the writer thread) and commit (fsync,
    // rename, directory fsync); the rest of `seconds` is the writer waiting for the copy, or on
    // the direct path for the disk.
    double copy_seconds = 0;
    double checksum_seconds = 0;
    double write_seconds = 0;
    double commit_seconds = 0;
    // Whether the file's body went out with O_DIRECT (false: through the page cache).
    bool direct = false;
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
  // Its two paths: the body with O_DIRECT through `direct` (the temporary file opened again), or
  // the whole file through the page cache. Both checksum into `checksum` and add their time to
  // `*checksum_seconds` and `*write_seconds`.
  void write_direct(detail::AtomicFileWriter& file, File& direct, uint64_t bytes,
                    FileChecksum& checksum, double* checksum_seconds, double* write_seconds);
  void write_buffered(detail::AtomicFileWriter& file, uint64_t bytes, FileChecksum& checksum,
                      double* checksum_seconds, double* write_seconds);
  // Waits until the copy has reached byte `end` of the file (true), or the direct path's disk
  // thread has failed (false); throws IoError naming `path` when the write is abandoned
  // meanwhile (a failed copy, the writer destroyed).
  bool await_copied(const std::string& path, uint64_t end);
  // Frees the buffer up to byte `end` of the file for the copy.
  void release(uint64_t end);
  // The buffer's byte that holds byte `offset` of the file.
  uint8_t* ring(uint64_t offset) const { return buffer_.get() + offset % capacity_; }

  struct FreeDeleter {
    void operator()(uint8_t* p) const;
  };

  const size_t bound_;
  const FileSystem& fs_;
  // The largest O_DIRECT write: kDirectIoAlignment to 8 MiB, a quarter of the bound at most, so
  // that a ring smaller than the file holds the piece being written and the next ones. 0 where
  // the bound is under one block (no O_DIRECT).
  const uint64_t piece_;
  std::unique_ptr<uint8_t, FreeDeleter> buffer_;  // aligned to kDirectIoAlignment
  size_t capacity_ = 0;  // bytes of buffer_ in use: a multiple of 4 (of piece_ where it wraps)
  bool told_buffered_ = false;  // the log said the files go through the page cache (writer thread)

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
  // The direct path: bytes checksummed (the disk thread writes no further), whether the disk
  // thread stopped on an error, and whether the writer told it to stop.
  uint64_t checksummed_ = 0;
  bool disk_failed_ = false;
  bool disk_quit_ = false;
  bool over_ = false;
  std::exception_ptr error_;
  Written result_;  // of the current write, filled in as it goes
  std::chrono::steady_clock::time_point started_;

  std::thread thread_;  // started by the constructor once every member above is ready
};

}  // namespace zs::checkpoint
