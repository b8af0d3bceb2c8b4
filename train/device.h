// The compute device of one rank of the engine: the CPU, or one GPU with its compute stream,
// its stream-ordered allocator (charged to the rank's MemoryTracker, so --memory-budget and
// --profile-memory work per GPU) and a copy stream for the batches.
//
// This header includes no CUDA header. GPUs are reached through a registry: the CUDA build's
// zs_train_cuda (train/cuda/rank_device.cc, the engine's only CUDA code) installs a
// RankDeviceBackend for Device::Kind::kCUDA when a program links it (zs_train does; see
// runtime/device_kernels.h, "Registration"). Without that entry (a CPU build) cuda_devices() is 0
// with a reason naming the missing -DZS_CUDA=ON, and make_cuda_device throws InvalidArgument.
//
// Ordering: every op of the rank runs on stream() (the allocator's stream); the engine attaches
// it to its communicator (Communicator::set_compute_stream) so collectives follow the kernels
// that produce their inputs, and the ShardedModel makes kernels wait for collectives on the
// device (Work::wait_on). upload() copies a host batch on the copy stream and makes the compute
// stream wait for it there: the host waits for neither.
//
// Thread-safety: one RankDevice per rank, used by the rank's thread.
#pragma once

#include <memory>
#include <string>

#include "comm/types.h"
#include "runtime/allocator.h"
#include "runtime/host_copies.h"
#include "runtime/tensor.h"

namespace zs::train {

// CUDA devices this process sees: 0 without a driver or GPU, and always in a CPU build; `why`
// (if not null) then says why ("cudaErrorInsufficientDriver: …", or that the build has no CUDA).
int cuda_devices(std::string* why = nullptr);

class RankDevice {
 public:
  virtual ~RankDevice() = default;
  virtual Device device() const = 0;
  // The device's name as its driver gives it ("NVIDIA H200").
  virtual std::string name() const = 0;
  // Where the rank's tensors live; every allocation is ordered on stream().
  virtual Allocator& allocator() = 0;
  virtual comm::StreamRef stream() const = 0;
  // A device copy of the host tensor `host` (any dtype), in the current memory category. The
  // bytes go through pinned staging buffer `slot` (grown as needed, reused once the copy that
  // last used it has completed) on the copy stream; the compute stream waits for the copy on
  // the device. The host may reuse `host` as soon as this returns.
  virtual Tensor upload(const Tensor& host, size_t slot, const std::string& name) = 0;
  // Offload's copies between this device and the host tier (runtime/host_copies.h), on the copy
  // stream: a download after the compute stream's work so far, an upload before its later work.
  virtual HostCopies& host_copies() = 0;
};

// A device kind's entry in the registry (DeviceTables<RankDeviceBackend>), installed by its
// library. Immutable, static storage.
struct RankDeviceBackend {
  const char* name = "";  // "cuda"
  // Devices of this kind the process sees; when 0 and `why` is not null, the reason.
  int (*device_count)(std::string* why) = nullptr;
  // Device `index` for one rank (see make_cuda_device).
  std::unique_ptr<RankDevice> (*make)(int index, MemoryTracker* tracker) = nullptr;
};

// GPU `index` for one rank: a new compute stream, a CudaAllocator on it charged to `tracker`
// (which must outlive the device), a copy stream and pinned staging. Throws InvalidArgument naming
// the device in a build without CUDA.
std::unique_ptr<RankDevice> make_cuda_device(int index, MemoryTracker* tracker);

}  // namespace zs::train
