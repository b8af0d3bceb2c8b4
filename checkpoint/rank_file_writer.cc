// RankFileWriter (checkpoint/rank_file_writer.h): the ring buffer between the rank's copy and the
// writer thread. The rank's thread fills [written_, copied_ + free) and the writer thread drains
// [written_, copied_), each outside the lock on a region the other does not touch; the counters
// move under the lock and every move is announced on `changed_`.
#include "checkpoint/rank_file_writer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "checkpoint/shard_files.h"
#include "runtime/clock.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/logging.h"

namespace zs::checkpoint {
namespace {

using Clock = SteadyClock;

// The most the writer checksums and then writes at once: small enough that the write's read of
// the piece finds it in the cache the checksum pass brought it into, large enough that a call
// costs nothing next to its bytes.
constexpr uint64_t kWritePiece = uint64_t{4} << 20;

}  // namespace

RankFileWriter::RankFileWriter(size_t buffer_bytes, const FileSystem& fs)
    : bound_(buffer_bytes), fs_(fs) {
  ZS_CHECK(buffer_bytes >= sizeof(float), "--checkpoint-buffer must hold at least one fp32 value (",
           sizeof(float), " bytes); got ", buffer_bytes);
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

void RankFileWriter::write_file(const std::string& path, uint64_t bytes) {
  detail::AtomicFileWriter file(path, fs_);
  FileChecksum checksum(kSavedChecksum);
  double checksum_seconds = 0, write_seconds = 0;
  for (uint64_t done = 0; done < bytes;) {
    size_t at = 0, count = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || cancel_ || copied_ > written_; });
      // Abandoned: the AtomicFileWriter removes its temporary file, nothing gets the name.
      ZS_CHECK_AS(IoError, !stop_ && !cancel_, "the write of '", path, "' was abandoned");
      at = static_cast<size_t>(written_ % capacity_);
      count = static_cast<size_t>(
          std::min<uint64_t>({copied_ - written_, capacity_ - at, kWritePiece}));
    }
    const auto start = Clock::now();
    checksum.update(buffer_.get() + at, count);
    const auto checksummed = Clock::now();
    file.write(buffer_.get() + at, count);
    checksum_seconds += std::chrono::duration<double>(checksummed - start).count();
    write_seconds += seconds_since(checksummed);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      written_ += count;
    }
    changed_.notify_all();
    done += count;
  }
  const auto start = Clock::now();
  file.commit();
  const double commit_seconds = seconds_since(start);
  std::lock_guard<std::mutex> lock(mutex_);
  result_.checksum = checksum.digest();
  result_.checksum_seconds = checksum_seconds;
  result_.write_seconds = write_seconds;
  result_.commit_seconds = commit_seconds;
}

bool RankFileWriter::grow_buffer(uint64_t file_bytes) {
  // Whole fp32 values only, so that a value is never split at the ring's end.
  const size_t wanted =
      std::max(sizeof(float), static_cast<size_t>(std::min<uint64_t>(bound_, file_bytes)) /
                                  sizeof(float) * sizeof(float));
  if (capacity_ >= wanted) return false;
  buffer_.reset(new uint8_t[wanted]);  // uninitialized, unlike make_unique's
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
