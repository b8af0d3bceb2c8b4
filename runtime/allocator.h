// Allocators: every byte a tensor holds comes from a device allocator that charges the device's
// MemoryTracker first (so a budget stops the allocation before it happens) and then asks the
// device for memory.
//
// An allocator is an object a rank owns and passes in (no global allocator): ops allocate their
// outputs from the allocator of their inputs' storage. It also says whether the host may read and
// write its memory through a plain pointer (host_visible()): Tensor's host accessors refuse
// memory that it may not, such as CUDA device memory. The tracker must outlive the allocator,
// and the allocator must outlive every Storage it made. Allocate/deallocate are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/device.h"
#include "runtime/memory_tracker.h"

namespace zs {

class Allocator {
 public:
  Allocator(Device device, MemoryTracker* tracker) : device_(device), tracker_(tracker) {}
  virtual ~Allocator() = default;
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  Device device() const { return device_; }
  // Whether the host may dereference this allocator's memory (CPU and pinned host memory: yes;
  // CUDA device memory: no). The default follows the device; an allocator of host-mapped memory
  // on a device (e.g. managed memory) overrides it.
  virtual bool host_visible() const { return device_.is_cpu(); }
  MemoryTracker* tracker() const { return tracker_; }  // may be null: allocations untracked

  // Charges the tracker, then allocates; throws OutOfMemory. nbytes == 0 returns nullptr.
  void* allocate(size_t nbytes, MemoryCategory category, const std::string& what);
  void deallocate(void* ptr, size_t nbytes, MemoryCategory category, const std::string& what);

 protected:
  virtual void* raw_allocate(size_t nbytes) = 0;
  virtual void raw_deallocate(void* ptr, size_t nbytes) = 0;

 private:
  const Device device_;
  MemoryTracker* const tracker_;
};

// How a CpuAllocator caches freed blocks.
struct CpuAllocatorOptions {
  // Keep freed blocks for reuse instead of handing them back to malloc.
  bool caching = true;
  // Blocks smaller than this are never cached: malloc's own free lists serve them well, and
  // the cache is for the large buffers a sharded step frees and re-allocates (gathered
  // parameters, gradient buffers, activations), which malloc returns to the kernel.
  size_t min_cached_bytes = size_t{64} << 10;
  // At most this many bytes stay cached; a block freed beyond it goes back to malloc.
  size_t max_cached_bytes = ~size_t{0};
};

// What a CpuAllocator holds, in bytes. "Reserved" is what it holds from the system: the blocks
// in use (at their size-class capacity, not the requested size) plus the cached free blocks.
// The MemoryTracker, by contrast, is charged only the requested bytes of live allocations — the
// split of PyTorch's caching allocator into "allocated" and "reserved".
struct CpuAllocatorStats {
  size_t reserved_bytes = 0;
  size_t peak_reserved_bytes = 0;  // since construction or reset_peak_reserved()
  size_t cached_bytes = 0;         // free blocks kept for reuse (part of reserved)
  size_t cached_blocks = 0;
  uint64_t cache_hits = 0;    // allocations served from the cache
  uint64_t cache_misses = 0;  // cacheable allocations that had to ask malloc
};

// Host memory aligned to 64 bytes (a cache line; one AVX-512 vector), with a cache of freed
// blocks.
//
// Why a cache: stage 2/3 free a unit's gathered parameters and gradient buffer after each use
// and allocate them again for the next forward or backward. Blocks that large come from mmap
// or the top of the heap, and glibc gives them back to the kernel on free, so every step
// page-faults (and the kernel zeroes) the same memory again. A freed block of at least
// min_cached_bytes goes to a free list of its size class instead, and the next allocation of
// that class takes it back without touching the system. Size classes: sizes are rounded up to
// a multiple of max(4 KiB, 2^⌊log2 n⌋ / 8) — eight classes per power of two, at most 12.5%
// over the request — so the same buffer sizes, step after step, reuse the same blocks.
//
// Accounting: the tracker sees only live bytes by category (a cached block is charged to no
// one; a budget counts live bytes only, so OutOfMemory is raised on live bytes exactly as
// without a cache, and a failed charge leaves the cache untouched). stats() reports what the
// allocator reserves. empty_cache() frees every cached block; it is also what happens, once,
// before an allocation that malloc refuses is retried. Blocks in use are never moved.
// Thread-safe (one mutex around the free lists).
class CpuAllocator : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  // Larger requests fail with OutOfMemory (their size-class rounding would overflow).
  static constexpr size_t kMaxBlockBytes = size_t{1} << 62;
  explicit CpuAllocator(MemoryTracker* tracker, const CpuAllocatorOptions& options = {});
  ~CpuAllocator() override;  // frees the cached blocks

  // The capacity of the block an allocation of nbytes gets (its size class when cacheable).
  size_t block_bytes(size_t nbytes) const;
  CpuAllocatorStats stats() const;
  void reset_peak_reserved();
  // Hands every cached block back to malloc.
  void empty_cache();
  const CpuAllocatorOptions& options() const { return options_; }

 protected:
  void* raw_allocate(size_t nbytes) override;
  void raw_deallocate(void* ptr, size_t nbytes) override;

 private:
  bool cacheable(size_t nbytes) const {
    return options_.caching && nbytes >= options_.min_cached_bytes;
  }
  void empty_cache_locked();

  const CpuAllocatorOptions options_;
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_blocks_;  // by block size; guarded
  CpuAllocatorStats stats_;                                     // guarded by mutex_
};

}  // namespace zs
