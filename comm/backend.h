// Backend: the blocking collective primitives a transport implements (local threads, MPI,
// NCCL). The Communicator front (comm/communicator.h) validates arguments, queues calls on
// its own thread, accounts traffic and wraps results in Work; a backend only moves and reduces
// bytes, on that one thread, in issue order.
//
// Contract for implementations:
// - Every primitive returns when its part of the collective is complete on this rank, or
//   throws CommTimeout once `deadline` has passed (naming the collective and Call::sequence),
//   or CommError if the group was aborted or a peer disagreed on the call (kind, count, dtype,
//   root). It never waits forever.
// - Buffers are contiguous host memory of `count` elements of `dtype`; fp16/bf16 reductions
//   accumulate in fp32 and round once. Reductions combine ranks in a fixed order (rank 0, 1,
//   …) so results are deterministic, and all_reduce gives the same bits as reduce_scatter
//   followed by all_gather.
// - abort() makes every pending and future call of the group fail fast with `reason`.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "comm/types.h"
#include "runtime/dtype.h"

namespace zs::comm {

using Clock = std::chrono::steady_clock;

// Identity of one call, for errors and peer checks.
struct Call {
  CollectiveKind kind;
  uint64_t sequence;  // per communicator, counts every call in issue order from 0
  Clock::time_point deadline;
  std::string tag;  // CollectiveOptions::tag
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* name() const = 0;  // "local", "mpi", "nccl"

  // In place: data holds `count` elements on every rank.
  virtual void all_reduce(void* data, size_t count, DType dtype, ReduceOp op, const Call& call) = 0;
  // shard: `count` elements; full: size()·count elements, rank-major.
  virtual void all_gather(const void* shard, void* full, size_t count, DType dtype,
                          const Call& call) = 0;
  // full: size()·count elements; shard receives this rank's reduced `count` elements.
  virtual void reduce_scatter(const void* full, void* shard, size_t count, DType dtype, ReduceOp op,
                              const Call& call) = 0;
  virtual void broadcast(void* data, size_t count, DType dtype, int root, const Call& call) = 0;
  // in: `count` elements; out (root only, else null): size()·count elements, rank-major.
  virtual void gather(const void* in, void* out, size_t count, DType dtype, int root,
                      const Call& call) = 0;
  // in (root only, else null): size()·count elements; out: `count` elements.
  virtual void scatter(const void* in, void* out, size_t count, DType dtype, int root,
                       const Call& call) = 0;
  virtual void barrier(const Call& call) = 0;
  virtual void send(const void* data, size_t count, DType dtype, int peer, const Call& call) = 0;
  virtual void recv(void* data, size_t count, DType dtype, int peer, const Call& call) = 0;
  // Collective over the group: ranks with the same color form a new group, ordered by
  // (key, old rank). color < 0: this rank joins no group (returns null).
  virtual std::unique_ptr<Backend> split(int color, int key, const Call& call) = 0;
  // Fails every pending and future call of the whole group with `reason`.
  virtual void abort(const std::string& reason) = 0;
};

}  // namespace zs::comm
