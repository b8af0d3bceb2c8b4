// The backend factory (see factory.h). The one translation unit outside comm/mpi/ that knows
// whether the mpi backend is compiled into zs_comm (ZS_HAVE_MPI, set by comm/CMakeLists.txt with
// ZS_MPI). The nccl backend is a library of its own that depends on zs_comm and registers itself
// (comm/gpu_backend.h): this file asks the registry, never the build, whether it is there.
#include "comm/factory.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "comm/gpu_backend.h"
#include "comm/local/local_backend.h"
#include "comm/tcp_rendezvous.h"
#include "runtime/device_kernels.h"
#include "runtime/error.h"
#include "runtime/logging.h"

#if ZS_HAVE_MPI
#include "comm/mpi/mpi_backend.h"
#endif

namespace zs::comm {

class MpiRuntime;  // comm/mpi/mpi_backend.h, when built

namespace {

constexpr bool kMpiBuilt = ZS_HAVE_MPI != 0;

// The nccl backend's entry, when the program links zs_comm_nccl (a CUDA build); else nullptr.
const GpuCommBackend* nccl_backend() {
  return DeviceTables<GpuCommBackend>::find(Device::Kind::kCUDA);
}

constexpr const char* kMpiPackages =
    "install libopenmpi-dev and openmpi-bin (or libmpich-dev and mpich) and reconfigure with "
    "-DZS_MPI=ON";

[[noreturn]] void throw_not_built(const std::string& backend) {
  if (backend == "mpi") {
    ZS_THROW(InvalidArgument, "backend 'mpi' is not built into this zeroshard: ", kMpiPackages);
  }
  ZS_THROW(InvalidArgument, "backend '", backend,
           "' is not built into this zeroshard: needs CUDA + NCCL; install the CUDA toolkit and "
           "NCCL and reconfigure with -DZS_CUDA=ON (and -DZS_NCCL_ROOT=<prefix> if NCCL is not "
           "next to the toolkit), then link the program with zs_comm_nccl (zs_train does), or use "
           "'mpi' or 'local' with host tensors");
}

// The MPI world and its runtime. Holding `runtime` keeps MPI initialized: a caller that builds
// more on top of the world (the nccl backend) holds it until an error is logged, because
// releasing the last reference while an exception unwinds aborts the whole MPI job.
struct MpiWorld {
  std::shared_ptr<MpiRuntime> runtime;
  std::unique_ptr<Backend> backend;
};

MpiWorld form_mpi_world(const LaunchInfo& launch, std::chrono::milliseconds timeout) {
#if ZS_HAVE_MPI
  auto runtime = std::make_shared<MpiRuntime>();
  try {
    // A launcher of one MPI starting a program linked to the other gives N singleton worlds.
    ZS_CHECK_AS(CommError, !launch.by_mpi_launcher() || runtime->world_size() == launch.world_size,
                "this process was started as ", launch.describe(), ", but MPI_COMM_WORLD has ",
                runtime->world_size(), " rank(s): the program uses ", runtime->library_version(),
                " while its launcher belongs to another MPI; launch it with that MPI's mpirun "
                "(e.g. mpirun.openmpi or mpirun.mpich) or rebuild against the launcher's MPI");
    std::unique_ptr<Backend> backend = MpiBackend::world(runtime, timeout);
    return MpiWorld{runtime, std::move(backend)};
  } catch (const Error& e) {
    // Log before unwinding: releasing the runtime during unwinding aborts the MPI job, so the
    // other ranks stop now instead of waiting for this one.
    ZS_LOG_ERROR("cannot form the MPI world: {}", e.what());
    throw;
  }
#else
  (void)launch;
  (void)timeout;
  throw_not_built("mpi");
#endif
}

std::unique_ptr<Communicator> make_mpi_world(const LaunchInfo& launch,
                                             std::chrono::milliseconds timeout) {
  MpiWorld world = form_mpi_world(launch, timeout);
  // The communicator thread takes its log rank from the creating thread.
  RankScope rank_scope(world.backend->rank());
  return std::make_unique<Communicator>(std::move(world.backend), timeout);
}

// torchrun's world: no CPU backend exists to bootstrap over, so rank 0's unique id goes over the
// TCP rendezvous at MASTER_ADDR (launch.h) and every rank forms its member of the group from it.
std::unique_ptr<Communicator> make_nccl_world_over_tcp(const GpuCommBackend& nccl,
                                                       const LaunchInfo& launch, int device,
                                                       std::chrono::milliseconds timeout,
                                                       MemoryTracker* device_tracker) {
  RankScope rank_scope(launch.rank);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  RendezvousSpec spec;
  spec.host = launch.rendezvous_host;
  spec.port = launch.rendezvous_port;
  spec.rank = launch.rank;
  spec.world_size = launch.world_size;
  spec.timeout = timeout;
  try {
    const std::vector<uint8_t> unique_id = exchange_rendezvous_blob(
        spec, launch.rank == 0 ? nccl.make_unique_id() : std::vector<uint8_t>());
    const auto left = std::max(std::chrono::milliseconds(0),
                               std::chrono::duration_cast<std::chrono::milliseconds>(
                                   deadline - std::chrono::steady_clock::now()));
    std::unique_ptr<Backend> backend = nccl.create_from_id(
        unique_id, launch.rank, launch.world_size, device, left, device_tracker);
    return std::make_unique<Communicator>(std::move(backend), Device::cuda(device), timeout);
  } catch (const Error& e) {
    ZS_LOG_ERROR(
        "cannot form the NCCL world of {} over the TCP rendezvous at {}:{} (port from {}): {}",
        launch.describe(), launch.rendezvous_host, launch.rendezvous_port,
        launch.rendezvous_port_from, e.what());
    throw;
  }
}

std::unique_ptr<Communicator> make_nccl_world(const LaunchInfo& launch,
                                              std::chrono::milliseconds timeout,
                                              MemoryTracker* device_tracker) {
  const GpuCommBackend* nccl = nccl_backend();
  if (nccl == nullptr) throw_not_built("nccl");
  // Before MPI starts: every rank of a GPU-less node fails here alike, with the reason (and its
  // rank as the launcher numbered it).
  RankScope launch_scope(launch.rank);
  std::string why;
  const int devices = nccl->device_count(&why);
  ZS_CHECK(devices > 0, "backend 'nccl' needs a CUDA device, but this process sees none (", why,
           "); run it where a GPU and its driver are present (and CUDA_VISIBLE_DEVICES does not "
           "hide them), or use backend 'mpi' or 'local' with host tensors");
  if (launch.local_size > devices) {
    // Fine when the launcher gives each process its own GPU (srun --gpus-per-task=1 sets
    // CUDA_VISIBLE_DEVICES per task); otherwise NCCL refuses two ranks on one GPU.
    ZS_LOG_WARN(
        "backend 'nccl': {} ranks on this node but {} visible CUDA device(s); ranks share a GPU "
        "unless the launcher binds one GPU per process, and NCCL then fails with 'Duplicate GPU "
        "detected': start at most {} ranks per node",
        launch.local_size, devices, devices);
  }
  const int device = launch.local_rank % devices;
  // The process's device from here on (not restored): every later DeviceGuard returns to it
  // rather than to device 0, which would create a context on GPU 0 in every rank's process.
  nccl->make_current(device);
  if (launch.launcher == "torchrun" && launch.world_size > 1) {
    return make_nccl_world_over_tcp(*nccl, launch, device, timeout, device_tracker);
  }
  MpiWorld mpi;  // holds MPI up until a failure below is logged (see MpiWorld)
  std::unique_ptr<Backend> bootstrap;
  if (launch.by_mpi_launcher()) {
    mpi = form_mpi_world(launch, timeout);
    bootstrap = std::move(mpi.backend);
  } else {
    bootstrap = std::move(make_local_backends(1)[0]);
  }
  const int rank = bootstrap->rank();
  const int size = bootstrap->size();
  RankScope rank_scope(rank);
  try {
    // The nccl backend owns its bootstrap: with MPI, MPI is finalized after NCCL is destroyed.
    std::unique_ptr<Backend> backend =
        nccl->create(std::move(bootstrap), device, timeout, device_tracker);
    return std::make_unique<Communicator>(std::move(backend), Device::cuda(device), timeout);
  } catch (const Error& e) {
    ZS_LOG_ERROR("cannot form the NCCL world on rank {} of {} (cuda:{}): {}", rank, size, device,
                 e.what());
    throw;
  }
}

// The CPU backends have no rendezvous of their own: processes that torchrun started as several
// ranks cannot form a CPU world (the TCP rendezvous only bootstraps NCCL).
void check_not_cpu_under_torchrun(const LaunchInfo& launch) {
  ZS_CHECK(launch.launcher != "torchrun" || launch.world_size == 1, "this process was started as ",
           launch.describe(),
           ", but CPU ranks across processes and hosts communicate over MPI, which torchrun does "
           "not start: launch them with mpirun -np ",
           launch.world_size, " zs-train ... (or srun -n ", launch.world_size,
           " zs-train ... in a Slurm allocation), or run them as threads of one process with "
           "--ranks; torchrun's environment serves GPU ranks (--device cuda), whose NCCL group "
           "zeroshard forms over a TCP rendezvous at MASTER_ADDR");
}

}  // namespace

std::vector<std::string> built_backends() {
  std::vector<std::string> names;
  if (nccl_backend() != nullptr) names.push_back("nccl");
  if (kMpiBuilt) names.push_back("mpi");
  names.push_back("local");
  return names;
}

bool backend_built(const std::string& name) {
  return name == "local" || (name == "mpi" && kMpiBuilt) ||
         (name == "nccl" && nccl_backend() != nullptr);
}

std::string resolve_backend(const std::string& backend, const LaunchInfo& launch) {
  if (backend == "auto") {
    // Never "nccl": it takes device tensors only (factory.h).
    if (launch.by_mpi_launcher()) {
      if (!kMpiBuilt) {
        ZS_THROW(InvalidArgument, "this process was started as ", launch.describe(),
                 ", which needs the mpi backend, but backend 'mpi' is not built into this "
                 "zeroshard: ",
                 kMpiPackages);
      }
      return "mpi";
    }
    check_not_cpu_under_torchrun(launch);
    ZS_CHECK(launch.world_size == 1, "this process was started as ", launch.describe(),
             ", but zeroshard has no rendezvous for that launcher; start the ranks with mpirun "
             "or srun (mpi backend), or run them as threads of one process (run_local_ranks)");
    return "local";
  }
  if (backend == "mpi") {
    if (!backend_built(backend)) throw_not_built(backend);
    // MPI_Init in processes that torchrun started gives each its own world of one.
    check_not_cpu_under_torchrun(launch);
    return backend;
  }
  if (backend == "nccl") {
    if (!backend_built(backend)) throw_not_built(backend);
    // The NCCL group is formed over MPI under an MPI launcher, else over a world of one.
    if (launch.by_mpi_launcher()) {
      ZS_CHECK(kMpiBuilt,
               "backend 'nccl' forms its group over MPI when a launcher starts the "
               "ranks (this process was started as ",
               launch.describe(),
               "), but backend 'mpi' is not built into this zeroshard: ", kMpiPackages);
    } else if (launch.world_size > 1) {
      // torchrun: rank 0's TCP rendezvous carries the unique id (comm/tcp_rendezvous.h).
      ZS_CHECK(!launch.rendezvous_host.empty() && launch.rendezvous_port > 0,
               "backend 'nccl' in a process started as ", launch.describe(),
               " forms its group over a TCP rendezvous at MASTER_ADDR:MASTER_PORT, but ",
               launch.rendezvous_host.empty() ? "MASTER_ADDR" : "MASTER_PORT",
               " is not set; start the ranks with torchrun (which sets both), set both by hand, "
               "or start them with mpirun or srun");
    }
    return backend;
  }
  if (backend == "local") {
    check_not_cpu_under_torchrun(launch);
    ZS_CHECK(launch.world_size == 1,
             "backend 'local' makes a world of this process alone, but it "
             "was started as ",
             launch.describe(),
             "; use backend 'mpi' (or 'auto'), or run the ranks as threads of one process with "
             "run_local_ranks");
    return backend;
  }
  ZS_THROW(InvalidArgument, "unknown communication backend '", backend,
           "'; expected one of auto, mpi, local, nccl");
}

void run_gpu_ranks(int size, const std::function<void(Communicator&)>& fn,
                   const std::vector<MemoryTracker*>& scratch_trackers,
                   std::chrono::milliseconds timeout) {
  ZS_CHECK(size >= 1, "run_gpu_ranks: need at least 1 rank, got ", size);
  ZS_CHECK(scratch_trackers.empty() || static_cast<int>(scratch_trackers.size()) == size,
           "run_gpu_ranks: ", scratch_trackers.size(), " scratch trackers for ", size, " ranks");
  const GpuCommBackend* nccl = nccl_backend();
  if (nccl == nullptr) throw_not_built("nccl");
  std::string why;
  const int devices = nccl->device_count(&why);
  ZS_CHECK(devices >= size, size, " rank threads on GPUs need ", size,
           " visible CUDA devices (NCCL takes one GPU per rank), but this process sees ", devices,
           devices == 0 ? " (" + why + ")" : std::string(), "; use at most ", devices,
           " ranks, or start one process per GPU across nodes with "
           "mpirun or srun");
  LocalRunOptions options;
  options.timeout = timeout;
  options.make_communicator = [&](std::unique_ptr<Backend> local, int rank) {
    // The rank's GPU is its thread's device from here on (see make_nccl_world).
    nccl->make_current(rank);
    MemoryTracker* tracker =
        scratch_trackers.empty() ? nullptr : scratch_trackers[static_cast<size_t>(rank)];
    std::unique_ptr<Backend> backend = nccl->create(std::move(local), rank, timeout, tracker);
    return std::make_unique<Communicator>(std::move(backend), Device::cuda(rank), timeout);
  };
  run_local_ranks(size, fn, options);
}

std::unique_ptr<Communicator> make_world_communicator(const std::string& backend,
                                                      const LaunchInfo& launch,
                                                      std::chrono::milliseconds timeout,
                                                      MemoryTracker* device_tracker) {
  const std::string resolved = resolve_backend(backend, launch);
  if (resolved == "mpi") return make_mpi_world(launch, timeout);
  if (resolved == "nccl") return make_nccl_world(launch, timeout, device_tracker);
  std::vector<std::unique_ptr<Backend>> backends = make_local_backends(1);
  RankScope rank_scope(0);
  return std::make_unique<Communicator>(std::move(backends[0]), timeout);
}

}  // namespace zs::comm
