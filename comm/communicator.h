// Communicator: collectives among the ranks of a group, asynchronous, with timeouts and
// traffic accounting.
//
// Ordering contract: every rank of the group issues the same collectives in the same order
// (as in MPI and c10d). Calls are queued and run one at a time, in issue order, on the
// communicator's own thread (its "stream" on the CPU), so the caller computes while they run;
// for a device backend that thread issues them, in the same order, to the backend's comm
// stream, where they run in that order. The returned Work completes when the collective has
// run on this rank. A collective that does
// not complete within its timeout fails with CommTimeout naming the collective, its sequence
// number, the rank and the sizes — it never hangs. If a rank fails or aborts, the others fail
// fast with CommError naming it.
//
// Buffers: the Work holds the tensors until the collective has completed; the caller must not
// touch them (or, for inputs, change them) before it has completed, except through the stream
// ordering below. Where the tensors live is the backend's to say (buffer_device()): host memory
// for "local" and "mpi", the GPU of this rank for "nccl" (comm/nccl/nccl_backend.h). A tensor on
// the other kind of device is refused at the call with InvalidArgument, before anything is
// queued. Outputs are complete when wait() returns.
//
// Device tensors: ordering against the compute stream without host synchronization.
// - Issue side. set_compute_stream(stream) names the stream the caller's kernels run on. From
//   then on, every collective waits — on the device — for the work that stream had enqueued AT
//   THE MOMENT OF THE CALL: the backend records an event on the compute stream on the calling
//   thread, inside the call, and its comm stream waits for that event before the collective.
//   (Recording later, on the communicator thread, would also capture kernels the caller
//   enqueued after the call — possibly ones that wait for this very collective.) So a kernel
//   that writes a gradient bucket and a reduce_scatter of it need no synchronize in between.
//   Without a compute stream (the default, StreamRef::host()) inputs must be complete when the
//   call is issued (the producing stream synchronized), as before.
// - Completion side. work->wait_on(stream) makes later work on `stream` wait for the collective
//   on the device; the host waits only until the communicator thread has enqueued the
//   collective (work.h). The communicator thread issues collectives ahead of their completion
//   (up to kMaxInFlight) and polls the oldest for completion, its timeout and the backend's
//   asynchronous errors, so a failure still fails the Work and the group (never a hang) — see
//   work.h for how the error reaches the caller.
// - Lifetimes: the compute stream is borrowed and used only inside the calls issued while it is
//   attached (on the issuing thread, for the event): detach or replace it (set_compute_stream)
//   before destroying it. Buffers as above: a Work keeps them until the device work is done,
//   not merely issued, so the caller may drop its references right after wait_on().
// - CPU backends (local, mpi) accept only the host as compute stream (a device stream is
//   refused with InvalidArgument naming the backend); wait_on is wait() for them.
//
// Several queues over one group: duplicate() makes a second communicator over the same ranks
// (its own queue and thread, its own backend group: MPI's MPI_Comm_dup, made with the backend's
// split on every backend), so that collectives of one kind never wait behind another kind's
// (sharding/sharded_model.h runs parameter all-gathers on one and gradient reductions on the
// other). Each keeps the ordering contract on its own; how the two interleave is free. Its
// traffic is counted in the original's stats(): the group's traffic, whichever queue carried it.
//
// Thread-safety: the calls (including set_compute_stream) may be issued from any one thread at a
// time per communicator (typically the rank's compute thread, the owner of the compute stream).
// rank(), size(), stats() are safe from any thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/backend.h"
#include "comm/stats.h"
#include "comm/work.h"
#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/tensor.h"

