// Work: the handle of one enqueued collective.
//
// A Work completes when the collective has completed on this rank: for the CPU backends, when
// the communicator's thread has run it; for a device backend (nccl), when the communicator's
// thread has seen its device work finish (it polls the completion event and the backend's
// asynchronous errors). wait() blocks until then and rethrows the collective's error
// (CommTimeout, CommError, InvalidArgument) on the waiting thread — an error on the
// communicator thread is never lost. test() tells whether it has completed, without blocking.
//
// wait_on(stream) is the completion side of stream ordering (comm/communicator.h, "Device
// tensors"): for a device collective it makes work enqueued on `stream` after the call wait for
// the collective ON THE DEVICE (an event wait), and blocks the host only until the
// communicator's thread has enqueued the collective — not until it has run. So a compute thread
// can enqueue the kernels that consume a gathered buffer while the all-gather is still in
// flight. For a CPU collective, or when `stream` is the host, it is wait(): the host is the
// CPU's stream, and work issued after wait() returns is ordered after the collective whatever
// stream it goes to.
//
// After wait_on() the collective may still fail (a timeout, a peer that died): the
// communicator's thread still polls it, aborts the group on a failure (which also unblocks the
// device work waiting for it: an aborted NCCL collective ends), and records the error here.
// Every later collective of the group then fails too, so the error reaches the next wait() of
// any Work of the group; call wait() (or test() and then wait()) on each Work before relying on
// its results on the host, e.g. once at the end of a step. A Work destroyed with an error that
// nobody waited for logs it.
//
// Lifetimes: a Work keeps the tensors of its collective alive until the collective has really
// completed (the device work done, not merely issued), so a caller may drop its own references
// right after wait_on(): the memory is freed only after the collective's last read or write.
// (With a stream-ordered allocator the free is enqueued on the allocator's stream after the
// caller's own uses, so work ordered after the collective by wait_on() is safe too.)
//
// Thread-safe: any thread may wait, wait_on or test; the communicator thread completes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/backend.h"
#include "comm/types.h"
#include "runtime/tensor.h"

namespace zs::comm {

class Work {
 public:
  // `sync`: the device backend's state of this collective (Backend::prepare), or null.
  Work(std::string description, std::vector<Tensor> buffers,
       std::shared_ptr<DeviceSync> sync = nullptr)
      : description_(std::move(description)),
        buffers_(std::move(buffers)),
        sync_(std::move(sync)) {}
  ~Work();
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Blocks until the collective has completed; rethrows its error.
  void wait();
  // Orders work enqueued on `stream` after this call behind the collective (see the file
  // comment); the host blocks only until the collective is issued. Rethrows the collective's
  // error if it failed before that. `stream` must outlive the call only.
  void wait_on(const StreamRef& stream);
  // True once the collective has completed (successfully or not: wait() then rethrows the
  // error); never blocks, never throws.
  bool test() const;
  // True once a device collective has been enqueued on the device (always false for the CPU
  // backends, whose collectives complete without that intermediate state), or has completed.
  bool issued() const;
  // "all_reduce #12 (4096 fp32, sum)".
  const std::string& description() const { return description_; }
  // When complete() ran on the communicator's thread (what a trace uses as the collective's
  // end: for a device collective, when that thread saw its completion event fire). Meaningful
  // once test() is true; before that, the clock's epoch.
  std::chrono::steady_clock::time_point completed_at() const;

  // Called by the communicator thread: the device collective is enqueued (wait_on may return).
  void mark_issued();
  // Called by the communicator thread: the collective completed (or failed with `error`).
  void complete(std::exception_ptr error);

 private:
  const std::string description_;
  std::vector<Tensor> buffers_;  // released on completion
  // Never released before destruction: wait_on may use it after completion (a no-op wait).
  const std::shared_ptr<DeviceSync> sync_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool issued_ = false;
  bool done_ = false;
  std::chrono::steady_clock::time_point completed_at_{};
  bool error_seen_ = false;  // wait() or wait_on() rethrew it
  std::exception_ptr error_;
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace zs::comm
