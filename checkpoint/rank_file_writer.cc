// RankFileWriter (checkpoint/rank_file_writer.h): the ring buffer between the rank's copy and the
// writer thread, and the writer's two paths to the disk. The rank's thread fills
// [written_, copied_ + free) and the writer thread drains [written_, copied_), each outside the
// lock on a region the other does not touch; the counters move under the lock and every move is
// announced on `changed_`. On the direct path the writer hands a piece to a write in flight and
// moves written_ past it only once that write is over, so the copy never overwrites bytes the
// kernel may still be reading.
#include "checkpoint/rank_file_writer.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "checkpoint/shard_files.h"
#include "runtime/clock.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace zs::checkpoint {
namespace {

using Clock = SteadyClock;

// The page-cache path's most the writer checksums and then writes at once: small enough that the
// write's read of the piece finds it in the cache the checksum pass brought it into, large enough
// that a call costs nothing next to its bytes.
constexpr uint64_t kWritePiece = uint64_t{4} << 20;
// The direct path's largest request, as bench/disk.h's raw write: large enough that the disk
// streams at its full rate one request at a time.
constexpr uint64_t kDirectPiece = uint64_t{8} << 20;
// Pieces are at most a quarter of the ring, so that the copy fills the next ones while one is
// written.
constexpr uint64_t kPiecesPerRing = 4;

uint64_t round_down(uint64_t value, uint64_t unit) { return value / unit * unit; }
uint64_t round_up(uint64_t value, uint64_t unit) { return (value + unit - 1) / unit * unit; }

uint64_t direct_piece(size_t bound) {
  if (bound < kDirectIoAlignment) return 0;
  return std::clamp<uint64_t>(round_down(bound / kPiecesPerRing, kDirectIoAlignment),
                              kDirectIoAlignment, kDirectPiece);
}

// Writes `count` bytes from `bytes` at `offset` (all aligned) through the O_DIRECT descriptor,
// on the disk thread. Returns how many it wrote: all of them, or fewer where a short write
// stopped at an unaligned byte, from which O_DIRECT cannot go on (the caller writes the rest
// through the page cache).
size_t write_direct_piece(const FileSystem& fs, File& direct, const uint8_t* bytes, size_t count,
                          uint64_t offset) {
  size_t done = 0;
  while (done < count && done % kDirectIoAlignment == 0) {
    const size_t written = fs.pwrite_some(direct, bytes + done, count - done, offset + done);
    ZS_CHECK_AS(IoError, written > 0, "write of '", direct.path(), "' at byte ", offset + done,
                " wrote nothing; check the disk");
    done += written;
  }
  return done;
}

}  // namespace

void RankFileWriter::FreeDeleter::operator()(uint8_t* p) const { std::free(p); }

RankFileWriter::RankFileWriter(size_t buffer_bytes, const FileSystem& fs)
    : bound_(buffer_bytes), fs_(fs), piece_(direct_piece(buffer_bytes)) {
  ZS_CHECK(buffer_bytes >= sizeof(float), "--checkpoint-buffer must hold at least one fp32 value (",
           sizeof(float), " bytes); got ", buffer_bytes);
  if (piece_ == 0) {
    ZS_LOG_INFO(
        "checkpoint: a --checkpoint-buffer of {} bytes is under one {}-byte block, too small for "
        "O_DIRECT; rank files go through the page cache",
        buffer_bytes, kDirectIoAlignment);
  }
  // Started last, once the checks passed: a thread never outlives a failed construction. Its
  // errors carry the rank of the thread that made the writer.
  thread_ = std::thread([this, rank = current_log_rank()] {
    const RankScope scope(rank);
    run();
  });
}

RankFileWriter::~RankFileWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void RankFileWriter::run() {
  for (;;) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return stop_ || (job_ && !busy_); });
    if (stop_) return;
    busy_ = true;
    const std::string path = path_;
    const uint64_t bytes = bytes_;
    lock.unlock();
    std::exception_ptr error;
    try {
      write_file(path, bytes);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    // Moved, not copied: the rank's thread alone holds the error from here on, and frees it.
    error_ = std::move(error);
    result_.seconds = seconds_since(started_);
    busy_ = false;
    job_ = false;
    over_ = true;
    lock.unlock();
    changed_.notify_all();
  }
}

