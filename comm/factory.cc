// The backend factory (see factory.h). The one translation unit outside comm/mpi/ that knows
// whether the mpi backend is built (ZS_HAVE_MPI, set by comm/CMakeLists.txt when ZS_MPI is on).
#include "comm/factory.h"

#include <utility>

#include "comm/local/local_backend.h"
#include "runtime/error.h"
#include "runtime/logging.h"

#if ZS_HAVE_MPI
#include "comm/mpi/mpi_backend.h"
#endif

namespace zs::comm {
namespace {

constexpr bool kMpiBuilt = ZS_HAVE_MPI != 0;

[[noreturn]] void throw_not_built(const std::string& backend) {
  if (backend == "mpi") {
    ZS_THROW(InvalidArgument,
             "backend 'mpi' is not built into this zeroshard: install libopenmpi-dev and "
             "openmpi-bin (or libmpich-dev and mpich) and reconfigure with -DZS_MPI=ON");
  }
  ZS_THROW(InvalidArgument, "backend '", backend,
           "' is not built into this zeroshard: needs CUDA + NCCL (the nccl backend is not "
           "available yet; use 'mpi' or 'local')");
}

std::unique_ptr<Communicator> make_mpi_world(const LaunchInfo& launch,
                                             std::chrono::milliseconds timeout) {
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
    // The communicator thread takes its log rank from the creating thread.
    RankScope rank_scope(backend->rank());
    return std::make_unique<Communicator>(std::move(backend));
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

}  // namespace

std::vector<std::string> built_backends() {
  std::vector<std::string> names;
  if (kMpiBuilt) names.push_back("mpi");
  names.push_back("local");
  return names;
}

bool backend_built(const std::string& name) {
  return name == "local" || (name == "mpi" && kMpiBuilt);
}

std::string resolve_backend(const std::string& backend, const LaunchInfo& launch) {
  if (backend == "auto") {
    if (launch.by_mpi_launcher()) {
      if (!kMpiBuilt) {
        ZS_THROW(InvalidArgument, "this process was started as ", launch.describe(),
                 ", which needs the mpi backend, but backend 'mpi' is not built into this "
                 "zeroshard: install libopenmpi-dev and openmpi-bin (or libmpich-dev and mpich) "
                 "and reconfigure with -DZS_MPI=ON");
      }
      return "mpi";
    }
    ZS_CHECK(launch.world_size == 1, "this process was started as ", launch.describe(),
             ", but zeroshard has no rendezvous for that launcher; start the ranks with mpirun "
             "or srun (mpi backend), or run them as threads of one process (run_local_ranks)");
    return "local";
  }
  if (backend == "mpi" || backend == "nccl") {
    if (!backend_built(backend)) throw_not_built(backend);
    return backend;
  }
  if (backend == "local") {
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

std::unique_ptr<Communicator> make_world_communicator(const std::string& backend,
                                                      const LaunchInfo& launch,
                                                      std::chrono::milliseconds timeout) {
  const std::string resolved = resolve_backend(backend, launch);
  if (resolved == "mpi") return make_mpi_world(launch, timeout);
  std::vector<std::unique_ptr<Backend>> backends = make_local_backends(1);
  RankScope rank_scope(0);
  return std::make_unique<Communicator>(std::move(backends[0]));
}

}  // namespace zs::comm
