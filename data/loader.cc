// The loader thread and the consumer's side of the double buffer.
#include "data/loader.h"

#include <utility>

#include "runtime/error.h"
#include "runtime/logging.h"

namespace zs::data {

BatchLease::BatchLease(BatchLease&& other) noexcept
    : loader_(std::exchange(other.loader_, nullptr)), slot_(std::exchange(other.slot_, -1)) {}

BatchLease& BatchLease::operator=(BatchLease&& other) noexcept {
  if (this != &other) {
    release();
    loader_ = std::exchange(other.loader_, nullptr);
    slot_ = std::exchange(other.slot_, -1);
  }
  return *this;
}

const Batch& BatchLease::batch() const {
  ZS_CHECK(loader_ != nullptr,
           "this batch lease was released (or moved from); ask the loader "
           "for the next batch");
  return loader_->buffers_[slot_];
}

void BatchLease::release() noexcept {
  if (loader_ == nullptr) return;
  std::exchange(loader_, nullptr)->give_back(std::exchange(slot_, -1));
}

BatchLoader::BatchLoader(const BatchSampler& sampler, Allocator& allocator, LoaderOptions options)
    : sampler_(sampler), options_(options), log_rank_(current_log_rank()) {
  ZS_CHECK(options_.num_batches >= -1,
           "BatchLoader: num_batches must be >= 0, or -1 for no end; "
           "got ",
           options_.num_batches);
  sampler_.order().next(options_.start);  // validates the start position before the thread runs
  for (int slot = 0; slot < kNumBuffers; ++slot) {
    buffers_[slot] = sampler_.make_batch(allocator);
    free_slots_.push_back(slot);
  }
  thread_ = std::thread([this] { run(); });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    if (leased_ > 0) {
      ZS_LOG_ERROR(
          "a BatchLoader is destroyed while the consumer holds {} of its batches; "
          "those leases now dangle — release every BatchLease before its loader",
          leased_);
    }
  }
  changed_.notify_all();
  thread_.join();
}

void BatchLoader::run() {
  RankScope rank_scope(log_rank_);
  BatchPosition position = options_.start;
  int64_t produced = 0;
  while (options_.num_batches < 0 || produced < options_.num_batches) {
    int slot;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return stop_ || !free_slots_.empty(); });
      if (stop_) return;
      slot = free_slots_.front();
      free_slots_.pop_front();
    }
    // Filled without the lock: the consumer may take and return the other buffer meanwhile.
    try {
      sampler_.fill(position, buffers_[slot]);
      buffers_[slot].position = position;
      position = sampler_.next(position);
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        error_ = std::current_exception();
        free_slots_.push_back(slot);
      }
      changed_.notify_all();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ready_slots_.push_back(slot);
    }
    changed_.notify_all();
    ++produced;
  }
}

BatchLease BatchLoader::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  ZS_CHECK(options_.num_batches < 0 || delivered_ < options_.num_batches,
           "the loader delivered "
           "all ",
           options_.num_batches, " batches it was asked for; check exhausted() first");
  if (ready_slots_.empty() && !error_) {
    ZS_CHECK(leased_ < kNumBuffers, "the consumer holds all ", kNumBuffers,
             " batch buffers, so no batch can be loaded; release a BatchLease before asking "
             "for the next batch");
    changed_.wait(lock, [this] { return !ready_slots_.empty() || error_; });
  }
  // Batches finished before a failure are still delivered, in order; the error comes after.
  if (ready_slots_.empty()) std::rethrow_exception(error_);
  const int slot = ready_slots_.front();
  ready_slots_.pop_front();
  ++leased_;
  ++delivered_;
  return BatchLease(this, slot);
}

void BatchLoader::give_back(int slot) noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --leased_;
    free_slots_.push_back(slot);
  }
  changed_.notify_all();
}

bool BatchLoader::exhausted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return options_.num_batches >= 0 && delivered_ >= options_.num_batches;
}

int64_t BatchLoader::delivered() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return delivered_;
}

}  // namespace zs::data
