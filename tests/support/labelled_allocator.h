// Host memory that claims to be on another device (header-only), for GPU-free tests of device
// checks and device paths: tensors from it report Tensor::device() == the given device (cuda:N),
// so the code under test treats them as device memory, while their bytes are plain malloc'd host
// memory. Like real device memory it is not host-visible (Allocator::host_visible() is false):
// Tensor's host accessors (data<T>(), raw_data()) refuse its tensors by name; a fake device kernel
// (tests/support/fake_device_kernels.h) reaches the bytes through raw_device_data().
#pragma once

#include <cstddef>
#include <cstdlib>

#include "runtime/allocator.h"
#include "runtime/memory_tracker.h"

namespace zs::testing {

class LabelledAllocator : public Allocator {
 public:
  // Charges `tracker` when given (to see when tensors are let go).
  explicit LabelledAllocator(Device device, MemoryTracker* tracker = nullptr)
      : Allocator(device, tracker) {}

 protected:
  void* raw_allocate(size_t nbytes) override { return std::malloc(nbytes); }
  void raw_deallocate(void* ptr, size_t) override { std::free(ptr); }
};

}  // namespace zs::testing
