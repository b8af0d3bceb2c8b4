// ThreadHandleCache: a library handle (cuBLAS, cuDNN) per (thread, CudaAllocator), for the ops
// that run on that allocator's stream. Library handles are used by one thread at a time, and an
// op runs on its tensors' allocator stream, so each thread keeps one handle per allocator it has
// run an op for. Entries of allocators that are gone (CudaAllocator::lifetime_token expired) are
// dropped at the thread's next lookup; since their stream may be gone too, `forget` first
// detaches such a handle from it (e.g. cublasSetStream(h, nullptr)) so that destroying the handle
// never touches a destroyed stream.
//
// Thread-safety: one cache per thread (declare it thread_local); not shared.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "runtime/cuda/allocator.h"
#include "runtime/macros.h"

namespace zs::ops::cuda {

// Handle: constructible from `const zs::cuda::Stream&` (the stream it is set to).
template <typename Handle>
class ThreadHandleCache {
 public:
  using Forget = void (*)(Handle& handle);
  explicit ThreadHandleCache(Forget forget) : forget_(forget) {}
  ~ThreadHandleCache() {
    for (Entry& entry : entries_) release(entry);
  }
  ZS_DISALLOW_COPY(ThreadHandleCache);

  // The handle for `allocator`'s stream, made on first use.
  Handle& get(const zs::cuda::CudaAllocator& allocator) {
    for (size_t i = 0; i < entries_.size();) {
      if (entries_[i].alive.expired()) {
        release(entries_[i]);
        entries_[i] = std::move(entries_.back());
        entries_.pop_back();
      } else {
        ++i;
      }
    }
    for (Entry& cached : entries_) {
      if (cached.allocator == &allocator) return *cached.handle;
    }
    Entry entry;
    entry.allocator = &allocator;
    entry.alive = allocator.lifetime_token();
    entry.handle = std::make_unique<Handle>(allocator.stream());
    entries_.push_back(std::move(entry));
    return *entries_.back().handle;
  }

 private:
  struct Entry {
    const zs::cuda::CudaAllocator* allocator = nullptr;
    std::weak_ptr<const void> alive;
    std::unique_ptr<Handle> handle;
  };

  void release(Entry& entry) {
    if (entry.handle == nullptr) return;
    if (entry.alive.expired()) forget_(*entry.handle);
    entry.handle.reset();
  }

  Forget forget_;
  // Few allocators per thread (usually one compute stream): a vector beats a map here.
  std::vector<Entry> entries_;
};

}  // namespace zs::ops::cuda
