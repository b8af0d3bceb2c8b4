// Launch detection from launcher environment variables (see launch.h).
#include "comm/launch.h"

#include <cerrno>
#include <cstdlib>
#include <vector>

#include "runtime/error.h"

namespace zs::comm {
namespace {

using Getenv = std::function<const char*(const char*)>;

// A non-negative decimal integer that fits an int, or InvalidArgument naming the variable.
int parse_count(const char* name, const char* value, const char* launcher) {
  const std::string text(value);
  char* end = nullptr;
  errno = 0;
  const long parsed = text.empty() ? -1 : std::strtol(text.c_str(), &end, 10);
  ZS_CHECK(!text.empty() && end && *end == '\0' && errno == 0 && parsed >= 0 && parsed <= 1 << 24,
           "environment variable ", name, "='", text, "' (set by ", launcher,
           ") must be a non-negative integer; unset it or fix the launch command");
  return static_cast<int>(parsed);
}

// The value of `name` parsed, or `fallback` when unset.
int optional_count(const Getenv& getenv, const char* name, const char* launcher, int fallback) {
  const char* value = getenv(name);
  return value ? parse_count(name, value, launcher) : fallback;
}

int required_count(const Getenv& getenv, const char* name, const char* because,
                   const char* launcher) {
  const char* value = getenv(name);
  ZS_CHECK(value != nullptr, "environment variable ", name, " is not set, but ", because,
           " is (launcher ", launcher, "); set both or neither");
  return parse_count(name, value, launcher);
}

// Slurm's compressed per-node task list, e.g. "2(x3),1": the count of node `node`.
int tasks_on_node(const char* name, const std::string& list, int node) {
  int index = 0;
  size_t at = 0;
  while (at < list.size()) {
    size_t next = list.find(',', at);
    if (next == std::string::npos) next = list.size();
    const std::string item = list.substr(at, next - at);
    const size_t paren = item.find('(');
    const std::string count_text = item.substr(0, paren);
    const int tasks = parse_count(name, count_text.c_str(), "slurm");
    int repeat = 1;
    if (paren != std::string::npos) {
      ZS_CHECK(item.size() > paren + 3 && item.compare(paren, 2, "(x") == 0 && item.back() == ')',
               "environment variable ", name, "='", list, "' (set by slurm): cannot read '", item,
               "'; expected a list like 2(x3),1");
      const std::string repeat_text = item.substr(paren + 2, item.size() - paren - 3);
      repeat = parse_count(name, repeat_text.c_str(), "slurm");
    }
    if (node < index + repeat) return tasks;
    index += repeat;
    at = next + 1;
  }
  ZS_THROW(InvalidArgument, "environment variable ", name, "='", list, "' (set by slurm) lists ",
           index, " nodes, but SLURM_NODEID is ", node);
}

void validate(const LaunchInfo& info, const char* rank_var, const char* size_var,
              const char* local_rank_var, const char* local_size_var) {
  ZS_CHECK(info.world_size >= 1, "environment variable ", size_var, "=", info.world_size,
           " (set by ", info.launcher, ") must be at least 1");
  ZS_CHECK(info.rank < info.world_size, "environment variable ", rank_var, "=", info.rank,
           " (set by ", info.launcher, ") must be less than ", size_var, "=", info.world_size);
  ZS_CHECK(info.local_size >= 1 && info.local_size <= info.world_size, "environment variable ",
           local_size_var, "=", info.local_size, " (set by ", info.launcher,
           ") must be between 1 and ", size_var, "=", info.world_size);
  ZS_CHECK(info.local_rank < info.local_size, "environment variable ", local_rank_var, "=",
           info.local_rank, " (set by ", info.launcher, ") must be less than ", local_size_var, "=",
           info.local_size);
}

// A TCP port in [1, 65535], or InvalidArgument naming the variable.
int parse_port(const char* name, const char* value) {
  const int port = parse_count(name, value, "torchrun");
  ZS_CHECK(port >= 1 && port <= 65535, "environment variable ", name, "=", port,
           " (set by torchrun) must be a TCP port in [1, 65535]");
  return port;
}

// The rendezvous port (launch.h): ZS_RENDEZVOUS_PORT, else MASTER_PORT (+ 1 where torchrun's
// agent serves its own store on MASTER_PORT).
void read_rendezvous(const Getenv& getenv, LaunchInfo& info) {
  const char* addr = getenv("MASTER_ADDR");
  const char* master_port = getenv("MASTER_PORT");
  if (addr == nullptr || master_port == nullptr) return;
  ZS_CHECK(*addr != '\0',
           "environment variable MASTER_ADDR is empty (set by torchrun); it must "
           "name rank 0's host");
  info.rendezvous_host = addr;
  const int port = parse_port("MASTER_PORT", master_port);
  if (const char* own = getenv("ZS_RENDEZVOUS_PORT")) {
    info.rendezvous_port = parse_port("ZS_RENDEZVOUS_PORT", own);
    info.rendezvous_port_from = "ZS_RENDEZVOUS_PORT";
    return;
  }
  const char* agent_store = getenv("TORCHELASTIC_USE_AGENT_STORE");
  if (agent_store && std::string(agent_store) == "True") {
    ZS_CHECK(port < 65535,
             "MASTER_PORT=65535 holds torchrun's store, and zeroshard's rendezvous "
             "takes the port after it; set ZS_RENDEZVOUS_PORT to a free port");
    info.rendezvous_port = port + 1;
    info.rendezvous_port_from =
        "MASTER_PORT + 1 (torchrun's agent store holds MASTER_PORT; ZS_RENDEZVOUS_PORT overrides)";
    return;
  }
  info.rendezvous_port = port;
  info.rendezvous_port_from = "MASTER_PORT";
}

LaunchInfo read_torchrun(const Getenv& getenv, const char* rank) {
  LaunchInfo info;
  info.launcher = "torchrun";
  info.rank = parse_count("RANK", rank, "torchrun");
  info.world_size = required_count(getenv, "WORLD_SIZE", "RANK", "torchrun");
  const bool has_local = getenv("LOCAL_RANK") || getenv("LOCAL_WORLD_SIZE");
  if (has_local) {
    info.local_rank = required_count(getenv, "LOCAL_RANK", "LOCAL_WORLD_SIZE", "torchrun");
    info.local_size = required_count(getenv, "LOCAL_WORLD_SIZE", "LOCAL_RANK", "torchrun");
  } else {
    info.local_rank = info.rank;
    info.local_size = info.world_size;
  }
  validate(info, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  read_rendezvous(getenv, info);
  return info;
}

}  // namespace

bool LaunchInfo::by_mpi_launcher() const {
  return launcher == "openmpi" || launcher == "mpich" || launcher == "slurm";
}

std::string LaunchInfo::describe() const {
  return detail::concat("rank ", rank, " of ", world_size, " (local ", local_rank, " of ",
                        local_size, ") launched by ", launcher);
}

LaunchInfo detect_launch(const Getenv& getenv) {
  LaunchInfo info;
  if (const char* rank = getenv("OMPI_COMM_WORLD_RANK")) {
    info.launcher = "openmpi";
    info.rank = parse_count("OMPI_COMM_WORLD_RANK", rank, "openmpi");
    info.world_size =
        required_count(getenv, "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "openmpi");
    info.local_rank = optional_count(getenv, "OMPI_COMM_WORLD_LOCAL_RANK", "openmpi", 0);
    info.local_size = optional_count(getenv, "OMPI_COMM_WORLD_LOCAL_SIZE", "openmpi", 1);
    validate(info, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
             "OMPI_COMM_WORLD_LOCAL_SIZE");
    return info;
  }
  if (const char* rank = getenv("PMI_RANK")) {
    info.launcher = "mpich";
    info.rank = parse_count("PMI_RANK", rank, "mpich");
    info.world_size = required_count(getenv, "PMI_SIZE", "PMI_RANK", "mpich");
    info.local_rank = optional_count(getenv, "MPI_LOCALRANKID", "mpich", 0);
    info.local_size = optional_count(getenv, "MPI_LOCALNRANKS", "mpich", 1);
    validate(info, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS");
    return info;
  }
  const char* torch_rank = getenv("RANK");
  if (torch_rank && getenv("TORCHELASTIC_RUN_ID")) return read_torchrun(getenv, torch_rank);
  const char* slurm_rank = getenv("SLURM_PROCID");
  if (slurm_rank && (getenv("SLURM_STEP_ID") || getenv("SLURM_STEPID"))) {
    info.launcher = "slurm";
    info.rank = parse_count("SLURM_PROCID", slurm_rank, "slurm");
    const char* size_var = getenv("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
    info.world_size = required_count(getenv, size_var, "SLURM_PROCID", "slurm");
    info.local_rank = required_count(getenv, "SLURM_LOCALID", "SLURM_PROCID", "slurm");
    const char* list_var =
        getenv("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
    const char* list = getenv(list_var);
    ZS_CHECK(list != nullptr,
             "srun set SLURM_PROCID but neither SLURM_STEP_TASKS_PER_NODE nor "
             "SLURM_TASKS_PER_NODE, so the number of ranks on this node is unknown; launch with "
             "srun from a Slurm allocation");
    const int node = optional_count(getenv, "SLURM_NODEID", "slurm", 0);
    info.local_size = tasks_on_node(list_var, list, node);
    validate(info, "SLURM_PROCID", size_var, "SLURM_LOCALID", list_var);
    return info;
  }
  if (torch_rank) return read_torchrun(getenv, torch_rank);
  return info;
}

LaunchInfo detect_launch() {
  return detect_launch([](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace zs::comm
