// The `mpi` backend: one rank per process, over any standard MPI-3 library (Open MPI, MPICH).
//
// Ownership. MpiRuntime initializes MPI (MPI_Init_thread, MPI_THREAD_MULTIPLE requested) and
// finalizes it when destroyed. Every MpiBackend holds a shared_ptr to it, so MPI is finalized
// only after the last backend (world or split) is gone; whoever creates the world backend
// creates the runtime (the factory, comm/factory.h, or a test main). MPI can be initialized
// once per process: creating a runtime after MPI was finalized fails, and a runtime created
// while MPI is already initialized (by the application or another runtime) adopts it and never
// finalizes it. MPI's own process-wide state is the only global here; the runtime adds none.
//
// Threads. Each Communicator runs its backend on its own thread, and split() communicators have
// threads of their own, so several threads call MPI at once. Debian's Open MPI 4.1 and MPICH 4.0
// both provide MPI_THREAD_MULTIPLE. When a library provides only MPI_THREAD_SERIALIZED (or MPI was
// initialized by the application at that level), every MPI call of every backend of the process
// goes through one mutex of the runtime instead; below SERIALIZED the runtime refuses to start.
//
// How calls run. Every wait is a nonblocking MPI call polled with MPI_Test (yielding, then
// sleeping briefly between polls) until the call's deadline: a collective never blocks forever.
// Before each group collective the ranks agree on the call — one small MPI_Iallreduce of its
// kind, count, dtype, op, root and the group's collective counter — so a rank that skipped or
// reordered a collective gives a CommError naming both sides instead of corrupt data or a hang.
// - broadcast / gather / scatter / barrier: MPI_Ibcast, MPI_Igather, MPI_Iscatter; barrier is
//   the call check itself (which completes only when every rank has arrived). MPI moves raw
//   elements; nothing is converted.
// - all_gather: MPI_Irecv from and MPI_Isend to every peer (tag kGatherTag), then this rank's
//   shard is copied into its place (unless it is there already) — the order of Open MPI's
//   blocking MPI_Allgather, which measured 5–10% faster at 16 MiB on 2 ranks than
//   MPI_Iallgather, whose schedule copies the own shard first. The in-place form (the shard is
//   the rank's slot of full, Communicator::rank_slice) is MPI_IN_PLACE's: the slot is sent from
//   where it lies and nothing is copied.
// - reduce_scatter: MPI_Ialltoallv delivers to each rank its slice from every other rank, and the
//   rank reduces those slices and its own, in rank order 0, 1, …, N−1. all_reduce: the same over
//   near-equal contiguous slices, then all_gather's exchange of the reduced slices in place. The
//   rank's own slice never goes through MPI: it is read where it lies (and, for all_reduce, the
//   result written over it), which saves a copy of 1/N of the buffer into staging and its
//   reading back. This moves the bytes of a ring all-reduce (2·(N−1)/N of the buffer each way)
//   but, unlike MPI_Iallreduce / MPI_Ireduce_scatter_block, fixes the order of the additions, so
//   results are deterministic, identical to the local backend's, and all_reduce gives the same
//   bits as reduce_scatter + all_gather. fp16/bf16 travel as 16-bit values and are widened to
//   fp32 for the reduction (fp32 accumulation, rounded once); avg divides the fp32 sum by N in
//   fp32; int32/int64 sums wrap and their avg truncates (comm/local/local_backend.h states the same
//   rules). The slices received from the N−1 peers go to a staging buffer of at most
//   MpiBackendOptions::max_staging_bytes; larger collectives run in pieces.
// - send / recv: MPI_Isend / MPI_Irecv; the tag carries the dtype and recv checks the count.
// - split: an MPI_Iallgather of (color, key) under the deadline, then MPI_Comm_split (which has
//   no nonblocking form; every rank is known to have arrived by then).
//
// Failure. A timeout throws CommTimeout naming the collective, its sequence number, the rank and
// the sizes, and which peers are lost: before throwing, the rank probes its peers
// (comm/mpi/peer_probe.h) on a communicator of the probe's own, for at most
// MpiBackendOptions::probe_window, and the error lists the peers that did not answer (dead,
// frozen, cut off, or outside every MPI call), those alive but in another call, and those
// waiting in this collective too. Every wait below answers such probes, so a rank that waits in
// any call of its world (or a group split from it), however slowly, shows as alive. A pending
// nonblocking MPI call cannot be cancelled, so after a timeout the group — and with MPI the job —
// cannot continue: abort(reason) logs the reason and calls MPI_Abort on MPI_COMM_WORLD, which ends
// every process of the job (mpirun prints which rank aborted). The Communicator calls abort() on
// the first timeout or disagreement, so one failing rank ends the job within its timeout instead of
// leaving the others waiting; a rank killed outright is reaped by mpirun, or its peers time out.
// MPI errors come back as return codes (MPI_ERRORS_RETURN on every communicator created here) that
// ZS_MPI_CHECK turns into CommError, or InvalidArgument for argument errors, naming the MPI
// function and the collective.
//
// Thread-safety: an MpiBackend is used by one thread at a time (its Communicator's); abort(),
// rank(), size() may be called from any thread. MpiRuntime is thread-safe.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/backend.h"