bool RankFileWriter::await_copied(const std::string& path, uint64_t end) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return stop_ || cancel_ || disk_failed_ || copied_ >= end; });
  // Abandoned: the AtomicFileWriter removes its temporary file, nothing gets the name.
  ZS_CHECK_AS(IoError, !stop_ && !cancel_, "the write of '", path, "' was abandoned");
  return !disk_failed_;
}

void RankFileWriter::release(uint64_t end) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    written_ = end;
  }
  changed_.notify_all();
}

void RankFileWriter::write_file(const std::string& path, uint64_t bytes) {
  detail::AtomicFileWriter file(path, fs_);
  // The temporary file opened a second time, with O_DIRECT, where the buffer can feed it whole
  // aligned pieces (grow_buffer sized it so) and the file has a block to write that way.
  File direct;
  if (piece_ > 0 && bytes >= kDirectIoAlignment) {
    direct = fs_.open_for_direct_write(file.temp_path());
    if (!direct.is_open() && !told_buffered_) {
      told_buffered_ = true;
      ZS_LOG_WARN(
          "checkpoint: the filesystem of '{}' refuses O_DIRECT; rank files go through the page "
          "cache, which is slower (put --checkpoint-dir on a disk filesystem such as ext4 or xfs "
          "for the disk's full rate)",
          path);
    }
  }
  const bool direct_path = direct.is_open();
  FileChecksum checksum(kSavedChecksum);
  double checksum_seconds = 0, write_seconds = 0;
  if (direct_path) {
    write_direct(file, direct, bytes, checksum, &checksum_seconds, &write_seconds);
    // Its errors reported (close can report a failed write-back); the fsync below covers what it
    // wrote, as fsync covers every descriptor of a file.
    fs_.close(direct);
  } else {
    write_buffered(file, bytes, checksum, &checksum_seconds, &write_seconds);
  }
  const auto start = Clock::now();
  file.commit();
  const double commit_seconds = seconds_since(start);
  std::lock_guard<std::mutex> lock(mutex_);
  result_.checksum = checksum.digest();
  result_.checksum_seconds = checksum_seconds;
  result_.write_seconds = write_seconds;
  result_.commit_seconds = commit_seconds;
  result_.direct = direct_path;
}

