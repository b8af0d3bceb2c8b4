// Allocators: every byte a tensor holds comes from a device allocator that charges the device's
// MemoryTracker first (so a budget stops the allocation before it happens) and then asks the
// device for memory.
//
// An allocator is an object a rank owns and passes in (no global allocator): ops allocate their
// outputs from the allocator of their inputs' storage. The tracker must outlive the allocator,
// and the allocator must outlive every Storage it made. Allocate/deallocate are thread-safe.
#pragma once

#include <cstddef>
#include <string>

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

// Host memory aligned to 64 bytes (a cache line; one AVX-512 vector).
class CpuAllocator : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  explicit CpuAllocator(MemoryTracker* tracker) : Allocator(Device::cpu(), tracker) {}

 protected:
  void* raw_allocate(size_t nbytes) override;
  void raw_deallocate(void* ptr, size_t nbytes) override;
};

}  // namespace zs