namespace zs::comm {

// Initializes and finalizes MPI for the process (see the file comment).
class MpiRuntime {
 public:
  // Initializes MPI (requesting MPI_THREAD_MULTIPLE) or adopts an MPI initialized already.
  // Throws CommError if MPI was finalized, or provides less than MPI_THREAD_SERIALIZED.
  MpiRuntime();
  // MPI_Finalize if this runtime initialized MPI. During stack unwinding (a rank leaving on an
  // exception) it calls MPI_Abort instead, so the other ranks stop now rather than wait for it.
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  // MPI_THREAD_SINGLE … MPI_THREAD_MULTIPLE, as the library provided it.
  int thread_level() const { return thread_level_; }
  // True when calls are serialized through lock() (the library lacks MPI_THREAD_MULTIPLE).
  bool serialized() const { return thread_level_ < MPI_THREAD_MULTIPLE; }
  // "Open MPI v4.1.4" / "MPICH Version: 4.0.2" (from MPI_Get_library_version).
  const std::string& library_version() const { return library_version_; }
  // Rank and size of MPI_COMM_WORLD.
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }

  // Held around every MPI call: locks the process's MPI mutex when serialized(), else nothing.
  std::unique_lock<std::mutex> lock();

 private:
  bool owns_mpi_ = false;
  int uncaught_at_init_ = 0;
  int thread_level_ = 0;
  int world_rank_ = 0;
  int world_size_ = 1;
  std::string library_version_;
  std::mutex mutex_;
};

// Every rank of a group must use the same options (they decide how many MPI calls a collective
// makes).
struct MpiBackendOptions {
  // Agree on every group collective before running it (one small all-reduce, a few µs on one
  // node). Off, a rank that skipped or reordered a collective may corrupt data or time out
  // instead of failing with a CommError that names both calls.
  bool check_calls = true;
  // Largest staging buffer of an all_reduce / reduce_scatter (the slices this rank receives from
  // its N−1 peers to reduce); larger collectives run in pieces, each peer sending at most
  // max_staging_bytes / (N−1) bytes per piece. The backend keeps the buffer for the next call
  // (it is not charged to a MemoryTracker).
  size_t max_staging_bytes = size_t{1} << 20;  // 1 MiB pieces stay in cache (bench/mpi)
  // Longest the peer probe after a timeout waits for the peers' answers (see the file comment).
  // The window is also at most half of what the timed-out wait lasted, and at least
  // kMinProbeWindow; it ends early once every peer has answered. Waiting peers answer within
  // about a millisecond; the margin is for loaded or oversubscribed machines. 0: no probe.
  std::chrono::milliseconds probe_window{2000};
  static constexpr std::chrono::milliseconds kMinProbeWindow{200};
};

class PeerProbe;  // comm/mpi/peer_probe.h