namespace zs::comm {

class Communicator {
 public:
  // Buffers on the CPU, or for a backend named "nccl" on a CUDA device whose index is not
  // checked (use the overload below to check it). `timeout`: the timeout of every collective
  // whose options name none (see timeout()).
  explicit Communicator(std::unique_ptr<Backend> backend,
                        std::chrono::milliseconds timeout = default_timeout());
  // Buffers on `buffer_device`: cpu for "local"/"mpi", cuda:N for an "nccl" backend on GPU N
  // (comm/factory does this). Throws InvalidArgument if the device does not suit the backend.
  Communicator(std::unique_ptr<Backend> backend, Device buffer_device,
               std::chrono::milliseconds timeout = default_timeout());
  // Drains the queue (waits for queued collectives), then stops the thread.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const char* backend_name() const { return backend_->name(); }
  // Where this communicator's tensors must live (see the file comment).
  Device buffer_device() const { return buffer_device_; }
  // How long a collective may take when its CollectiveOptions name no timeout: fixed when the
  // communicator is created (a program's configured timeout, e.g. zs-train --comm-timeout, or
  // default_timeout()), and inherited by split() groups, so one setting reaches every collective
  // of a run without a process-wide variable.
  std::chrono::milliseconds timeout() const { return timeout_; }

  // At most this many device collectives are issued and not yet complete at a time; the next
  // waits on the communicator thread (it bounds what in-flight collectives hold: buffers,
  // events, fp32 scratch of half-precision reductions).
  static constexpr size_t kMaxInFlight = 64;

  // Orders every later collective after the work `stream` has enqueued when each is issued (see
  // the file comment). StreamRef::host() (the default) detaches. Throws InvalidArgument for a
  // device stream on a CPU backend, a stream on another device than buffer_device(), or a null
  // handle. Sub-communicators made by split() inherit it.
  void set_compute_stream(const StreamRef& stream);
  const StreamRef& compute_stream() const { return compute_stream_; }

  // In place over `tensor` (every rank passes the same shape and dtype).
  WorkPtr all_reduce(const Tensor& tensor, ReduceOp op, const CollectiveOptions& options = {});
  // full = concat over ranks of shard (rank-major); full.numel() == size() · shard.numel().
  // In-place form: `shard` is this rank's slice of `full` (a view of full's storage at element
  // rank() · shard.numel(); make it with rank_slice()). The rank's slice is then already where
  // it belongs and only the other ranks' slices are moved: the local backend copies (N−1)/N of
  // full instead of all of it, mpi sends from the slot and copies nothing (MPI_IN_PLACE's
  // semantics), nccl runs ncclAllGather's in-place form (sendbuff == recvbuff + rank·count).
  // Any other overlap of shard and full is an InvalidArgument.
  WorkPtr all_gather(const Tensor& shard, const Tensor& full,
                     const CollectiveOptions& options = {});
  // This rank's slice of `full` split over size() ranks: the in-place all_gather's shard. A view
  // (shares full's storage). Throws InvalidArgument unless size() divides full.numel().
  Tensor rank_slice(const Tensor& full) const;
  // shard = this rank's slice of the reduction of full over ranks. shard may be a slice of full
  // (rank_slice(full): the reduced slice lands where it lies).
  WorkPtr reduce_scatter(const Tensor& full, const Tensor& shard, ReduceOp op,
                         const CollectiveOptions& options = {});
  WorkPtr broadcast(const Tensor& tensor, int root, const CollectiveOptions& options = {});
  // out (root only; undefined elsewhere) = concat over ranks of in.
  WorkPtr gather(const Tensor& in, const Tensor& out, int root,
                 const CollectiveOptions& options = {});
  // out = slice `rank` of in (root only; undefined elsewhere).
  WorkPtr scatter(const Tensor& in, const Tensor& out, int root,
                  const CollectiveOptions& options = {});
  WorkPtr barrier(const CollectiveOptions& options = {});
  WorkPtr send(const Tensor& tensor, int peer, const CollectiveOptions& options = {});
  WorkPtr recv(const Tensor& tensor, int peer, const CollectiveOptions& options = {});

  // Collective: a new communicator over the ranks that pass the same color, ordered by
  // (key, rank); color < 0 returns null. Blocks until the group is formed.
  std::unique_ptr<Communicator> split(int color, int key, const CollectiveOptions& options = {});