void RankFileWriter::write_direct(detail::AtomicFileWriter& file, File& direct, uint64_t bytes,
                                  FileChecksum& checksum, double* checksum_seconds,
                                  double* write_seconds) {
  const std::string& path = file.path();
  const uint64_t body = round_down(bytes, kDirectIoAlignment);
  ZS_CHECK(capacity_ >= bytes || capacity_ % piece_ == 0, "checkpoint: a ", capacity_,
           "-byte ring cannot hold whole ", piece_, "-byte pieces of '", path, "'");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    checksummed_ = 0;
    disk_failed_ = false;
    disk_quit_ = false;
  }
  // Written by the disk thread, read here once it is joined.
  std::exception_ptr disk_error;
  double disk_seconds = 0;
  // The disk thread writes the body piece after piece, in order, each as soon as it is
  // checksummed, and frees it in the ring once written. One write at a time and no gap between
  // them: the writes extend the file, which ext4 and xfs serialize anyway, and extending writes in
  // flight together land on the disk in whatever order they take the inode's lock, fragmenting
  // the file (measured here: 4 in flight left 16-23 extents instead of 3, and reading the file
  // back was 3-4x slower).
  std::thread disk([&, rank = current_log_rank()] {
    const RankScope scope(rank);
    try {
      for (uint64_t at = 0; at < body;) {
        const uint64_t end = std::min(body, at + piece_);
        {
          std::unique_lock<std::mutex> lock(mutex_);
          changed_.wait(lock, [&] { return disk_quit_ || checksummed_ >= end; });
          if (disk_quit_) return;
        }
        const auto start = Clock::now();
        const size_t length = static_cast<size_t>(end - at);
        const size_t moved = write_direct_piece(fs_, direct, ring(at), length, at);
        if (moved < length) file.write_at(at + moved, ring(at + moved), length - moved);
        disk_seconds += seconds_since(start);
        release(end);
        at = end;
      }
    } catch (...) {
      disk_error = std::current_exception();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        disk_failed_ = true;
      }
      changed_.notify_all();
    }
  });
  // Leaving early (the write abandoned): the disk thread stops after its current write and is
  // joined before the descriptor, the temporary file and the buffer can go.
  struct StopDisk {
    RankFileWriter& writer;
    std::thread& disk;
    ~StopDisk() {
      if (!disk.joinable()) return;
      {
        std::lock_guard<std::mutex> lock(writer.mutex_);
        writer.disk_quit_ = true;
      }
      writer.changed_.notify_all();
      disk.join();
    }
  } stop_disk{*this, disk};
  for (uint64_t issued = 0; issued < bytes;) {
    const uint64_t end = std::min(bytes, issued + piece_);
    if (!await_copied(path, end)) break;  // the disk thread failed: its error below
    const auto start = Clock::now();
    checksum.update(ring(issued), static_cast<size_t>(end - issued));
    *checksum_seconds += seconds_since(start);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      checksummed_ = end;
    }
    changed_.notify_all();
    issued = end;
  }
  disk.join();  // it ends after the body's last write, or at its error
  if (disk_error) std::rethrow_exception(disk_error);
  // The tail after the last whole block, once the body is written: a failed write ends the file
  // without it.
  const auto start = Clock::now();
  if (body < bytes) file.write_at(body, ring(body), static_cast<size_t>(bytes - body));
  *write_seconds += disk_seconds + seconds_since(start);
  release(bytes);
}

void RankFileWriter::write_buffered(detail::AtomicFileWriter& file, uint64_t bytes,
                                    FileChecksum& checksum, double* checksum_seconds,
                                    double* write_seconds) {
  for (uint64_t done = 0; done < bytes;) {
    await_copied(file.path(), done + 1);  // no disk thread here to fail
    size_t count = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      count = static_cast<size_t>(
          std::min<uint64_t>({copied_ - done, capacity_ - done % capacity_, kWritePiece}));
    }
    const uint8_t* piece = ring(done);
    const auto start = Clock::now();
    checksum.update(piece, count);
    const auto checksummed = Clock::now();
    file.write(piece, count);
    *checksum_seconds += std::chrono::duration<double>(checksummed - start).count();
    *write_seconds += seconds_since(checksummed);
    done += count;
    release(done);
  }
}

bool RankFileWriter::grow_buffer(uint64_t file_bytes) {
  size_t wanted = 0;
  bool usable = false;  // the buffer as it is serves this file
  if (piece_ == 0) {
    // No O_DIRECT: whole fp32 values only, so that a value is never split at the ring's end.
    wanted = std::max(sizeof(float), static_cast<size_t>(std::min<uint64_t>(bound_, file_bytes)) /
                                         sizeof(float) * sizeof(float));
    usable = capacity_ >= wanted;
  } else {
    // The whole file, in whole blocks, where the bound allows (the ring never wraps); else whole
    // pieces, so that no piece wraps around the ring's end.
    const uint64_t whole = std::max(round_up(file_bytes, kDirectIoAlignment), kDirectIoAlignment);
    wanted = static_cast<size_t>(whole <= bound_ ? whole : round_down(bound_, piece_));
    usable = capacity_ >= wanted && (capacity_ >= file_bytes || capacity_ % piece_ == 0);
  }
  if (usable) return false;
  // Uninitialized, and aligned for O_DIRECT; aligned_alloc takes whole multiples of the alignment.
  buffer_.reset(static_cast<uint8_t*>(
      std::aligned_alloc(kDirectIoAlignment, round_up(wanted, kDirectIoAlignment))));
  if (buffer_ == nullptr) {
    capacity_ = 0;
    ZS_THROW(OutOfMemory, "checkpoint: cannot allocate the ", wanted,
             "-byte write buffer; lower --checkpoint-buffer");
  }
  capacity_ = wanted;
  return true;
}