// Owns an MPI_Comm (MPI_Comm_free on destruction; the predefined communicators are never freed).
class MpiComm {
 public:
  MpiComm() = default;
  explicit MpiComm(MPI_Comm comm) : comm_(comm) {}
  ~MpiComm();
  MpiComm(MpiComm&& other) noexcept : comm_(other.comm_) { other.comm_ = MPI_COMM_NULL; }
  MpiComm& operator=(MpiComm&& other) noexcept;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  MPI_Comm get() const { return comm_; }
  bool is_null() const { return comm_ == MPI_COMM_NULL; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

class MpiBackend final : public Backend {
 public:
  // A backend over a duplicate of MPI_COMM_WORLD (MPI_Comm_idup, so the application's own use of
  // MPI_COMM_WORLD never matches ours), with the peer probe on a second duplicate and every
  // rank's processor name gathered for its errors. Collective over the world; throws
  // CommTimeout if not every rank arrives within `timeout`.
  static std::unique_ptr<MpiBackend> world(std::shared_ptr<MpiRuntime> runtime,
                                           std::chrono::milliseconds timeout = default_timeout(),
                                           MpiBackendOptions options = {});
  ~MpiBackend() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "mpi"; }
  // The copies this backend makes itself: a separate all-gather shard moved into its slot, and
  // the staging of an input that overlaps its output. MPI's own internal copies are not seen.
  uint64_t bytes_copied() const override { return bytes_copied_; }

  void all_reduce(void* data, size_t count, DType dtype, ReduceOp op, const Call& call) override;
  void all_gather(const void* shard, void* full, size_t count, DType dtype,
                  const Call& call) override;
  void reduce_scatter(const void* full, void* shard, size_t count, DType dtype, ReduceOp op,
                      const Call& call) override;
  void broadcast(void* data, size_t count, DType dtype, int root, const Call& call) override;
  void gather(const void* in, void* out, size_t count, DType dtype, int root,
              const Call& call) override;
  void scatter(const void* in, void* out, size_t count, DType dtype, int root,
               const Call& call) override;
  void barrier(const Call& call) override;
  void send(const void* data, size_t count, DType dtype, int peer, const Call& call) override;
  void recv(void* data, size_t count, DType dtype, int peer, const Call& call) override;
  std::unique_ptr<Backend> split(int color, int key, const Call& call) override;
  // Logs `reason` and calls MPI_Abort on MPI_COMM_WORLD: every process of the MPI job ends, not
  // only this group's (see the file comment).
  void abort(const std::string& reason) override;

  // The ranks of this group that share this node's memory (MPI_Comm_split_type with
  // MPI_COMM_TYPE_SHARED), ordered by rank: the inner group of hybrid sharding. Collective over
  // this group like split(); call it from the thread that runs this backend's collectives (or
  // before handing the backend to a Communicator).
  std::unique_ptr<MpiBackend> split_node_local(const Call& call);

  // The communicator (owned by this backend), for interop and tests.
  MPI_Comm comm() const { return comm_.get(); }
  const std::shared_ptr<MpiRuntime>& runtime() const { return runtime_; }

 private:
  struct Pending;  // the request and buffers of one nonblocking MPI call (mpi_backend.cc)

  // `probe`: the world's peer probe, shared with every group split from it.
  MpiBackend(std::shared_ptr<MpiRuntime> runtime, MpiComm comm, MpiBackendOptions options,
             std::shared_ptr<PeerProbe> probe);
  // A backend without a communicator yet, only to poll the creation of the world's.
  MpiBackend(std::shared_ptr<MpiRuntime> runtime, int rank, int size);

  // Agrees with every rank on the call about to run (see MpiBackendOptions::check_calls);
  // op and root are −1 where they do not apply.
  void check_call(const Call& call, const std::string& what, size_t count, DType dtype, int op,
                  int root);
  // Polls `pending` until its requests complete; throws CommTimeout at the deadline and
  // CommError once aborted (then `pending` is moved to abandoned_). `what` names the call for
  // errors ("all_reduce #3 (4096 fp32, sum)"), `stage` what it was waiting for.
  void wait(std::unique_ptr<Pending>& pending, const Call& call, const std::string& what,
            const char* stage);
  std::string describe(const Call& call, size_t count, DType dtype, const char* extra) const;
  // After `call` timed out having waited `waited`: probes the peers (see the file comment) and
  // describes them, as a sentence ending in ". ", or "" without a probe (a group of one, or
  // the world communicator's creation).
  std::string probe_peers(const Call& call, Clock::duration waited);
  // The all-gather of all_gather and of all_reduce's phase 2, point to point (MPI_Irecv from and
  // MPI_Isend to every peer): rank j's counts[j] elements land at element displs[j] of `full` on
  // every rank (displs ascending). This rank sends `own`, which is either its slot in `full` or
  // a separate buffer copied into the slot after the exchange.
  void gather_slices(const void* own, void* full, const std::vector<size_t>& counts,
                     const std::vector<size_t>& displs, DType dtype, const Call& call,
                     const std::string& what, const char* stage);
  // Elements per slice in one piece of a reduction: a piece from each of the N−1 peers fills at
  // most options_.max_staging_bytes (at least one element).
  size_t staging_piece(size_t element_size) const;
  // One piece of a reduce-scatter (all_reduce's phase 1, reduce_scatter): `pending` carries the
  // send counts and displacements (elements of `send`) for every rank; this rank's entry is
  // ignored. Receives `len` elements from every peer into staging_, then reduces in rank order
  // those and this rank's own `len` elements, read at `own`, into `out` (which may be `own`).
  void exchange_and_reduce(std::unique_ptr<Pending> pending, const void* send, const void* own,
                           void* out, size_t len, DType dtype, ReduceOp op, const Call& call,
                           const std::string& what);
  // Keeps the staging buffers of a call that timed out alive: MPI may still write into them
  // until the process ends (a pending nonblocking call cannot be cancelled).
  void abandon(std::unique_ptr<Pending> pending);

  // Declared first so that it is destroyed last: MPI_Comm_free must precede MPI_Finalize.
  std::shared_ptr<MpiRuntime> runtime_;
  std::shared_ptr<PeerProbe> probe_;  // null only while creating the world
  MpiComm comm_;
  MpiBackendOptions options_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> world_ranks_;  // MPI_COMM_WORLD rank of each rank of this group
  int64_t group_id_ = 0;          // a hash of world_ranks_: the same on every member
  uint64_t collectives_ = 0;      // group collectives issued on this backend, for check_call
  uint64_t bytes_copied_ = 0;     // see bytes_copied(); on the communicator's thread
  std::atomic<bool> aborted_{false};
  std::mutex abort_mutex_;
  std::string abort_reason_;            // the first abort's reason
  std::vector<unsigned char> staging_;  // reused by all_reduce / reduce_scatter
  std::vector<std::unique_ptr<Pending>> abandoned_;
};

}  // namespace zs::comm
