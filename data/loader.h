// BatchLoader: a thread that fills the next batch while the current training step runs.
//
// Double buffering: the loader owns two Batches (made once by the sampler's make_batch). Its
// thread fills a free one with the next position's batch and queues it; next() hands the oldest
// ready batch to the consumer as a BatchLease, and the lease hands it back when destroyed (or on
// release()), after which the thread refills it. Batches arrive exactly in the sampler's order,
// starting at options.start (a checkpoint's BatchPosition resumes the stream).
//
// Errors are never lost and never hang: an exception thrown while filling a batch is captured on
// the loader thread and rethrown by the next() call that would have returned that batch (batches
// completed before it are delivered first), and by every next() after it. next() while the
// consumer already holds both buffers throws InvalidArgument instead of waiting forever.
//
// Ownership and threads: the sampler (and its dataset) and the allocator must outlive the loader;
// every lease must be released before the loader is destroyed. The destructor stops the thread
// and joins it (waiting for a fill in progress to end). next() and lease release may be called
// from any thread, but the loader is meant for one consumer. The thread logs and throws under the
// rank of the thread that created the loader (RankScope).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "data/sampler.h"
#include "runtime/allocator.h"

namespace zs::data {

struct LoaderOptions {
  BatchPosition start;       // the first batch delivered
  int64_t num_batches = -1;  // how many batches to deliver; -1: no end (epochs follow each other)
};

class BatchLoader;

// The consumer's hold on one loaded batch. Move-only; releases on destruction.
class BatchLease {
 public:
  BatchLease() = default;
  ~BatchLease() { release(); }
  BatchLease(BatchLease&& other) noexcept;
  BatchLease& operator=(BatchLease&& other) noexcept;
  BatchLease(const BatchLease&) = delete;
  BatchLease& operator=(const BatchLease&) = delete;

  // The batch; valid while the lease holds it (throws InvalidArgument after release).
  const Batch& batch() const;
  const Batch& operator*() const { return batch(); }
  const Batch* operator->() const { return &batch(); }
  bool valid() const { return loader_ != nullptr; }
  // Hands the batch back to the loader for refilling. Idempotent.
  void release() noexcept;

 private:
  friend class BatchLoader;
  BatchLease(BatchLoader* loader, int slot) : loader_(loader), slot_(slot) {}

  BatchLoader* loader_ = nullptr;
  int slot_ = -1;
};

class BatchLoader {
 public:
  static constexpr int kNumBuffers = 2;

  // Allocates the two batches on `allocator` and starts the thread.
  BatchLoader(const BatchSampler& sampler, Allocator& allocator, LoaderOptions options = {});
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Blocks until the next batch is ready and leases it; rethrows a loader-thread error. Throws
  // InvalidArgument once num_batches batches have been delivered, or if both buffers are leased.
  BatchLease next();
  // Whether num_batches batches have been delivered (always false without an end).
  bool exhausted() const;
  int64_t delivered() const;

 private:
  friend class BatchLease;
  void run();
  void give_back(int slot) noexcept;

  const BatchSampler& sampler_;
  const LoaderOptions options_;
  const int log_rank_;
  Batch buffers_[kNumBuffers];

  mutable std::mutex mutex_;
  std::condition_variable changed_;  // a slot became free or ready, an error, or stop
  std::deque<int> free_slots_;       // buffers the thread may fill, in order
  std::deque<int> ready_slots_;      // filled buffers, oldest first
  int leased_ = 0;                   // buffers the consumer holds
  int64_t delivered_ = 0;
  std::exception_ptr error_;  // the fill that failed; rethrown when the consumer reaches it
  bool stop_ = false;
  std::thread thread_;  // last: starts after everything above is initialized
};

}  // namespace zs::data