  // Collective: a second communicator over the same ranks, in the same order (split(0, rank())),
  // with a queue and a thread of its own — for a device backend its own comm stream — so that
  // its collectives run beside this one's instead of behind them. It inherits the compute
  // stream and the timeout, is aborted with this group, and records its traffic in this
  // communicator's stats() (shared: resetting either resets both), so a traffic report over
  // this communicator still counts everything. It costs one thread and, per backend, a second
  // group: nothing for local, an MPI communicator for mpi, an NCCL communicator (its own
  // channel buffers, which NCCL allocates outside zeroshard's trackers, like the first one's)
  // for nccl. The stats are shared, not borrowed: either may be destroyed first.
  std::unique_ptr<Communicator> duplicate(const CollectiveOptions& options = {});

  // Fails every pending and future collective of the group, on every rank, with `reason`.
  void abort(const std::string& reason);
  // Local, not a collective: blocks until every collective issued before it has completed or
  // failed and dropped its buffers (the Works then hold nothing of them). For owners of the memory
  // those collectives use, before that memory's allocator goes: after an error, abort() first,
  // so that collectives waiting for other ranks fail at once. Issues nothing to the backend and
  // is not counted in stats().
  void flush();

  // This communicator's traffic, and that of its duplicate()s.
  CommStats& stats() { return *stats_; }
  const CommStats& stats() const { return *stats_; }
  uint64_t calls_issued() const { return next_sequence_; }

 private:
  struct Task {
    WorkPtr work;
    CollectiveKind kind;
    uint64_t bytes;  // for traffic accounting (see collective_traffic)
    int root;
    std::function<void(const Call&)> run;
    Call call;  // deadline set when the collective starts running
    std::chrono::milliseconds timeout;
    Clock::time_point started{};  // when the communicator thread started it
    bool oldest = false;          // its deadline was restarted when it became the oldest in flight
    bool counted = true;          // false for flush(): not a collective, not in stats()
    uint64_t copied = 0;  // what the backend copied locally while running it (bytes_copied())
  };
  WorkPtr enqueue(CollectiveKind kind, std::string description, std::vector<Tensor> buffers,
                  uint64_t bytes, int root, const CollectiveOptions& options,
                  std::function<void(const Call&)> run);
  void start();  // checks the backend and the buffer device, then starts the thread
  void thread_main();
  // Runs (or, for a device collective, issues) a task; returns true if it is now in flight.
  bool start_task(Task& task);
  // Polls the oldest in-flight task; true if it finished (it was then completed).
  bool poll_oldest(std::deque<Task>& in_flight);
  // Accounts and completes a task that has finished or failed.
  void finish_task(Task& task, std::exception_ptr error);
  // Converts a failure of `task` on the communicator thread into its error, aborting the group
  // on a CommError (a timed-out or inconsistent collective leaves it unusable).
  std::exception_ptr capture_failure(const Task& task);
  void check_root(const char* what, int root) const;
  void check_peer(const char* what, int peer) const;
  // Defined, not released, and on buffer_device() (the kind; the index too when known).
  void check_tensor(const char* what, const char* arg, const Tensor& t) const;

  std::unique_ptr<Backend> backend_;
  const int rank_;
  const int size_;
  const int log_rank_;  // the creating thread's log rank, for the comm thread's messages
  const Device buffer_device_;
  const bool check_device_index_;  // false: any CUDA index (an nccl backend of unknown device)
  const std::chrono::milliseconds timeout_;
  // Shared with the duplicate()s (each records its collectives here). Set before the
  // communicator's first collective is queued, so the thread reads it after that (queue mutex).
  std::shared_ptr<CommStats> stats_ = std::make_shared<CommStats>();
  StreamRef compute_stream_;  // read and written by the issuing thread only
  uint64_t next_sequence_ = 0;
  std::mutex mutex_;
  std::condition_variable queue_cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

// Every rank's `values` (the same count on every rank), by rank: one int64 all-gather over
// `comm`, staged through buffers of `allocator` (on comm.buffer_device(), category
// comm_buffers) and the host. Waits for it. Collective; for small figures (logs, checks).
std::vector<std::vector<uint64_t>> all_gather_u64(Communicator& comm, Allocator& allocator,
                                                  const std::vector<uint64_t>& values,
                                                  const std::string& tag);

}  // namespace zs::comm
