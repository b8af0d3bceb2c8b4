// Work (see work.h).
#include "comm/work.h"

#include "runtime/error.h"
#include "runtime/logging.h"

namespace zs::comm {

Work::~Work() {
  // The one place an error could still be lost: a Work ordered on a stream by wait_on() and then
  // dropped without a wait(). The group was aborted by the failure, so later collectives fail
  // too; this names the first one.
  if (error_ && !error_seen_) {
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      ZS_LOG_ERROR("{} failed and no one waited for it: {}", description_, e.what());
    } catch (...) {
      ZS_LOG_ERROR("{} failed and no one waited for it", description_);
    }
  }
}

void Work::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [this] { return done_; });
  if (error_) {
    error_seen_ = true;
    std::rethrow_exception(error_);
  }
}

void Work::wait_on(const StreamRef& stream) {
  // The host is the CPU's stream, and a collective without device state completes on the
  // communicator thread: both orderings are a host wait.
  if (sync_ == nullptr || stream.is_host()) {
    wait();
    return;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [this] { return done_ || issued_; });
  if (done_) {
    if (error_) {
      error_seen_ = true;
      std::rethrow_exception(error_);
    }
    return;  // the device work has finished: there is nothing left to wait for
  }
  lock.unlock();
  // Outside the lock: the wait is a call into the device runtime. The sync outlives it (held by
  // this Work), and a completion in between only makes the device wait a no-op.
  sync_->order_stream(stream);
}

bool Work::test() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

bool Work::issued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return issued_ || done_;
}

std::chrono::steady_clock::time_point Work::completed_at() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_at_;
}

void Work::mark_issued() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    issued_ = true;
  }
  done_cv_.notify_all();
}

void Work::complete(std::exception_ptr error) {
  const auto now = std::chrono::steady_clock::now();  // the collective's end, before the frees
  // Drop the buffers before completion is visible: once wait() returns, the caller may destroy
  // the allocator they came from, so the last reference must not be released after that.
  std::vector<Tensor> release;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    release.swap(buffers_);
  }
  release.clear();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::move(error);
    done_ = true;
    completed_at_ = now;
  }
  done_cv_.notify_all();
}

}  // namespace zs::comm
