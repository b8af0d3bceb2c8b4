// NvmeStore (offload/nvme_store.h): the swap files, the request queue, the I/O thread and its two
// engines (io_uring through liburing where the build has it, blocking calls through the
// FileSystem otherwise).
#include "offload/nvme_store.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <utility>

#include "runtime/error.h"
#include "runtime/logging.h"
#include "runtime/memory_tracker.h"

#if ZS_HAVE_LIBURING
#include <liburing.h>
#endif

namespace zs::offload {
namespace detail {

struct NvmeRequest {
  int pending = 0;  // chunks not yet finished (guarded by the store's mutex)
  bool finished = false;
  std::exception_ptr error;  // the first chunk's error
};

// One request's piece inside one stripe: at most stripe_bytes, in one file.
struct NvmeChunk {
  std::shared_ptr<NvmeRequest> request;
  File* file = nullptr;
  uint64_t file_offset = 0;
  char* data = nullptr;
  uint64_t length = 0;
  uint64_t done = 0;  // bytes moved so far (a short transfer goes on from there)
  bool is_write = false;
};

// Moves chunks; the store's I/O thread is its only caller.
class NvmeEngine {
 public:
  explicit NvmeEngine(NvmeStore& store) : store_(store) {}
  virtual ~NvmeEngine() = default;
  virtual const char* name() const = 0;
  // Starts (or, for a blocking engine, does) the chunks; each ends in finish().
  virtual void start(const std::vector<NvmeChunk*>& chunks) = 0;
  // Finishes the chunks that completed, waiting a little (at most ~1 ms) for one if some are in
  // flight and none has completed: the thread then looks for new requests again.
  virtual void reap() = 0;
  // The engine failed: finishes with `error` every chunk it still holds, after the kernel is done
  // with its buffer.
  virtual void abandon(const std::exception_ptr& error) = 0;

 protected:
  void finish(NvmeChunk* chunk, std::exception_ptr error) {
    store_.finish_chunk(chunk, std::move(error));
  }
  // What the file layer lets this part of the chunk move (the fault wrapper may shorten it or
  // throw).
  size_t admit(NvmeChunk& chunk, const FileSystem& fs) {
    return fs.admit_io(*chunk.file, chunk.is_write ? FileOp::kWrite : FileOp::kRead,
                       chunk.file_offset + chunk.done, chunk.length - chunk.done);
  }
  // The error of a read that found the end of the file before the chunk's end.
  [[noreturn]] static void throw_end_of_file(const NvmeChunk& chunk) {
    ZS_THROW(IoError, "read of '", chunk.file->path(), "' at byte ", chunk.file_offset + chunk.done,
             " found the end of the file, ", chunk.length - chunk.done,
             " bytes short: the swap file is shorter than what the store wrote (was it "
             "truncated or replaced while the run was going?); restart the run, which recreates "
             "it, from the last checkpoint");
  }

  NvmeStore& store_;
};

namespace {

// pread/pwrite through the FileSystem, one chunk after the other, on the I/O thread.
class BlockingEngine final : public NvmeEngine {
 public:
  BlockingEngine(NvmeStore& store, const FileSystem& fs) : NvmeEngine(store), fs_(fs) {}
  const char* name() const override { return "blocking"; }

  void start(const std::vector<NvmeChunk*>& chunks) override {
    for (NvmeChunk* chunk : chunks) {
      std::exception_ptr error;
      try {
        while (chunk->done < chunk->length) {
          const uint64_t at = chunk->file_offset + chunk->done;
          const size_t count = chunk->length - chunk->done;
          const size_t moved =
              chunk->is_write ? fs_.pwrite_some(*chunk->file, chunk->data + chunk->done, count, at)
                              : fs_.pread_some(*chunk->file, chunk->data + chunk->done, count, at);
          if (moved == 0 && !chunk->is_write) throw_end_of_file(*chunk);
          ZS_CHECK_AS(IoError, moved > 0, "write of '", chunk->file->path(), "' at byte ", at,
                      " wrote nothing; check the disk");
          chunk->done += moved;
        }
      } catch (...) {
        error = std::current_exception();
      }
      finish(chunk, error);
    }
  }
  void reap() override {}
  void abandon(const std::exception_ptr& /*error*/) override {}  // it holds no chunk between calls

