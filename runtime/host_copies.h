// HostCopies: copies between a rank's device memory and host memory that run beside the
// compute (offload's gradient downloads and parameter uploads, sharding/sharded_model.h), for
// the layers that may not include runtime/cuda/ (the CPU build has none).
//
// A GPU rank implements it with a copy stream and events (train/cuda/rank_device.cc): both
// directions start after the work enqueued on the compute stream so far (which may still read or
// write the device memory) and return at once; the compute-stream work enqueued after an upload
// waits for it on the device; the host waits for both with wait(). Until then the host must not
// read a download's bytes nor change an upload's (pinned host memory makes the copies asynchronous;
// pageable memory makes the driver stage them). Without a HostCopies (the CPU device) its users
// copy synchronously.
//
// Thread-safety: one rank's thread.
#pragma once

#include "runtime/tensor.h"

namespace zs {

class HostCopies {
 public:
  virtual ~HostCopies() = default;
  // host ← the bytes of `device` (nbytes()).
  virtual void download(const Tensor& device, void* host) = 0;
  // The bytes of `device` ← host (nbytes()).
  virtual void upload(const Tensor& device, const void* host) = 0;
  // Returns once every copy enqueued so far has completed.
  virtual void wait() = 0;
};

}  // namespace zs
