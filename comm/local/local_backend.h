// The `local` backend: N ranks as threads of one process, exchanging data through shared memory.
//
// A LocalGroup is the state the N ranks share (one slot per rank, mailboxes for send/recv, the
// abort flag). It is created once and shared (shared_ptr): each rank's Backend holds a
// reference, so the group lives as long as any of its backends. Each Backend is owned by the
// Communicator of the rank thread that uses it; the group itself is thread-safe.
//
// How a collective runs: every rank posts its buffer pointers and the call's identity (kind,
// count, dtype, op, root) in its slot and waits until all ranks have posted; each rank then
// checks that all postings agree (a disagreement fails the collective on every rank with a
// CommError naming rank 0's call and the first differing rank's call). Ranks then read their
// peers' buffers directly — no staging copies — and a final rendezvous keeps every buffer alive
// until all ranks have finished reading it.
// - all_gather: each rank copies every rank's shard into its own full buffer; in the in-place
//   form (the shard is the rank's slot of full) all but its own, (N−1)/N of full.
// - all_reduce: rank s reduces the s-th contiguous slice of the element range over ranks
//   0, 1, …, N−1 in that order, into its own buffer; after a middle rendezvous every rank copies
//   the other slices from their owners. The per-element arithmetic is exactly that of
//   reduce_scatter, so all_reduce gives the same bits as reduce_scatter + all_gather.
// - Arithmetic: fp32 accumulates in fp32. fp16/bf16 are widened to fp32 (bulk conversions of
//   runtime/half.h), accumulated in fp32 and rounded once (nearest even). avg = the fp32 sum
//   divided by N in fp32 (not multiplied by 1/N), then rounded once to fp16/bf16. int32 and
//   int64 sums wrap modulo 2^32 and 2^64 (overflow is the caller's problem); their avg is the
//   wrapped sum divided by N with C++ `/` (truncation toward zero). max/min compare in the element
//   type's value.
// - send/recv are eager: if the receiver is already waiting in the matching recv, send copies
//   straight into its buffer; otherwise send copies the data into the receiver's mailbox (one
//   FIFO per sender) and returns. So send never waits for the receiver, and two ranks that both
//   send first do not deadlock; the price is a staging copy (and its memory) when the receiver
//   is late. recv takes the oldest message from its peer and checks its count and dtype.
// - split(color, key): rank 0 of the group forms the new groups (members ordered by
//   (key, old rank)); aborting a group also aborts every group split from it.
//
// Waits spin briefly (yielding the core) and then block on a condition variable until the
// call's deadline. A timeout throws CommTimeout naming the collective, its sequence number, this
// rank, the sizes, and which ranks have not arrived (with the last call each of them issued on
// this group). abort(reason) fails every pending and future call of the group with CommError.
//
// The transport is memcpy, so bytes_copied() counts every byte a rank's primitives copy: its
// peers' data it reads into its buffers, eager send/recv staging, its own data moved in place.
//
// Each rank's buffers must be its own (two ranks must not pass the same memory).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/backend.h"
#include "comm/communicator.h"

namespace zs::comm {

class LocalGroup {
 public:
  // A group of `size` ranks (size >= 1).
  static std::shared_ptr<LocalGroup> create(int size);
  virtual ~LocalGroup() = default;

  virtual int size() const = 0;
  // The backend of `rank`; each rank's backend can be taken once.
  virtual std::unique_ptr<Backend> backend(int rank) = 0;
  // Fails every pending and future call of this group (and of groups split from it).
  virtual void abort(const std::string& reason) = 0;
  virtual bool aborted() const = 0;
};

// A new group of `size` ranks; element r is rank r's backend.
std::vector<std::unique_ptr<Backend>> make_local_backends(int size);

struct LocalRunOptions {
  // Wraps each rank's backend before its Communicator is built (e.g. in a
  // FaultInjectingBackend); identity when empty.
  std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend> backend, int rank)> wrap_backend;
  // Makes each rank's Communicator on the rank's own thread from its local backend — e.g. an
  // nccl group formed over it (comm/factory.h run_gpu_ranks), a collective across the threads —
  // instead of a Communicator over the local backend itself. When a rank fails, every other
  // rank's Communicator made this way is aborted too (abort()), not only the local group, so
  // ranks waiting in its collectives fail at once.
  std::function<std::unique_ptr<Communicator>(std::unique_ptr<Backend> local, int rank)>
      make_communicator;
  // The timeout() of each rank's Communicator (when make_communicator is empty): the bound of
  // every collective whose options name none.
  std::chrono::milliseconds timeout = default_timeout();
};

// Runs fn(comm) on `size` threads, one per rank, each inside RankScope(rank) with its own
// Communicator over one local group, and returns when all have finished. If a rank throws, the
// group is aborted at once (so the others fail fast instead of waiting for a timeout), and after
// every thread has joined the root cause is rethrown: the first non-communication error by rank
// order, else the error of the rank that aborted the group first, else the first timeout, else
// the first error by rank order.
void run_local_ranks(int size, const std::function<void(Communicator&)>& fn,
                     const LocalRunOptions& options = {});

}  // namespace zs::comm