 private:
  const FileSystem& fs_;
};

#if ZS_HAVE_LIBURING
class UringEngine final : public NvmeEngine {
 public:
  // Returns null (and sets `why`) where the kernel refuses io_uring (seccomp, an old kernel).
  static std::unique_ptr<UringEngine> create(NvmeStore& store, const FileSystem& fs, int depth,
                                             std::string& why) {
    auto engine = std::unique_ptr<UringEngine>(new UringEngine(store, fs));
    const int status = io_uring_queue_init(static_cast<unsigned>(depth), &engine->ring_, 0);
    if (status < 0) {
      why = "io_uring_queue_init failed: " + zs::detail::errno_message(-status);
      return nullptr;
    }
    engine->ready_ = true;
    why = missing_features(engine->ring_);
    return why.empty() ? std::move(engine) : nullptr;
  }
  ~UringEngine() override {
    if (ready_) io_uring_queue_exit(&ring_);
  }

  // What this kernel's io_uring lacks that the engine needs, or "": the read and write opcodes
  // (Linux 5.6) and timeouts passed to the wait itself (IORING_FEAT_EXT_ARG, 5.11 — before it,
  // liburing's timed wait queues a timeout request whose completion would reach reap()).
  static std::string missing_features(io_uring& ring) {
    if ((ring.features & IORING_FEAT_EXT_ARG) == 0) {
      return "this kernel's io_uring lacks IORING_FEAT_EXT_ARG (Linux 5.11)";
    }
    io_uring_probe* probe = io_uring_get_probe_ring(&ring);
    if (probe == nullptr) return "this kernel's io_uring cannot be probed for its operations";
    const bool ok = io_uring_opcode_supported(probe, IORING_OP_READ) &&
                    io_uring_opcode_supported(probe, IORING_OP_WRITE);
    io_uring_free_probe(probe);
    return ok ? "" : "this kernel's io_uring has no IORING_OP_READ/WRITE (Linux 5.6)";
  }

  // The engine broke (reap or submit threw): waits, without a timeout, for every chunk the kernel
  // still owns and finishes it with `error`, so that no buffer is freed under running I/O.
  void abandon(const std::exception_ptr& error) override {
    while (in_flight_ > 0) {
      io_uring_cqe* cqe = nullptr;
      if (io_uring_wait_cqe(&ring_, &cqe) < 0 || cqe == nullptr) return;  // nothing more to learn
      auto* chunk = static_cast<NvmeChunk*>(io_uring_cqe_get_data(cqe));
      io_uring_cqe_seen(&ring_, cqe);
      if (cqe->user_data == LIBURING_UDATA_TIMEOUT) continue;
      --in_flight_;
      finish(chunk, error);
    }
    for (NvmeChunk* chunk : pending_) finish(chunk, error);
    pending_.clear();
  }
  const char* name() const override { return "io_uring"; }

  void start(const std::vector<NvmeChunk*>& chunks) override {
    for (NvmeChunk* chunk : chunks) queue(chunk);
    submit();
  }

  void reap() override {
    if (in_flight_ == 0) return;
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec timeout{0, 1000000};  // 1 ms: then look for new requests again
    const int status = io_uring_wait_cqe_timeout(&ring_, &cqe, &timeout);
    if (status < 0 && status != -ETIME && status != -EINTR) {
      ZS_THROW(IoError,
               "waiting for io_uring completions failed: ", zs::detail::errno_message(-status));
    }
    bool resubmit = false;
    unsigned head = 0;
    unsigned seen = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      if (cqe->user_data == LIBURING_UDATA_TIMEOUT) continue;  // liburing's own (see above)
      --in_flight_;
      auto* chunk = static_cast<NvmeChunk*>(io_uring_cqe_get_data(cqe));
      const int result = cqe->res;
      std::exception_ptr error;
      try {
        if (result < 0) {
          throw_file_error(chunk->is_write ? "io_uring write" : "io_uring read",
                           chunk->file->path(), -result,
                           static_cast<int64_t>(chunk->file_offset + chunk->done));
        }
        if (result == 0 && !chunk->is_write) throw_end_of_file(*chunk);
        ZS_CHECK_AS(IoError, result > 0, "io_uring write of '", chunk->file->path(), "' at byte ",
                    chunk->file_offset + chunk->done, " wrote nothing; check the disk");
        chunk->done += static_cast<uint64_t>(result);
      } catch (...) {
        error = std::current_exception();
      }
      if (error || chunk->done == chunk->length) {
        finish(chunk, error);
      } else {
        pending_.push_back(chunk);  // a short transfer: the rest goes out again
        resubmit = true;
      }
    }
    io_uring_cq_advance(&ring_, seen);
    if (resubmit) {
      std::vector<NvmeChunk*> again;
      again.swap(pending_);
      for (NvmeChunk* chunk : again) queue(chunk);
      submit();
    }
  }