void RankFileWriter::reserve(uint64_t file_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  ZS_CHECK(!job_ && !over_, "checkpoint: the write buffer cannot grow during the write of '", path_,
           "'");
  // Every page touched now: a fresh buffer's first touch is a page fault per 4 KiB (a quarter
  // million for 1 GB), which would otherwise land in the first snapshot's copy, on the loop's
  // stall.
  if (grow_buffer(file_bytes)) std::memset(buffer_.get(), 0, capacity_);
}

void RankFileWriter::snapshot(const std::string& path, const std::vector<Tensor>& tensors) {
  uint64_t bytes = 0;
  for (const Tensor& t : tensors) bytes += static_cast<uint64_t>(t.numel()) * sizeof(float);
  snapshot(path, bytes, [&](const TensorVisitor& visit) {
    for (const Tensor& t : tensors) visit(t);
  });
}

void RankFileWriter::snapshot(const std::string& path, uint64_t bytes,
                              const TensorSource& tensors) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ZS_CHECK(!job_ && !over_, "checkpoint: a rank file write was started before the previous one '",
             path_, "' was waited for");
    // The writer thread is idle (no job): the buffer is the rank's to replace. Not filled here:
    // the copy writes every byte before the writer reads it.
    grow_buffer(bytes);
    path_ = path;
    bytes_ = bytes;
    copied_ = 0;
    written_ = 0;
    cancel_ = false;
    error_ = nullptr;
    result_ = Written{};
    started_ = Clock::now();
    job_ = true;
  }
  changed_.notify_all();
  try {
    bool failed = false;  // the write failed: wait() throws its error
    uint64_t handed = 0;  // bytes the source has handed out
    tensors([&](const Tensor& t) {
      if (failed) return;
      ZS_CHECK(t.dtype() == DType::kF32, "checkpoint: '", t.name(), "' is ", dtype_name(t.dtype()),
               ", expected fp32 masters and optimizer state");
      const int64_t numel = t.numel();
      handed += static_cast<uint64_t>(numel) * sizeof(float);
      ZS_CHECK(handed <= bytes, "checkpoint: the rank file '", path, "' was sized for ", bytes,
               " bytes, but its tensors hold more");
      for (int64_t done = 0; done < numel;) {
        size_t at = 0;
        int64_t count = 0;
        {
          std::unique_lock<std::mutex> lock(mutex_);
          changed_.wait(lock,
                        [&] { return over_ || capacity_ - (copied_ - written_) >= sizeof(float); });
          if (over_) {
            failed = true;
            return;
          }
          at = static_cast<size_t>(copied_ % capacity_);
          const uint64_t space =
              std::min<uint64_t>(capacity_ - (copied_ - written_), capacity_ - at);
          count = std::min<int64_t>(numel - done, static_cast<int64_t>(space / sizeof(float)));
        }
        const Tensor part = done == 0 && count == numel ? t : t.slice(done, {count});
        part.copy_to_host(buffer_.get() + at);
        {
          std::lock_guard<std::mutex> lock(mutex_);
          copied_ += static_cast<uint64_t>(count) * sizeof(float);
        }
        changed_.notify_all();
        done += count;
      }
    });
    if (failed) return;
    ZS_CHECK(handed == bytes, "checkpoint: the rank file '", path, "' was sized for ", bytes,
             " bytes, but its tensors hold ", handed);
    std::lock_guard<std::mutex> lock(mutex_);
    result_.copy_seconds = seconds_since(started_);
  } catch (...) {
    // The copy failed: abandon the write, and leave the writer idle for the next one.
    std::unique_lock<std::mutex> lock(mutex_);
    cancel_ = true;
    changed_.notify_all();
    changed_.wait(lock, [&] { return over_; });
    over_ = false;
    error_ = nullptr;
    throw;
  }
}

bool RankFileWriter::finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return over_;
}

RankFileWriter::Written RankFileWriter::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  ZS_CHECK(job_ || over_, "checkpoint: no rank file write to wait for");
  changed_.wait(lock, [&] { return over_; });
  over_ = false;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return result_;
}

}  // namespace zs::checkpoint
