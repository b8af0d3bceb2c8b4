// HostPool: the host tier of one rank — host memory for what is offloaded from the rank's
// device (ZeRO-Offload: the fp32 masters, the optimizer state and the host copy of the gradient
// shard), with its own MemoryTracker (the "host" tier, per category like the device's) and its
// own budget (zs-train --host-memory-budget).
//
// Buffers are aligned to 64 bytes (a cache line, one AVX-512 vector: what the vectorized CPU
// AdamW streams through). On a CUDA rank they are page-locked (pinned), so that copies between
// the device and this tier run at full bus speed; the pinned allocator comes from offload/cuda
// through the HostMemoryBackend table, which a CUDA build fills when zs_offload_cuda is linked —
// without it, a pool for a CUDA rank is refused by name. The buffers are allocated once (at
// construction of what owns them) and kept, so the pool keeps no cache of its own: pinning is
// slow, and a cache would hide host memory from the budget.
//
// The budget. The tier's tracker counts live bytes by category (its own budget stays 0); the
// pool's allocator checks the tier's total against the pool's budget after the tracker is
// charged and before any memory is taken, and refuses with an OutOfMemory that names the host
// tier, the bytes and what to do — the device tracker's advice ("offload the optimizer") would
// be the wrong one here. A refused allocation is uncharged again (Allocator::allocate) but its
// bytes stay in the tier's peak; the run ends on that error anyway.
//
// Ownership: the pool owns its tracker and allocators; it must outlive every tensor it made.
// Thread-safety: allocate/deallocate are thread-safe (a rank's compute and communicator threads
// both may free); budget() and the tracker's readers too.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/memory_tracker.h"

namespace zs::offload {

// One device kind's host memory for copies to and from it (DeviceTables<HostMemoryBackend>,
// runtime/device_kernels.h), installed by its library. Immutable, static storage.
struct HostMemoryBackend {
  const char* name = "";  // "cuda"
  // A new untracked allocator of page-locked host memory (host_visible, device cpu).
  std::unique_ptr<Allocator> (*make_pinned)() = nullptr;
};

struct HostPoolOptions {
  // Bytes the tier may hold at once; 0: unlimited.
  size_t budget = 0;
  // The rank's compute device: a CUDA device gets pinned memory, the CPU plain aligned memory.
  Device device = Device::cpu();
};

class HostPool {
 public:
  // `name` names the tier in errors and reports ("rank 3 host"). Throws InvalidArgument when
  // the device needs pinned memory and this program has no backend for it.
  HostPool(std::string name, const HostPoolOptions& options);
  ~HostPool();
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  // Where the tier's tensors come from (host-visible, device cpu).
  Allocator& allocator();
  MemoryTracker& tracker() { return tracker_; }
  const MemoryTracker& tracker() const { return tracker_; }
  size_t budget() const { return budget_; }
  bool pinned() const { return pinned_; }

 private:
  class TierAllocator;
  MemoryTracker tracker_;
  const size_t budget_;
  bool pinned_ = false;
  std::unique_ptr<TierAllocator> allocator_;
};

}  // namespace zs::offload