 private:
  UringEngine(NvmeStore& store, const FileSystem& fs) : NvmeEngine(store), fs_(fs) {}

  // Puts the chunk's remaining bytes into a submission entry (after the file layer admits them);
  // an admission error finishes the chunk at once.
  void queue(NvmeChunk* chunk) {
    size_t count = 0;
    try {
      count = admit(*chunk, fs_);
      if (count == 0 && !chunk->is_write) throw_end_of_file(*chunk);
    } catch (...) {
      finish(chunk, std::current_exception());
      return;
    }
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {  // the ring is full: push what is queued, then there is room
      submit();
      sqe = io_uring_get_sqe(&ring_);
    }
    ZS_CHECK(sqe != nullptr, "io_uring: no submission entry free after a submit");
    const uint64_t at = chunk->file_offset + chunk->done;
    if (chunk->is_write) {
      io_uring_prep_write(sqe, chunk->file->fd(), chunk->data + chunk->done,
                          static_cast<unsigned>(count), at);
    } else {
      io_uring_prep_read(sqe, chunk->file->fd(), chunk->data + chunk->done,
                         static_cast<unsigned>(count), at);
    }
    io_uring_sqe_set_data(sqe, chunk);
    ++in_flight_;
  }

  // Submits every queued entry: io_uring_submit may take fewer than are ready (short of memory),
  // and an entry left in the ring would wait for the next request to go out.
  void submit() {
    while (io_uring_sq_ready(&ring_) > 0) {
      const int status = io_uring_submit(&ring_);
      if (status >= 0) continue;
      if (status != -EINTR && status != -EAGAIN && status != -EBUSY) {
        ZS_THROW(IoError, "io_uring_submit failed: ", zs::detail::errno_message(-status));
      }
    }
  }

  const FileSystem& fs_;
  io_uring ring_{};
  bool ready_ = false;
  int in_flight_ = 0;
  std::vector<NvmeChunk*> pending_;
};
#endif

std::string swap_path(const std::string& dir, const std::string& name) {
  return (dir.empty() || dir.back() == '/' ? dir : dir + "/") + name + ".swap";
}

}  // namespace
}  // namespace detail

NvmeStore::NvmeStore(const NvmeStoreOptions& options, const FileSystem& file_system)
    : options_(options), file_system_(file_system) {
  ZS_CHECK(!options_.paths.empty(), "nvme store '", options_.name,
           "': no directory for its swap files; give one or more with --nvme-path DIR");
  ZS_CHECK(options_.stripe_bytes > 0 && options_.stripe_bytes % kAlignment == 0, "nvme store '",
           options_.name, "': stripe_bytes = ", options_.stripe_bytes, " must be a multiple of ",
           kAlignment);
  ZS_CHECK(options_.stripe_bytes <= (uint64_t{1} << 30), "nvme store '", options_.name,
           "': stripe_bytes = ", options_.stripe_bytes, " is above 1 GiB (one request's limit)");
  ZS_CHECK(options_.queue_depth >= 1 && options_.queue_depth <= 4096, "nvme store '", options_.name,
           "': queue_depth = ", options_.queue_depth, " must be in [1, 4096]");
  ZS_CHECK(
      options_.engine == "auto" || options_.engine == "io_uring" || options_.engine == "blocking",
      "nvme store '", options_.name, "': unknown engine '", options_.engine,
      "'; use auto, io_uring or blocking");
  for (const std::string& dir : options_.paths) {
    ZS_CHECK_AS(IoError, file_system_.is_directory(dir), "the swap directory '", dir,
                "' (--nvme-path) does not exist or is not a directory; create it on a fast local "
                "disk, or point --nvme-path at one");
  }
  const uint64_t files = options_.paths.size();
  const uint64_t stripes = (options_.capacity + options_.stripe_bytes - 1) / options_.stripe_bytes;
  per_file_ = (stripes + files - 1) / files * options_.stripe_bytes;
  capacity_ = per_file_ * files;
  files_.reserve(options_.paths.size());
  try {
    for (const std::string& dir : options_.paths) {
      files_.push_back(
          file_system_.create_for_swap(detail::swap_path(dir, options_.name), options_.direct));
      file_system_.allocate(files_.back(), per_file_);
    }
    start_engine();
  } catch (...) {
    for (File& file : files_) {
      file.descriptor().reset();
      try {
        file_system_.remove_file(file.path());
      } catch (const std::exception&) {
        // The construction's error is the one to report.
      }
    }
    throw;
  }
}

