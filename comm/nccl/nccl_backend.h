// The `nccl` backend: the Backend contract of comm/backend.h over NCCL, one rank per GPU.
//
// Buffers are DEVICE memory of the backend's GPU (this is the one difference from the CPU
// backends, whose buffers are host memory). Every primitive enqueues its NCCL call on the
// backend's own comm stream and records an event after it; that event is polled until the call
// has completed on this rank — by the primitive itself (as the contract says, it returns when
// its part of the collective is done), or, for a collective a Communicator issued with
// Call::sync, by poll() on the communicator's thread (see "Ordering with compute"). Either way
// it can never wait forever:
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
// Ordering with compute (backend.h, "Device backends"). The comm stream is the backend's own
// (non-blocking) stream. Two ways to run a primitive:
// - Called with Call::sync set (by a Communicator, for every collective but split): prepare()
//   recorded an event on the caller's compute stream when the collective was issued, if the
//   communicator has one (Communicator::set_compute_stream); the primitive makes the comm
//   stream wait for that event, enqueues the collective, records the completion event and
//   returns. The Communicator's thread then polls it (poll(): the completion event, NCCL's
//   asynchronous error, abort, the deadline, with the same failures as below), and Work::wait_on
//   makes a compute stream wait for the completion event. No host synchronization anywhere on
//   the way; every event is the collective's own (never re-recorded), so a wait_on long after
//   the collective issued still waits for exactly that collective.
// - Called without it (direct callers, split): inputs must be complete before the call (the
//   producer stream synchronized, or stream() made to wait for it), and the primitive returns
//   when the collective has completed, as the Backend contract says.
//
// Reductions. NCCL reduces by itself: fp32/fp16/bf16/int32 with sum, avg (ncclAvg), max, min.
// fp16/bf16 sum and avg accumulate in fp32 by default (NcclBackendOptions::reduce_half_in_fp32,
// as the CPU backends do and ARCHITECTURE.md asks): on the comm stream the input is cast into an
// fp32 buffer (ops/cuda/kernels.h's cast, the CPU's own rounding), reduced in fp32 by NCCL and
// rounded once back into the output. The fp32 buffer costs 2× the reduced bytes — the tensor's
// for all_reduce, `full`'s for reduce_scatter (reduced in place in the fp32 copy of full) —
// comes from a CudaAllocator on the comm stream (stream-ordered, so it is reused as soon as the
// stream has passed the cast back, without a host sync), is charged to
// NcclBackendOptions::tracker as comm_buffers while the collective is in flight, and doubles the
// bytes on the wire. max and min stay in the element type (a selection: widening changes
// nothing). NCCL does not promise the CPU backends' fixed rank order (its ring/tree order
// depends on the topology), so results equal the CPU backends' bit for bit on one rank and
// within one rounding of the dtype across ranks; with reduce_half_in_fp32 = false NCCL
// accumulates in the element type (faster, half the traffic, a rounding per step). int32 avg is
// NCCL's (sum, then division by the group size).
//
// Creation: create_local() makes all ranks of a single-process group at once (one unique id,
// ncclCommInitRankConfig per GPU in one NCCL group, non-blocking; one GPU per rank; hand each
// backend to its own thread); create() forms one rank of a group across processes, exchanging
// NCCL's unique id over any already-formed CPU backend (the mpi backend under mpirun/srun, or the
// local backend for ranks as threads), with a timeout; create_from_id() forms it from an id that
// the caller carried (comm/tcp_rendezvous.h under torchrun). Communicators made by create_local(),
// create() and split() are non-blocking (ncclConfig_t::blocking = 0) so that forming them is
// bounded by the deadline too.
//
// Thread-safety: one thread runs a backend's primitives and poll() at a time (its
// Communicator's thread); prepare() runs on the issuing thread concurrently with them (it only
// records an event on the caller's stream); abort(), rank(), size() are safe from any thread.
#pragma once

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/backend.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/stream.h"
#include "runtime/memory_tracker.h"
#include "runtime/tensor.h"

