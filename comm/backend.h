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
//
// Device backends (buffers in device memory, work on the backend's own stream: "nccl") may also
// let collectives run past the primitive's return, so that the communicator thread issues the
// next collectives while earlier ones run and no thread blocks the compute stream's owner:
// - prepare(), on the ISSUING thread at the moment a collective is queued, returns the
//   collective's DeviceSync after capturing the work the caller's compute stream had enqueued so
//   far (an event recorded there and then — later would also capture work the caller enqueued
//   after the call, which may be the very work that waits for this collective: a deadlock).
// - A primitive called with Call::sync set makes its device work wait for that capture,
//   enqueues the collective, records its completion in the sync, and returns: the collective is
//   issued, not complete. Without Call::sync (the CPU backends, split, direct callers) it is
//   complete on return as above.
// - poll() then tells the communicator thread whether an issued collective completed, and
//   throws CommTimeout/CommError like a blocking primitive would (it never blocks for long).
// The defaults below are those of a backend whose buffers are host memory: prepare() returns
// null, and only the host is a valid compute stream.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/types.h"
#include "runtime/dtype.h"

namespace zs::comm {

using Clock = std::chrono::steady_clock;

// The device-side state of one collective on a device backend (for nccl: the event captured
// on the compute stream at issue and the completion event on the comm stream); opaque to the
// generic layer. Made by Backend::prepare() on the issuing thread, filled in by the primitive on
// the communicator thread, held by the Work until the Work is destroyed (it must therefore not
// hold anything that needs the backend alive: the backend releases such things in poll()).
class DeviceSync {
 public:
  virtual ~DeviceSync() = default;
  // Makes work enqueued on `stream` after this call wait — on the device, the host does not
  // block — for the collective's device work. Only called once the primitive has issued the
  // collective (Work::wait_on guarantees it). `stream` is a device stream (not the host).
  // Thread-safe against the communicator thread.
  virtual void order_stream(const StreamRef& stream) = 0;
};

// Identity of one call, for errors and peer checks.
struct Call {
  CollectiveKind kind;
  uint64_t sequence;  // per communicator, counts every call in issue order from 0
  Clock::time_point deadline;
  std::string tag;  // CollectiveOptions::tag
  // Set by the Communicator when prepare() returned one: the primitive only issues the
  // collective (see the file comment). Null: the primitive completes it.
  std::shared_ptr<DeviceSync> sync = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* name() const = 0;  // "local", "mpi", "nccl"

  // In place: data holds `count` elements on every rank.
  virtual void all_reduce(void* data, size_t count, DType dtype, ReduceOp op, const Call& call) = 0;
  // shard: `count` elements; full: size()·count elements, rank-major. In-place form: shard ==
  // full + rank()·count (this rank's slot); then only the other ranks' slices are written, and
  // the slot is read, never copied onto itself. The Communicator passes no other overlap.
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

  // ---- Stream ordering (see the file comment). Defaults: a backend of host buffers.

  // Throws InvalidArgument unless collectives can be ordered after `stream` (a device stream;
  // the host needs no check). Default: refuses every device stream, naming the backend.
  // Called by Communicator::set_compute_stream on the issuing thread.
  virtual void check_compute_stream(const StreamRef& stream) const;
  // On the issuing thread, when a collective of `kind` is queued: its DeviceSync, after
  // capturing what `compute` has enqueued so far (nothing when `compute` is the host). Null
  // (the default): this collective's primitive completes before it returns. Thread-safe against
  // the primitives running on the communicator thread.
  virtual std::shared_ptr<DeviceSync> prepare(CollectiveKind kind, const StreamRef& compute);
  // For a collective whose primitive ran with call.sync set: true once it has completed on this
  // rank (its outputs are final, its inputs no longer read); false while it runs. Throws
  // CommTimeout once call.deadline has passed, CommError on an asynchronous error or abort.
  // Never blocks for long. Default: true (never reached, prepare() returns null).
  virtual bool poll(const Call& call);
  // Bytes this backend has copied locally on this rank since it was made (monotonic): every
  // memcpy from one buffer to another that its primitives do or enqueue (host or device copies,
  // staging copies), including a transport made of copies (the local backend reads its peers'
  // buffers). Bytes a network or NCCL moves between ranks are traffic, not copies. Read on the
  // communicator's thread around each primitive (CommStats::bytes_copied). Default: 0.
  virtual uint64_t bytes_copied() const { return 0; }
  // Called once on the communicator's thread, before it runs any primitive or poll() there: a
  // device backend makes its device that thread's current one (for good, so that device guards
  // on the thread restore it rather than device 0). Default: nothing.
  virtual void bind_thread() {}
};

}  // namespace zs::comm