// The engine (io_uring where it can run, else blocking) and the I/O thread.
void NvmeStore::start_engine() {
  std::string why = "liburing was not found when zeroshard was built";
#if ZS_HAVE_LIBURING
  if (options_.engine != "blocking") {
    engine_ = detail::UringEngine::create(*this, file_system_, options_.queue_depth, why);
  }
#endif
  if (engine_ == nullptr) {
    ZS_CHECK_AS(IoError, options_.engine != "io_uring", "nvme store '", options_.name,
                "': the io_uring engine was asked for but cannot run: ", why,
                "; use the blocking engine, or run where io_uring is allowed");
    if (options_.engine == "auto") {
      ZS_LOG_WARN(
          "nvme store '{}': io_uring is not available ({}); using blocking reads and "
          "writes, one request at a time",
          options_.name, why);
    }
    engine_ = std::make_unique<detail::BlockingEngine>(*this, file_system_);
  }
  thread_ = std::thread([this] { run(); });
}

NvmeStore::~NvmeStore() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  if (thread_.joinable()) thread_.join();
  engine_.reset();
  for (File& file : files_) {
    try {
      file_system_.close(file);
      file_system_.remove_file(file.path());
    } catch (const std::exception& e) {
      ZS_LOG_WARN("nvme store '{}': could not remove its swap file: {}", options_.name, e.what());
    }
  }
}

bool NvmeStore::io_uring_supported(std::string* why) {
#if ZS_HAVE_LIBURING
  io_uring ring{};
  const int status = io_uring_queue_init(1, &ring, 0);
  if (status < 0) {
    if (why != nullptr) *why = "io_uring_queue_init failed: " + zs::detail::errno_message(-status);
    return false;
  }
  const std::string missing = detail::UringEngine::missing_features(ring);
  io_uring_queue_exit(&ring);
  if (why != nullptr) *why = missing;
  return missing.empty();
#else
  if (why != nullptr) *why = "liburing was not found when zeroshard was built";
  return false;
#endif
}

uint64_t NvmeStore::reserved() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_free_;
}

const char* NvmeStore::engine_name() const { return engine_->name(); }

std::vector<std::string> NvmeStore::file_paths() const {
  std::vector<std::string> paths;
  for (const File& file : files_) paths.push_back(file.path());
  return paths;
}

uint64_t NvmeStore::reserve(uint64_t bytes) {
  const uint64_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  std::lock_guard<std::mutex> lock(mutex_);
  if (rounded > capacity_ - next_free_) {
    ZS_THROW(OutOfMemory, "nvme store '", options_.name, "' is full: ", format_bytes(rounded),
             " more asked, ", format_bytes(next_free_), " of its ", format_bytes(capacity_),
             " reserved already; size the store for everything the tier holds");
  }
  const uint64_t offset = next_free_;
  next_free_ += rounded;
  return offset;
}

NvmeStore::Io NvmeStore::write(uint64_t offset, const void* data, uint64_t bytes) {
  return submit(true, offset, const_cast<void*>(data), bytes);
}

NvmeStore::Io NvmeStore::read(uint64_t offset, void* data, uint64_t bytes) {
  return submit(false, offset, data, bytes);
}