namespace zs::comm {

struct NcclBackendOptions {
  // How long the destructor waits for ncclCommFinalize before it aborts the communicator.
  std::chrono::milliseconds destroy_timeout{10000};
  // fp16/bf16 sum/avg accumulate in fp32 (see the file comment); false: in the element type.
  bool reduce_half_in_fp32 = true;
  // Charged for the fp32 buffers of half-precision reductions (comm_buffers); null: untracked.
  // Thread-safe by contract (runtime/memory_tracker.h); must outlive the backend.
  MemoryTracker* tracker = nullptr;
};

// The comm layer's name for a CUDA stream (comm/types.h): pass it to
// Communicator::set_compute_stream and Work::wait_on. Borrowed: `stream` must outlive its uses.
inline StreamRef stream_ref(const zs::cuda::Stream& stream) {
  return StreamRef{stream.zs_device(), static_cast<void*>(stream.get())};
}

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
  // This process's rank of a group of `size` ranks whose rank 0 made `id` (ncclGetUniqueId) and
  // handed it to the others by any means (the TCP rendezvous under torchrun); throws CommTimeout
  // if the group is not formed within `timeout`.
  static std::unique_ptr<NcclBackend> create_from_id(
      const ncclUniqueId& id, int rank, int size, int device,
      std::chrono::milliseconds timeout = default_timeout(), NcclBackendOptions options = {});
  ~NcclBackend() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "nccl"; }
  // The device copies this backend enqueues itself (the root's own slice of gather/scatter).
  // What NCCL copies inside its kernels is NCCL's: an out-of-place all_gather's own slice is
  // not seen, and the in-place form (Communicator::rank_slice) needs no such copy.
  uint64_t bytes_copied() const override { return bytes_copied_; }

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

  // Stream ordering (see the file comment). A compute stream must be on this backend's GPU.
  void check_compute_stream(const StreamRef& stream) const override;
  // Null for split (it forms a communicator and completes in the primitive).
  std::shared_ptr<DeviceSync> prepare(CollectiveKind kind, const StreamRef& compute) override;
  // Makes the backend's GPU the communicator thread's current device (not restored).
  void bind_thread() override;
  bool poll(const Call& call) override;

  int device() const { return device_; }
  // The comm stream: make it wait for the producers of a collective's inputs.
  zs::cuda::Stream& stream() { return stream_; }
  ncclComm_t comm() const { return comm_; }

 private:
  NcclBackend(ncclComm_t comm, int device, bool nonblocking, NcclBackendOptions options);
  // A backend owning `comm`, a formed non-blocking communicator; aborts it if that fails.
  static std::unique_ptr<NcclBackend> own(ncclComm_t comm, int device, NcclBackendOptions options);

  // Enqueues NCCL work on the given stream; returns NCCL's result.
  using EnqueueFn = std::function<ncclResult_t(cudaStream_t)>;  // zs-unchecked: a type
  std::string describe(const Call& call, size_t count, DType dtype, const char* extra) const;
  // The steps every primitive shares: fail fast if aborted, select the device, order the comm
  // stream after the compute stream's issue-time event (Call::sync), `enqueue` the NCCL call(s)
  // on the comm stream (it returns NCCL's result), wait until NCCL has issued them, run `after`
  // (work that must follow the issued call, e.g. a cast back), then either wait for completion
  // (no Call::sync) or record the completion event and return; `scratch` (if defined) then
  // moves into the sync, to be released when the collective completes.
  void run(const Call& call, const std::string& what, const EnqueueFn& enqueue,
           const std::function<void(cudaStream_t)>& after = nullptr, Tensor* scratch = nullptr);
  // gather (to_root) and scatter (!to_root), mirror images: root moves piece q of its
  // size()·count buffer to or from rank q (its own piece by a device copy), every other rank
  // its `count` elements from or to root; one NCCL group. Returns ncclGroupEnd's result.
  ncclResult_t exchange_with_root(bool to_root, const void* in, void* out, size_t count,
                                  DType dtype, int root, cudaStream_t stream);
  // True if a reduction of `dtype` with `op` runs in fp32 (reduce_half_in_fp32).
  bool widens(DType dtype, ReduceOp op) const;
  // `count` fp32 elements of device memory, ordered on the comm stream, charged as comm_buffers.
  Tensor fp32_scratch(size_t count, const std::string& what);
  // Throws CommError if the group was aborted (performing the pending ncclCommAbort first).
  void check_not_aborted(const Call& call, const std::string& what);
  // Waits until a non-blocking NCCL call that returned `issued` is set up: for ncclInProgress,
  // polls until the communicator's state is ncclSuccess again (split passes ncclInProgress
  // whatever NCCL returned: the parent stays in progress until the split is done).
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
  uint64_t bytes_copied_ = 0;  // see bytes_copied(); on the communicator's thread
  zs::cuda::Stream stream_;
  zs::cuda::Event done_;  // completion of blocking primitives (a pipelined one has its own)
  // fp32 buffers of half-precision reductions; on stream_, so declared after it (and destroyed
  // before it). Made on first use, on the communicator thread.
  std::unique_ptr<zs::cuda::CudaAllocator> scratch_allocator_;
  int32_t* barrier_word_ = nullptr;  // one int32 of device memory (not tracked: 4 bytes)
  // Whether (and why) this group was aborted; shared with the groups split from it, which an
  // abort reaches too (as the local backend's groups): see NcclAbortFlag in nccl_backend.cc.
  std::shared_ptr<struct NcclAbortFlag> abort_flag_;
};

}  // namespace zs::comm
