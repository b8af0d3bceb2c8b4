// The backend factory: the world communicator of a process that is one rank, by backend name.
//
// "auto" picks "mpi" when an MPI launcher (mpirun, mpiexec, srun) started the process and the
// mpi backend is built, else "local" for a lone process (a world of one rank). "auto" never
// picks "nccl": that backend moves device tensors only, so choosing it is the caller's decision
// (and a machine without a GPU must never get it). "mpi" creates MPI's runtime (MpiRuntime,
// owned by the backends: MPI is finalized when the last MPI communicator is destroyed, so create
// the world once per process and keep it for the program's life). "local" here is a world of one
// rank; N ranks as threads of one process are built by run_local_ranks
// (comm/local/local_backend.h), not by this factory. "nccl" (CUDA builds) forms the NCCL group
// over a CPU bootstrap — the mpi world under an MPI launcher; under torchrun (no MPI) rank 0's
// TCP rendezvous at MASTER_ADDR (comm/tcp_rendezvous.h), which carries NCCL's unique id and
// nothing else; else a one-rank local backend — on
// GPU local_rank % (visible CUDA devices), so one GPU per rank on each node (or one visible GPU
// per process, as srun --gpus-per-task gives); its Communicator takes tensors on that GPU only.
// A backend that this build does not contain ("mpi" without -DZS_MPI=ON, "nccl" without
// -DZS_CUDA=ON, or in a program that does not link zs_comm_nccl, which registers itself; zs_train
// links it) fails by name with the packages or options that add it.
//
// The returned Communicator's thread logs as the world rank; set RankScope(comm->rank()) on
// your own threads too. Thread-safe (creating two MPI worlds in one process is allowed, but
// both share one MPI initialization).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/launch.h"
#include "runtime/memory_tracker.h"

namespace zs::comm {

// Backend names this build contains, in preference order: "nccl" (device tensors) when built,
// then "mpi" when built, then "local".
std::vector<std::string> built_backends();
bool backend_built(const std::string& name);

// The world communicator of this process for `backend` ("auto", "mpi", "local", "nccl").
// `timeout` bounds forming the world (every rank must start within it; for "nccl", forming the
// bootstrap and then the NCCL group), and is the communicator's timeout() afterwards: the bound of
// every collective whose options name none. Throws InvalidArgument for an unknown or unbuilt
// backend, a launch the backend cannot serve (e.g. "local" in a process that mpirun started as one
// of N ranks), or "nccl" in a process that sees no CUDA device (naming CUDA's reason);
// CommError/CommTimeout if MPI or NCCL cannot form the world — under MPI the job is then
// aborted (the other ranks stop instead of waiting).
// `device_tracker` (nccl only; may be null): charged, as comm_buffers, for the backend's own
// device scratch (the fp32 copies of fp16/bf16 reductions), so that a rank's budget and memory
// profile include it; thread-safe by contract, it must outlive the communicator.
std::unique_ptr<Communicator> make_world_communicator(
    const std::string& backend = "auto", const LaunchInfo& launch = detect_launch(),
    std::chrono::milliseconds timeout = default_timeout(), MemoryTracker* device_tracker = nullptr);

// Ranks as threads on GPUs: runs fn(comm) on `size` threads of this process, rank r on GPU r (its
// thread's current device) with a Communicator over an nccl group formed across the threads (over
// a local bootstrap, within `timeout`, which is also each Communicator's timeout()); errors as
// run_local_ranks (comm/local/local_backend.h): a failing rank aborts the others' collectives, and
// the root cause is rethrown after every thread has joined. `scratch_trackers` (empty, or one per
// rank, each outliving the run): charged for the nccl backend's device scratch, as
// make_world_communicator's device_tracker. Throws InvalidArgument before starting when fewer than
// `size` GPUs are visible (NCCL needs one GPU per rank) or nccl is not built.
void run_gpu_ranks(int size, const std::function<void(Communicator&)>& fn,
                   const std::vector<MemoryTracker*>& scratch_trackers = {},
                   std::chrono::milliseconds timeout = default_timeout());

// The backend "auto" resolves to for `launch` in this build (throws like the above when none
// fits, e.g. a torchrun launch of several ranks: CPU ranks across processes need MPI — "auto",
// "mpi" and "local" refuse it, saying how to launch — while "nccl" accepts it when MASTER_ADDR and
// MASTER_PORT are set).
std::string resolve_backend(const std::string& backend, const LaunchInfo& launch);

}  // namespace zs::comm
