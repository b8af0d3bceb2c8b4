// Communicator: collectives among the ranks of a group, asynchronous, with timeouts and
// traffic accounting.
//
// Ordering contract: every rank of the group issues the same collectives in the same order
// (as in MPI and c10d). Calls are queued and run one at a time, in issue order, on the
// communicator's own thread (its "stream" on the CPU), so the caller computes while they run;
// the returned Work completes when the collective has run on this rank. A collective that does
// not complete within its timeout fails with CommTimeout naming the collective, its sequence
// number, the rank and the sizes — it never hangs. If a rank fails or aborts, the others fail
// fast with CommError naming it.
//
// Buffers: the Work holds the tensors until it completes; the caller must not touch them
// (or, for inputs, change them) before wait() returns. Tensors are CPU tensors here; the
// NCCL backend will take device tensors.
//
// Thread-safety: the calls may be issued from any one thread at a time per communicator
// (typically the rank's compute thread). rank(), size(), stats() are safe from any thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "comm/backend.h"
#include "comm/stats.h"
#include "comm/work.h"
#include "runtime/tensor.h"

namespace zs::comm {

class Communicator {
 public:
  explicit Communicator(std::unique_ptr<Backend> backend);
  // Drains the queue (waits for queued collectives), then stops the thread.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const char* backend_name() const { return backend_->name(); }

  // In place over `tensor` (every rank passes the same shape and dtype).
  WorkPtr all_reduce(const Tensor& tensor, ReduceOp op, const CollectiveOptions& options = {});
  // full = concat over ranks of shard (rank-major); full.numel() == size() · shard.numel().
  WorkPtr all_gather(const Tensor& shard, const Tensor& full,
                     const CollectiveOptions& options = {});
  // shard = this rank's slice of the reduction of full over ranks.
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

  // Fails every pending and future collective of the group, on every rank, with `reason`.
  void abort(const std::string& reason);

  CommStats& stats() { return stats_; }
  const CommStats& stats() const { return stats_; }
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
  };
  WorkPtr enqueue(CollectiveKind kind, std::string description, std::vector<Tensor> buffers,
                  uint64_t bytes, int root, const CollectiveOptions& options,
                  std::function<void(const Call&)> run);
  void thread_main();
  void check_root(const char* what, int root) const;
  void check_peer(const char* what, int peer) const;

  std::unique_ptr<Backend> backend_;
  const int rank_;
  const int size_;
  const int log_rank_;  // the creating thread's log rank, for the comm thread's messages
  CommStats stats_;
  uint64_t next_sequence_ = 0;
  std::mutex mutex_;
  std::condition_variable queue_cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace zs::comm