NvmeStore::Io NvmeStore::submit(bool is_write, uint64_t offset, void* data, uint64_t bytes) {
  const char* what = is_write ? "write" : "read";
  ZS_CHECK(reinterpret_cast<uintptr_t>(data) % kAlignment == 0 && offset % kAlignment == 0 &&
               bytes % kAlignment == 0,
           "nvme store '", options_.name, "': a ", what,
           " needs its buffer, offset and length "
           "aligned to ",
           kAlignment, " bytes (O_DIRECT), got buffer ", data, ", offset ", offset, ", length ",
           bytes);
  ZS_CHECK(offset <= capacity_ && bytes <= capacity_ - offset, "nvme store '", options_.name,
           "': a ", what, " of ", bytes, " bytes at ", offset, " runs past its capacity ",
           capacity_);
  auto request = std::make_shared<detail::NvmeRequest>();
  std::vector<std::unique_ptr<Chunk>> chunks;
  const uint64_t stripe = options_.stripe_bytes;
  const uint64_t files = files_.size();
  for (uint64_t at = offset; at < offset + bytes;) {
    const uint64_t s = at / stripe;
    const uint64_t in_stripe = at % stripe;
    auto chunk = std::make_unique<Chunk>();
    chunk->request = request;
    chunk->file = &files_[s % files];
    chunk->file_offset = (s / files) * stripe + in_stripe;
    chunk->data = static_cast<char*>(data) + (at - offset);
    chunk->length = std::min(stripe - in_stripe, offset + bytes - at);
    chunk->is_write = is_write;
    at += chunk->length;
    chunks.push_back(std::move(chunk));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_) std::rethrow_exception(broken_);
    request->pending = static_cast<int>(chunks.size());
    request->finished = chunks.empty();
    for (auto& chunk : chunks) queued_.push_back(std::move(chunk));
  }
  work_ready_.notify_one();
  return Io(std::move(request));
}

void NvmeStore::wait(Io& io) {
  if (!io.valid()) return;
  std::shared_ptr<detail::NvmeRequest> request = std::move(io.request_);
  std::unique_lock<std::mutex> lock(mutex_);
  io_done_.wait(lock, [&] { return request->finished || broken_; });
  if (request->error) std::rethrow_exception(request->error);
  if (!request->finished) std::rethrow_exception(broken_);
}

bool NvmeStore::done(const Io& io) const {
  if (!io.valid()) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  return io.request_->finished || broken_;
}

NvmeStoreStats NvmeStore::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void NvmeStore::finish_chunk(Chunk* chunk, std::exception_ptr error) {
  std::unique_ptr<Chunk> owned(chunk);
  std::lock_guard<std::mutex> lock(mutex_);
  --in_flight_;
  detail::NvmeRequest& request = *chunk->request;
  if (error && !request.error) request.error = std::move(error);
  if (!error) (chunk->is_write ? stats_.bytes_written : stats_.bytes_read) += chunk->length;
  if (--request.pending == 0) {
    request.finished = true;
    io_done_.notify_all();
  }
}

void NvmeStore::run() {
  using Clock = std::chrono::steady_clock;
  Clock::time_point busy_since;
  for (;;) {
    std::vector<Chunk*> batch;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (in_flight_ == 0) {
        work_ready_.wait(lock, [&] { return stopping_ || !queued_.empty(); });
        if (queued_.empty()) return;  // stopping, nothing left
        busy_since = Clock::now();
      }
      while (!queued_.empty() && in_flight_ < options_.queue_depth) {
        batch.push_back(queued_.front().release());
        queued_.pop_front();
        ++in_flight_;
      }
    }
    try {
      if (!batch.empty()) engine_->start(batch);
      engine_->reap();
    } catch (...) {
      // The ring itself failed (not one chunk's I/O): the chunks the kernel holds are finished
      // with this error once it is done with their buffers; every request not yet finished, and
      // every later one, fails with it, so that no waiter hangs.
      const std::exception_ptr error = std::current_exception();
      engine_->abandon(error);
      std::lock_guard<std::mutex> lock(mutex_);
      broken_ = error;
      ZS_LOG_ERROR("nvme store '{}': its I/O engine failed; every request fails from now on",
                   options_.name);
      io_done_.notify_all();
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (in_flight_ == 0) {
      stats_.busy_seconds += std::chrono::duration<double>(Clock::now() - busy_since).count();
    }
  }
}

}  // namespace zs::offload
