// NvmePager (offload/nvme_pager.h): buffers, eviction and the store's reads and
// writes for paged tensors (the optimizer's state and masters, stage 3's parameter shards).
#include "offload/nvme_pager.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <sstream>

#include "runtime/error.h"
#include "runtime/logging.h"
#include "runtime/memory_tracker.h"

namespace zs::offload {
namespace {

uint64_t round_up(uint64_t value, uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace

NvmePager::NvmePager(const NvmeStoreOptions& store, Allocator& host, int buffers,
                     const FileSystem& file_system, std::string what, MemoryCategory category,
                     Eviction eviction)
    : store_options_(store),
      file_system_(file_system),
      host_(host),
      buffer_count_(buffers),
      eviction_(eviction),
      what_(std::move(what)),
      category_(category) {
  ZS_CHECK(buffers >= 1, what_, " on NVMe: buffer_count ", buffers,
           " must be at least 1 (3 overlap reads, updates and writes)");
  ZS_CHECK(host.host_visible(), what_, " on NVMe: its buffers must be host memory");
}

NvmePager::~NvmePager() {
  // Buffers must not be freed under running I/O. What fails here is the last step's write-outs
  // (nothing reads them again: the swap files go with the store) or I/O of a run already ending
  // on an error: logged, not thrown.
  for (Buffer& buffer : buffers_) {
    for (auto* ios : {&buffer.reads, &buffer.writes}) {
      for (NvmeStore::Io& io : *ios) {
        try {
          store_->wait(io);
        } catch (const std::exception& e) {
          ZS_LOG_WARN("{} on NVMe, at shutdown: {}", what_, e.what());
        }
      }
    }
  }
}

void NvmePager::attach(const std::vector<int64_t>& view_numel, size_t states_per_view) {
  ZS_CHECK(numel_.empty() && buffers_.empty(), what_, " on NVMe: attached twice");
  numel_ = view_numel;
  states_ = states_per_view;
  int64_t largest = 0;
  for (int64_t n : numel_) largest = std::max(largest, n);
  stride_ = round_up(static_cast<uint64_t>(largest) * sizeof(float), NvmeStore::kAlignment);
  uint64_t capacity = 0;
  for (size_t v = 0; v < numel_.size(); ++v) capacity += states_ * region_bytes(v);
  NvmeStoreOptions options = store_options_;
  options.capacity = std::max<uint64_t>(capacity, NvmeStore::kAlignment);
  store_ = std::make_unique<NvmeStore>(options, file_system_);
  offsets_.assign(numel_.size(), {});
  written_.assign(numel_.size(), false);
  for (size_t v = 0; v < numel_.size(); ++v) {
    for (size_t k = 0; k < states_; ++k) {
      offsets_[v].push_back(store_->reserve(static_cast<uint64_t>(numel_[v]) * sizeof(float)));
    }
  }
  if (states_ == 0 || stride_ == 0) return;  // nothing to page (SGD without momentum)
  const uint64_t bytes = stride_ * states_ + NvmeStore::kAlignment;
  buffers_.resize(static_cast<size_t>(buffer_count_));
  for (int b = 0; b < buffer_count_; ++b) {
    Buffer& buffer = buffers_[static_cast<size_t>(b)];
    buffer.memory = Tensor::empty({static_cast<int64_t>(bytes / sizeof(float))}, DType::kF32, host_,
                                  category_, what_ + " buffer " + std::to_string(b));
    const auto address = reinterpret_cast<uintptr_t>(buffer.memory.raw_data());
    buffer.aligned_at =
        (NvmeStore::kAlignment - address % NvmeStore::kAlignment) % NvmeStore::kAlignment;
  }
}

uint64_t NvmePager::buffer_bytes() const {
  uint64_t bytes = 0;
  for (const Buffer& buffer : buffers_) {
    bytes += static_cast<uint64_t>(buffer.memory.numel()) * sizeof(float);
  }
  return bytes;
}

const NvmeStore& NvmePager::store() const {
  ZS_CHECK(store_ != nullptr, what_, " on NVMe: no store before attach()");
  return *store_;
}

std::string NvmePager::describe() const {
  if (store_ == nullptr) return "NVMe (not attached)";
  std::ostringstream text;
  const std::vector<std::string> files = store_->file_paths();
  text << "NVMe, " << format_bytes(store_->reserved()) << " in " << files.size() << " file"
       << (files.size() == 1 ? "" : "s") << " (" << files.front()
       << (files.size() > 1 ? ", ..." : "") << "), " << store_->engine_name() << ", "
       << buffer_count_ << " host buffer" << (buffer_count_ == 1 ? "" : "s") << " of "
       << format_bytes(stride_ * states_);
  return text.str();
}

void NvmePager::check_view(size_t view) const {
  ZS_CHECK(view < numel_.size(), what_, " on NVMe: view ", view, " does not exist (", numel_.size(),
           " views)");
}

char* NvmePager::data(Buffer& buffer) const {
  return static_cast<char*>(buffer.memory.raw_data()) + buffer.aligned_at;
}

int NvmePager::buffer_of(size_t view) const {
  for (size_t b = 0; b < buffers_.size(); ++b) {
    if (buffers_[b].state != State::kFree && buffers_[b].view == view) return static_cast<int>(b);
  }
  return -1;
}

void NvmePager::wait_all(std::vector<NvmeStore::Io>& ios) {
  const auto start = std::chrono::steady_clock::now();
  std::exception_ptr error;
  for (NvmeStore::Io& io : ios) {
    try {
      store_->wait(io);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  ios.clear();
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (error) std::rethrow_exception(error);
}

bool NvmePager::writes_done(const Buffer& buffer) const {
  for (const NvmeStore::Io& io : buffer.writes) {
    if (!store_->done(io)) return false;
  }
  return true;
}

void NvmePager::wait_writes(Buffer& buffer) {
  try {
    wait_all(buffer.writes);
  } catch (...) {
    // The view's region on disk is torn, and this buffer holds its only good copy: it stays,
    // changed, for the next write-out (an eviction, a flush) to try again.
    buffer.dirty = true;
    throw;
  }
}

size_t NvmePager::distance(size_t view) const {
  // The uses from now: position_ onward in the sweep's direction, then the next sweep back.
  const size_t n = numel_.size();
  if (ascending_) return view >= position_ ? view - position_ : (n - position_) + (n - 1 - view);
  return view <= position_ ? position_ - view : (position_ + 1) + view;
}

void NvmePager::advance(size_t view) {
  const size_t n = numel_.size();
  if (ascending_ && view + 1 == n) {
    ascending_ = false;  // the turn: the next sweep starts with this view again
    position_ = view;
  } else if (!ascending_ && view == 0) {
    ascending_ = true;
    position_ = 0;
  } else {
    position_ = ascending_ ? view + 1 : view - 1;
  }
}

bool NvmePager::evicts_before(const Buffer& candidate, const Buffer& current) const {
  if (eviction_ == Eviction::kSweeps) return distance(candidate.view) > distance(current.view);
  return candidate.released_at < current.released_at;
}

int NvmePager::first_free() const {
  for (size_t b = 0; b < buffers_.size(); ++b) {
    if (buffers_[b].state == State::kFree) return static_cast<int>(b);
  }
  return -1;
}

int NvmePager::best_idle(bool written_only) const {
  int chosen = -1;
  for (size_t b = 0; b < buffers_.size(); ++b) {
    const Buffer& buffer = buffers_[b];
    if (buffer.state == State::kIdle && (!written_only || (!buffer.dirty && writes_done(buffer))) &&
        (chosen < 0 || evicts_before(buffer, buffers_[static_cast<size_t>(chosen)]))) {
      chosen = static_cast<int>(b);
    }
  }
  return chosen;
}

int NvmePager::next_victim() const { return first_free() >= 0 ? -1 : best_idle(false); }

uint64_t NvmePager::region_bytes(size_t view) const {
  return round_up(static_cast<uint64_t>(numel_[view]) * sizeof(float), NvmeStore::kAlignment);
}

void NvmePager::write_out(Buffer& buffer) {
  const uint64_t bytes = region_bytes(buffer.view);
  // A write the store cannot take throws here and leaves the buffer dirty: its bytes are still
  // the only copy, and the next write-out or flush tries again.
  for (size_t k = 0; k < states_; ++k) {
    buffer.writes.push_back(
        store_->write(offsets_[buffer.view][k], data(buffer) + k * stride_, bytes));
  }
  buffer.dirty = false;
  written_[buffer.view] = true;
}

void NvmePager::write_ahead() {
  // With no free buffer, the next view brought in evicts the victim: when a view not in any
  // buffer is needed before the victim (kSweeps; LRU does not know the order: any such view),
  // that eviction is coming, and the victim's write-out starts now rather than on the reader's
  // path. Otherwise a changed view stays in its buffer unwritten.
  const int victim = next_victim();
  if (victim < 0 || !buffers_[static_cast<size_t>(victim)].dirty) return;
  Buffer& buffer = buffers_[static_cast<size_t>(victim)];
  for (size_t v = 0; v < numel_.size(); ++v) {
    if (buffer_of(v) < 0 &&
        (eviction_ != Eviction::kSweeps || distance(v) < distance(buffer.view))) {
      // Only an early start: a write the store refuses now leaves the buffer dirty, and the
      // eviction's own write-out (or flush) throws that error where it is waited for, rather
      // than this acquire, release or prefetch leaving its view half taken.
      try {
        write_out(buffer);
      } catch (const std::exception& e) {
        ZS_LOG_DEBUG(
            "{} on NVMe: an early write-out of view {} was refused ({}); it is "
            "written when its buffer is needed",
            what_, buffer.view, e.what());
      }
      return;
    }
  }
}

int NvmePager::take_buffer(size_t view, bool for_acquire, bool may_wait) {
  const int free = first_free();
  if (free >= 0) return free;
  // A prefetch that may not wait leaves a buffer whose write-out still runs or has not started
  // (it would wait for the disk here, on the compute thread, for a read that can as well come
  // later).
  int chosen = best_idle(/*written_only=*/!may_wait);
  // kSweeps: a prefetch of a view needed after every resident candidate would evict a view
  // needed sooner, to be read again before this one is used.
  if (chosen >= 0 && !for_acquire && eviction_ == Eviction::kSweeps &&
      distance(buffers_[static_cast<size_t>(chosen)].view) <= distance(view)) {
    return -1;
  }
  if (chosen < 0 && for_acquire) {
    for (size_t b = 0; b < buffers_.size(); ++b) {
      if (buffers_[b].state == State::kReading) chosen = static_cast<int>(b);
    }
  }
  if (chosen < 0) return -1;
  Buffer& buffer = buffers_[static_cast<size_t>(chosen)];
  // The evicted view's bytes land on the disk before the buffer is reused. A write the store
  // refuses, or one that fails, throws and leaves the buffer holding its view, changed: the
  // eviction fails, nothing is lost.
  if (buffer.dirty) write_out(buffer);  // changed since its last write-out: no write ahead saw it
  wait_writes(buffer);
  buffer.state = State::kFree;
  wait_all(buffer.reads);  // an evicted prefetch (acquire only): its view stays on the disk
  return chosen;
}

void NvmePager::start_read(int index, size_t view, bool read) {
  Buffer& buffer = buffers_[static_cast<size_t>(index)];
  if (!read) {  // the acquirer writes every element: nothing to bring in
    buffer.state = State::kReading;
    buffer.view = view;
    return;
  }
  buffer.state = State::kReading;
  buffer.view = view;
  const uint64_t bytes = region_bytes(view);
  for (size_t k = 0; k < states_; ++k) {
    char* at = data(buffer) + k * stride_;
    if (written_[view]) {
      buffer.reads.push_back(store_->read(offsets_[view][k], at, bytes));
    } else {
      std::memset(at, 0, bytes);  // never written: zeros, as a fresh optimizer's state
    }
  }
}

void NvmePager::prefetch(size_t view, bool may_wait) {
  check_view(view);
  if (buffers_.empty() || buffer_of(view) >= 0) return;
  const int index = take_buffer(view, false, may_wait);
  if (index >= 0) start_read(index, view, true);
  write_ahead();
}

std::vector<Tensor> NvmePager::acquire(size_t view) { return acquire(view, true); }

std::vector<Tensor> NvmePager::acquire_for_overwrite(size_t view) { return acquire(view, false); }

std::vector<Tensor> NvmePager::acquire(size_t view, bool read) {
  check_view(view);
  std::vector<Tensor> tensors;
  if (buffers_.empty()) return tensors;
  int index = buffer_of(view);
  if (index >= 0 && buffers_[static_cast<size_t>(index)].state == State::kAcquired) {
    ZS_THROW(InvalidArgument, what_, " on NVMe: view ", view, " is acquired twice");
  }
  position_ = view;  // kSweeps: this view is the one used now
  if (index < 0) {
    index = take_buffer(view, true, true);
    ZS_CHECK(index >= 0, what_, " on NVMe: every one of the ", buffer_count_,
             " host buffers holds a view in use; release one first, or raise buffer_count");
    start_read(index, view, read);
  }
  Buffer& buffer = buffers_[static_cast<size_t>(index)];
  try {
    wait_all(buffer.reads);
  } catch (...) {
    buffer.state = State::kFree;  // what was read is torn; the view's copy is on the disk
    throw;
  }
  // A view acquired again while its last write-out runs (idle, not evicted): the caller is
  // about to change the bytes that write reads. If it failed, the buffer stays as it was.
  wait_writes(buffer);
  buffer.state = State::kAcquired;
  advance(view);
  write_ahead();
  for (size_t k = 0; k < states_; ++k) {
    tensors.push_back(Tensor::from_storage(buffer.memory.storage(), buffer.aligned_at + k * stride_,
                                           {numel_[view]}, DType::kF32, what_ + " (NVMe)"));
  }
  return tensors;
}

void NvmePager::release(size_t view, bool dirty) {
  check_view(view);
  if (buffers_.empty()) return;
  const int index = buffer_of(view);
  ZS_CHECK(index >= 0 && buffers_[static_cast<size_t>(index)].state == State::kAcquired, what_,
           " on NVMe: view ", view, " is released without being acquired");
  Buffer& buffer = buffers_[static_cast<size_t>(index)];
  buffer.state = State::kIdle;
  buffer.released_at = ++releases_;
  if (dirty) buffer.dirty = true;
  write_ahead();
}

void NvmePager::flush() {
  std::exception_ptr error;
  for (Buffer& buffer : buffers_) {
    try {
      if (buffer.state == State::kIdle && buffer.dirty) write_out(buffer);
      wait_writes(buffer);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace zs::offload
