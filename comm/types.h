// Vocabulary of the communication layer: reduce ops, collective kinds, per-call options, and
// the device-agnostic name of a compute stream (StreamRef).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "runtime/device.h"

namespace zs::comm {

enum class ReduceOp { kSum, kAvg, kMax, kMin };
const char* reduce_op_name(ReduceOp op);

enum class CollectiveKind {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kGather,
  kScatter,
  kBarrier,
  kSend,
  kRecv,
  kSplit,
};
constexpr int kNumCollectiveKinds = 10;
const char* collective_name(CollectiveKind kind);  // "all_reduce", ...

// The timeout a communicator gets when its creator names none: ZS_COMM_TIMEOUT_S (seconds) when
// set to a positive number, else 600 s. Read once, at the first call. Programs that take a
// timeout of their own (zs-train --comm-timeout) pass it to the communicator they create instead;
// this is only the fallback.
std::chrono::milliseconds default_timeout();

struct CollectiveOptions {
  // Time the collective may take before it fails with CommTimeout; unset (the default, e.g.
  // `{{}, "tag"}`): the communicator's timeout (Communicator::timeout()).
  std::optional<std::chrono::milliseconds> timeout;
  // What the collective is for, named in errors ("unit blocks.3 all-gather").
  std::string tag;
};

// A compute stream as the device-agnostic comm layer sees it: the device it runs on and, for a
// device, the backend-native handle of the stream (a cudaStream_t for cuda:N; make one with
// comm::stream_ref(const zs::cuda::Stream&) from comm/nccl/nccl_backend.h). The comm layer never
// dereferences the handle: only the backend whose buffers live on that device does, so shared
// code needs no CUDA headers and the CPU build has no such type at all.
//
// StreamRef::host() (the default) is the CPU's "stream": the calling thread itself. Ordering a
// collective after or before the host means what it always meant — the caller's program order
// before the call, and Work::wait() after it.
//
// Borrowed, not owned: the stream must outlive every use the comm layer makes of it (see
// Communicator::set_compute_stream and Work::wait_on).
struct StreamRef {
  Device device = Device::cpu();
  void* native = nullptr;  // null for the host

  static StreamRef host() { return StreamRef{}; }
  bool is_host() const { return device.is_cpu(); }
  std::string str() const;  // "host" or "cuda:0 stream 0x…"
};

}  // namespace zs::comm
