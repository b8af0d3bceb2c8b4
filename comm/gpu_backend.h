// The registry entry of a communication backend that moves device tensors (nccl): how the
// factory (comm/factory.cc) forms its world without depending on the backend's library.
//
// zs_comm_nccl depends on zs_comm, never the other way round: comm/nccl/register.cc installs this
// table in DeviceTables<GpuCommBackend> (runtime/device_kernels.h) under Device::Kind::kCUDA when
// the program links zs_comm_nccl (its INTERFACE link options pull register.cc in; zs_train links
// it in a CUDA build). The factory finds the slot empty in a build without CUDA, or in a program
// that does not link the backend, and then refuses "nccl" by name.
//
// Internal to comm/ and its backends. Thread-safety: the table is immutable; its functions are
// as thread-safe as the factory's callers need (each forms one rank's backend).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/backend.h"
#include "runtime/memory_tracker.h"

namespace zs::comm {

struct GpuCommBackend {
  const char* name = "";  // "nccl"
  // GPUs this process sees; when 0 and `why` is not null, the driver's reason.
  int (*device_count)(std::string* why) = nullptr;
  // Makes `device` the calling thread's current GPU (for good: see make_world_communicator).
  void (*make_current)(int device) = nullptr;
  // One rank of a group over `bootstrap`'s ranks on `device` (collective over `bootstrap`,
  // which the backend keeps alive); `scratch_tracker` (may be null) is charged for its device
  // scratch.
  std::unique_ptr<Backend> (*create)(std::unique_ptr<Backend> bootstrap, int device,
                                     std::chrono::milliseconds timeout,
                                     MemoryTracker* scratch_tracker) = nullptr;
  // Groups whose ranks have no CPU backend to bootstrap over (torchrun's launch): rank 0 makes
  // NCCL's unique id as bytes, the caller carries it to the other ranks (comm/tcp_rendezvous.h),
  // and each rank forms its member of the group of `size` ranks from those bytes.
  std::vector<uint8_t> (*make_unique_id)() = nullptr;
  std::unique_ptr<Backend> (*create_from_id)(const std::vector<uint8_t>& unique_id, int rank,
                                             int size, int device,
                                             std::chrono::milliseconds timeout,
                                             MemoryTracker* scratch_tracker) = nullptr;
};

}  // namespace zs::comm
