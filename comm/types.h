// Vocabulary of the communication layer: reduce ops, collective kinds, per-call options.
#pragma once

#include <chrono>
#include <string>

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

// Default time a collective may take before it fails with CommTimeout (ZS_COMM_TIMEOUT_S
// overrides it process-wide when set).
std::chrono::milliseconds default_timeout();

struct CollectiveOptions {
  std::chrono::milliseconds timeout = default_timeout();
  // What the collective is for, named in errors ("unit blocks.3 all-gather").
  std::string tag;
};

}  // namespace zs::comm
