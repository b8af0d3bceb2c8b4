// The `nccl` backend: the Backend contract of comm/backend.h over NCCL, one rank per GPU.
//
// Buffers are DEVICE memory of the backend's GPU (this is the one difference from the CPU
// backends, whose buffers are host memory). Every primitive enqueues its NCCL call on the
// backend's own comm stream, records an event after it, and polls that event until the call has
// completed on this rank — so, as the contract says, a primitive returns when its part of the
// collective is done, and it can never wait forever:
// - while polling it also asks ncclCommGetAsyncError; an asynchronous NCCL error (a peer died,
//   a network error) aborts the communicator (ncclCommAbort) and throws CommError naming the
//   collective and NCCL's message;
// - at the call's deadline it aborts the communicator and throws CommTimeout with the same
//   wording as the mpi backend ("all_reduce #3 (4096 fp32, sum) timed out on rank 1 of 4 after
//   waiting 30000 ms for the collective to complete. Every rank must issue the same
//   collectives in the same order; …");
// - after an abort (a timeout, an asynchronous error or abort()), every call fails fast with
//   CommError "… failed: the group was aborted: <reason>". An aborted NCCL communicator cannot
//   be reused: build a new group.
// abort() may be called from any thread; the thread running the backend performs the
// ncclCommAbort at its next poll (NCCL permits ncclCommAbort from another thread, but the comm
// must not be destroyed under a running call).
//
// Ordering with compute. The comm stream is the backend's own (non-blocking) stream. Inputs must
// be complete before a primitive is called: either the producer stream was synchronized, or the
// comm stream was made to wait for it (stream().wait(event) / wait_for(producer)) — the sharding
// engine does the latter, so no host synchronization is needed inside a step. Outputs are
// complete when the primitive returns (it waited for the comm stream's event).
//
// Reductions. NCCL reduces by itself: fp32/fp16/bf16/int32 with sum, avg (ncclAvg), max, min.
// NCCL does not promise the CPU backends' fixed rank order (its ring/tree order depends on the
// topology), and it reduces fp16/bf16 in the element type rather than accumulating in fp32 —
// results agree with the CPU backends within the dtype's rounding, not bit for bit (docs/cuda.md).
// int32 avg is NCCL's sum followed by a division by the group size.
//
// Creation: create_local() makes all ranks of a single-process group at once (ncclCommInitAll,
// one GPU per rank; hand each backend to its own thread); create() forms one rank of a group
// across processes, exchanging NCCL's unique id over any already-formed CPU backend (the mpi
// backend under mpirun/srun, or the local backend for ranks as threads), with a timeout.
// Communicators made by create() and split() are non-blocking (ncclConfig_t::blocking = 0) so
// that forming them is bounded by the deadline too.
//
// Thread-safety: one thread runs a backend's primitives at a time (its Communicator's thread);
// abort(), rank(), size() are safe from any thread.
#pragma once

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/backend.h"
#include "runtime/cuda/stream.h"

namespace zs::comm {

struct NcclBackendOptions {
  // How long the destructor waits for ncclCommFinalize before it aborts the communicator.
  std::chrono::milliseconds destroy_timeout{10000};
};

class NcclBackend final : public Backend {
 public:
  // All ranks of a single-process group: rank i on devices[i] (distinct devices).
  static std::vector<std::unique_ptr<NcclBackend>> create_local(const std::vector<int>& devices,
                                                                NcclBackendOptions options = {});
  // This process's rank of a group over `bootstrap`'s ranks (same rank and size), on `device`.
  // Collective over `bootstrap` (its rank 0 makes the unique id and broadcasts it); throws
  // CommTimeout if the group is not formed within `timeout`. Like any Backend, `bootstrap` is
  // used by one thread at a time: call this before handing it to a Communicator.
  static std::unique_ptr<NcclBackend> create(Backend& bootstrap, int device,
                                             std::chrono::milliseconds timeout = default_timeout(),
                                             NcclBackendOptions options = {});
  // The same, keeping `bootstrap` alive as long as this backend (e.g. an MpiBackend whose
  // runtime must not finalize MPI while the process still runs: comm/factory's world).
  static std::unique_ptr<NcclBackend> create(std::unique_ptr<Backend> bootstrap, int device,
                                             std::chrono::milliseconds timeout = default_timeout(),
                                             NcclBackendOptions options = {});
  ~NcclBackend() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "nccl"; }

  void all_reduce(void* data, size_t count, DType dtype, ReduceOp op, const Call& call) override;
  void all_gather(const void* shard, void* full, size_t count, DType dtype,
                  const Call& call) override;
  void reduce_scatter(const void* full, void* shard, size_t count, DType dtype, ReduceOp op,
                      const Call& call) override;
  void broadcast(void* data, size_t count, DType dtype, int root, const Call& call) override;
  // gather / scatter: grouped ncclSend/ncclRecv (root receives or sends size() pieces).
  void gather(const void* in, void* out, size_t count, DType dtype, int root,
              const Call& call) override;
  void scatter(const void* in, void* out, size_t count, DType dtype, int root,
               const Call& call) override;
  // An all_reduce of one int32 on a scratch word of device memory.
  void barrier(const Call& call) override;
  void send(const void* data, size_t count, DType dtype, int peer, const Call& call) override;
  void recv(void* data, size_t count, DType dtype, int peer, const Call& call) override;
  // ncclCommSplit (NCCL >= 2.18); color < 0 joins no group (NCCL_SPLIT_NOCOLOR).
  std::unique_ptr<Backend> split(int color, int key, const Call& call) override;
  void abort(const std::string& reason) override;

  int device() const { return device_; }
  // The comm stream: make it wait for the producers of a collective's inputs.
  zs::cuda::Stream& stream() { return stream_; }
  ncclComm_t comm() const { return comm_; }

 private:
  NcclBackend(ncclComm_t comm, int device, bool nonblocking, NcclBackendOptions options);

  std::string describe(const Call& call, size_t count, DType dtype, const char* extra) const;
  // Throws CommError if the group was aborted (performing the pending ncclCommAbort first).
  void check_not_aborted(const Call& call, const std::string& what);
  // Waits until a non-blocking NCCL call that returned ncclInProgress is set up.
  void await_issued(ncclResult_t issued, const Call& call, const std::string& what);
  // Records the completion event on the comm stream and polls it (and NCCL's async error) until
  // the collective completes, the deadline passes, or the group is aborted.
  void await_completion(const Call& call, const std::string& what);
  // ncclCommAbort once; later calls fail with `reason`.
  void abort_comm(const std::string& reason);
  [[noreturn]] void fail_async(ncclResult_t error, const Call& call, const std::string& what);
  [[noreturn]] void fail_timeout(const Call& call, const std::string& what, const char* stage,
                                 Clock::time_point start);

  std::unique_ptr<Backend> bootstrap_;  // optional; declared first so it is destroyed last
  ncclComm_t comm_ = nullptr;           // null once aborted
  int device_ = 0;
  bool nonblocking_ = false;
  NcclBackendOptions options_;
  int rank_ = 0;
  int size_ = 1;
  zs::cuda::Stream stream_;
  zs::cuda::Event done_;
  int32_t* barrier_word_ = nullptr;  // one int32 of device memory (not tracked: 4 bytes)
  std::atomic<bool> aborted_{false};
  std::mutex abort_mutex_;
  std::string abort_reason_;
};

}  // namespace zs::comm
