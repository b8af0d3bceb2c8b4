// torchrun's launch (comm/launch.h) read from a given environment — detect_launch's getenv
// overload over a map, so the process environment is never touched — and what the backend factory
// makes of it (comm/factory.h): which launcher wins when several launchers' variables are
// present, where the TCP rendezvous is, and that CPU ranks under torchrun are refused with the way
// to launch them.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "comm/factory.h"
#include "comm/launch.h"
#include "runtime/error.h"
#include "tests/support/error_text.h"

namespace zs::comm {
namespace {

using Env = std::map<std::string, std::string>;
using testing::contains;
using testing::invalid_argument_message;

LaunchInfo detect(const Env& env) {
  return detect_launch([&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

// What torchrun sets for worker 5 of 8 (node 1 of 2, 4 workers per node).
Env torchrun_worker() {
  return {{"RANK", "5"},
          {"WORLD_SIZE", "8"},
          {"LOCAL_RANK", "1"},
          {"LOCAL_WORLD_SIZE", "4"},
          {"GROUP_RANK", "1"},
          {"MASTER_ADDR", "node-a"},
          {"MASTER_PORT", "29500"},
          {"TORCHELASTIC_RUN_ID", "job7"},
          {"TORCHELASTIC_RESTART_COUNT", "0"}};
}

// What `srun --ntasks-per-node=1 torchrun …` adds: the torchrun agent is task 1 of 2 of the step.
void add_srun_step(Env& env) {
  env["SLURM_PROCID"] = "1";
  env["SLURM_STEP_ID"] = "0";
  env["SLURM_STEP_NUM_TASKS"] = "2";
  env["SLURM_LOCALID"] = "0";
  env["SLURM_NODEID"] = "1";
  env["SLURM_STEP_TASKS_PER_NODE"] = "1(x2)";
}

TEST(TorchrunLaunch, WorkerReadsRanksAndTheRendezvous) {
  const LaunchInfo info = detect(torchrun_worker());
  EXPECT_EQ(info.launcher, "torchrun");
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_size, 4);
  EXPECT_FALSE(info.by_mpi_launcher());
  EXPECT_EQ(info.rendezvous_host, "node-a");
  EXPECT_EQ(info.rendezvous_port, 29500);
  EXPECT_EQ(info.rendezvous_port_from, "MASTER_PORT");
}

TEST(TorchrunLaunch, InsideAnSrunStepTorchrunWins) {
  Env env = torchrun_worker();
  add_srun_step(env);
  const LaunchInfo info = detect(env);
  EXPECT_EQ(info.launcher, "torchrun");
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world_size, 8);
}

TEST(TorchrunLaunch, HandSetRankYieldsToAnSrunStep) {
  // RANK/WORLD_SIZE without TORCHELASTIC_RUN_ID may be left over in the shell: srun's step wins.
  Env env = {{"RANK", "0"}, {"WORLD_SIZE", "1"}};
  add_srun_step(env);
  const LaunchInfo info = detect(env);
  EXPECT_EQ(info.launcher, "slurm");
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.world_size, 2);
  // Without a step they are the launch (and a rendezvous needs MASTER_ADDR and MASTER_PORT).
  const LaunchInfo alone = detect({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(alone.launcher, "torchrun");
  EXPECT_EQ(alone.rendezvous_port, 0);
  EXPECT_EQ(alone.rendezvous_host, "");
}

TEST(TorchrunLaunch, MpiLaunchersStillWin) {
  Env env = torchrun_worker();
  env["OMPI_COMM_WORLD_RANK"] = "2";
  env["OMPI_COMM_WORLD_SIZE"] = "3";
  EXPECT_EQ(detect(env).launcher, "openmpi");
  env = torchrun_worker();
  env["PMI_RANK"] = "0";
  env["PMI_SIZE"] = "1";
  EXPECT_EQ(detect(env).launcher, "mpich");
}

TEST(TorchrunLaunch, RendezvousPortBesideTorchrunsAgentStore) {
  Env env = torchrun_worker();
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  LaunchInfo info = detect(env);
  EXPECT_EQ(info.rendezvous_port, 29501);
  EXPECT_TRUE(contains(info.rendezvous_port_from, "MASTER_PORT + 1")) << info.rendezvous_port_from;
  env["ZS_RENDEZVOUS_PORT"] = "31000";
  info = detect(env);
  EXPECT_EQ(info.rendezvous_port, 31000);
  EXPECT_EQ(info.rendezvous_port_from, "ZS_RENDEZVOUS_PORT");
  env["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  env.erase("ZS_RENDEZVOUS_PORT");
  EXPECT_EQ(detect(env).rendezvous_port, 29500);
}

TEST(TorchrunLaunch, MalformedRendezvousVariablesNameTheVariable) {
  const struct {
    const char* name;
    const char* value;
  } cases[] = {{"MASTER_PORT", "http"},
               {"MASTER_PORT", "0"},
               {"MASTER_PORT", "70000"},
               {"ZS_RENDEZVOUS_PORT", "-3"},
               {"MASTER_ADDR", ""}};
  for (const auto& c : cases) {
    Env env = torchrun_worker();
    env[c.name] = c.value;
    const std::string message = invalid_argument_message([&] { detect(env); });
    EXPECT_TRUE(contains(message, c.name)) << c.name << "='" << c.value << "': " << message;
  }
  Env env = torchrun_worker();
  env["MASTER_PORT"] = "65535";
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  EXPECT_TRUE(contains(invalid_argument_message([&] { detect(env); }), "ZS_RENDEZVOUS_PORT"));
}

// --- What the factory makes of a torchrun launch ---

TEST(TorchrunFactory, CpuRanksUnderTorchrunAreToldToUseMpi) {
  const LaunchInfo launch = detect(torchrun_worker());
  for (const char* backend : {"auto", "local", "mpi"}) {
    if (std::string(backend) == "mpi" && !backend_built("mpi")) continue;
    const std::string message = invalid_argument_message([&] { resolve_backend(backend, launch); });
    EXPECT_TRUE(contains(message, "rank 5 of 8 (local 1 of 4) launched by torchrun")) << message;
    EXPECT_TRUE(contains(message, "CPU ranks across processes and hosts communicate over MPI"))
        << message;
    EXPECT_TRUE(contains(message, "mpirun -np 8 zs-train")) << message;
    EXPECT_TRUE(contains(message, "srun -n 8 zs-train")) << message;
  }
  // One process under torchrun is a world of one: nothing to join.
  EXPECT_EQ(resolve_backend("auto", detect({{"RANK", "0"}, {"WORLD_SIZE", "1"}})), "local");
}

TEST(TorchrunFactory, NcclUnderTorchrunNeedsMasterAddrAndPort) {
  if (!backend_built("nccl")) {
    // The CPU build names the missing backend first (tests/cuda/nccl_front_unit.cc covers the
    // CUDA build's acceptance of a torchrun launch).
    const std::string message =
        invalid_argument_message([&] { resolve_backend("nccl", detect(torchrun_worker())); });
    EXPECT_TRUE(contains(message, "backend 'nccl' is not built")) << message;
    return;
  }
  EXPECT_EQ(resolve_backend("nccl", detect(torchrun_worker())), "nccl");
  Env env = torchrun_worker();
  env.erase("MASTER_PORT");
  const std::string message =
      invalid_argument_message([&] { resolve_backend("nccl", detect(env)); });
  EXPECT_TRUE(contains(message, "MASTER_PORT is not set")) << message;
}

}  // namespace
}  // namespace zs::comm
