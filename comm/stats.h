// CommStats: per collective kind, the number of calls, the bytes this rank sent and received
// (by the algorithm's definition — e.g. a ring all-reduce of B bytes over N ranks sends and
// receives 2·(N−1)/N·B), the bytes the backend copied locally on this rank (measured, not a
// formula: Backend::bytes_copied()), and the time the communicator thread spent running them.
// Resettable (per step); printable as a table. Thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>

#include "comm/types.h"

namespace zs::comm {

struct CollectiveStats {
  uint64_t calls = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  // Bytes the backend copied from one buffer to another on this rank: the local backend's
  // reads of its peers' buffers (its transport) and of its own, the mpi backend's staging and
  // own-slice copies, the nccl backend's device copies. An in-place all-gather copies only the
  // other ranks' slices on local, and nothing on mpi and nccl (their transport writes them).
  uint64_t bytes_copied = 0;
  double seconds = 0;

  CollectiveStats& operator+=(const CollectiveStats& other);
};

class CommStats {
 public:
  void record(CollectiveKind kind, uint64_t bytes_sent, uint64_t bytes_received,
              uint64_t bytes_copied, double seconds);
  CollectiveStats get(CollectiveKind kind) const;
  CollectiveStats total() const;
  void reset();
  // One row per kind with calls > 0, plus a total row.
  std::string table() const;

 private:
  mutable std::mutex mutex_;
  std::array<CollectiveStats, kNumCollectiveKinds> by_kind_{};
};

// Bytes one rank sends and receives for a collective of `bytes` (the full buffer for
// all_reduce/broadcast, the gathered/full buffer for all_gather/reduce_scatter/gather/scatter)
// on `size` ranks, by the algorithms the backends use (ring for all-reduce, all-gather and
// reduce-scatter; direct root transfers for gather/scatter; a pipelined chain for broadcast).
struct Traffic {
  uint64_t sent = 0;
  uint64_t received = 0;
};
Traffic collective_traffic(CollectiveKind kind, uint64_t bytes, int size, int rank, int root);

}  // namespace zs::comm
