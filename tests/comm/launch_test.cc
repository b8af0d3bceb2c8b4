// Launch detection from the environment (comm/launch.h) and the backend factory's choices
// (comm/factory.h) for launches that need no MPI runtime. Each test starts from an environment
// without any launcher variable and restores the original one afterwards (setenv/unsetenv, so
// these tests must not run concurrently with others in the same process — gtest runs them
// sequentially).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "comm/factory.h"
#include "comm/launch.h"
#include "runtime/allocator.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#include "tests/support/error_text.h"

namespace zs::comm {
namespace {

using testing::error_message;

const char* const kLauncherVariables[] = {"OMPI_COMM_WORLD_RANK",
                                          "OMPI_COMM_WORLD_SIZE",
                                          "OMPI_COMM_WORLD_LOCAL_RANK",
                                          "OMPI_COMM_WORLD_LOCAL_SIZE",
                                          "PMI_RANK",
                                          "PMI_SIZE",
                                          "MPI_LOCALRANKID",
                                          "MPI_LOCALNRANKS",
                                          "SLURM_PROCID",
                                          "SLURM_STEP_ID",
                                          "SLURM_STEPID",
                                          "SLURM_STEP_NUM_TASKS",
                                          "SLURM_NTASKS",
                                          "SLURM_LOCALID",
                                          "SLURM_STEP_TASKS_PER_NODE",
                                          "SLURM_TASKS_PER_NODE",
                                          "SLURM_NODEID",
                                          "RANK",
                                          "WORLD_SIZE",
                                          "LOCAL_RANK",
                                          "LOCAL_WORLD_SIZE"};

class LaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kLauncherVariables) {
      const char* value = std::getenv(name);
      saved_[name] = value ? std::optional<std::string>(value) : std::nullopt;
      unsetenv(name);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }
  static void set(const char* name, const char* value) { setenv(name, value, 1); }

  // The InvalidArgument message of detect_launch(), or "" if it does not throw.
  static std::string detect_error() {
    return error_message<InvalidArgument>([] { detect_launch(); });
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST_F(LaunchTest, NoLauncherIsRankZeroOfOne) {
  const LaunchInfo info = detect_launch();
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.world_size, 1);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.local_size, 1);
  EXPECT_EQ(info.launcher, "none");
  EXPECT_FALSE(info.by_mpi_launcher());
}

TEST_F(LaunchTest, OpenMpi) {
  set("OMPI_COMM_WORLD_RANK", "5");
  set("OMPI_COMM_WORLD_SIZE", "8");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
  const LaunchInfo info = detect_launch();
  EXPECT_EQ(info.launcher, "openmpi");
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_size, 4);
  EXPECT_TRUE(info.by_mpi_launcher());
  EXPECT_EQ(info.describe(), "rank 5 of 8 (local 1 of 4) launched by openmpi");
}

TEST_F(LaunchTest, MpichHydra) {
  set("PMI_RANK", "2");
  set("PMI_SIZE", "3");
  set("MPI_LOCALRANKID", "0");
  set("MPI_LOCALNRANKS", "1");
  const LaunchInfo info = detect_launch();
  EXPECT_EQ(info.launcher, "mpich");
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.world_size, 3);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.local_size, 1);
  EXPECT_TRUE(info.by_mpi_launcher());
}

TEST_F(LaunchTest, SlurmStepReadsTasksOfThisNode) {
  // 2 tasks on each of nodes 0 and 1, 1 task on node 2; this is task 3, the second on node 1.
  set("SLURM_PROCID", "3");
  set("SLURM_STEP_ID", "0");
  set("SLURM_STEP_NUM_TASKS", "5");
  set("SLURM_NTASKS", "64");  // the allocation's, not the step's: must be ignored
  set("SLURM_LOCALID", "1");
  set("SLURM_NODEID", "1");
  set("SLURM_STEP_TASKS_PER_NODE", "2(x2),1");
  LaunchInfo info = detect_launch();
  EXPECT_EQ(info.launcher, "slurm");
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.world_size, 5);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_size, 2);

  set("SLURM_PROCID", "4");
  set("SLURM_LOCALID", "0");
  set("SLURM_NODEID", "2");
  info = detect_launch();
  EXPECT_EQ(info.local_size, 1);
}

TEST_F(LaunchTest, SlurmFallsBackToJobVariables) {
  set("SLURM_PROCID", "1");
  set("SLURM_STEPID", "7");
  set("SLURM_NTASKS", "2");
  set("SLURM_LOCALID", "1");
  set("SLURM_TASKS_PER_NODE", "2");
  const LaunchInfo info = detect_launch();
  EXPECT_EQ(info.launcher, "slurm");
  EXPECT_EQ(info.world_size, 2);
  EXPECT_EQ(info.local_size, 2);
}

TEST_F(LaunchTest, SlurmBatchScriptIsNotAStep) {
  // What an sbatch script itself sees: task 0 of the allocation, but no job step.
  set("SLURM_PROCID", "0");
  set("SLURM_NTASKS", "4");
  set("SLURM_LOCALID", "0");
  set("SLURM_TASKS_PER_NODE", "4");
  EXPECT_EQ(detect_launch().launcher, "none");
}

TEST_F(LaunchTest, Torchrun) {
  set("RANK", "5");
  set("WORLD_SIZE", "8");
  set("LOCAL_RANK", "1");
  set("LOCAL_WORLD_SIZE", "4");
  const LaunchInfo info = detect_launch();
  EXPECT_EQ(info.launcher, "torchrun");
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_size, 4);
  EXPECT_FALSE(info.by_mpi_launcher());
}

TEST_F(LaunchTest, RankAndWorldSizeAloneMeanOneNode) {
  set("RANK", "2");
  set("WORLD_SIZE", "3");
  const LaunchInfo info = detect_launch();
  EXPECT_EQ(info.local_rank, 2);
  EXPECT_EQ(info.local_size, 3);
}

TEST_F(LaunchTest, MpirunInsideSlurmOrTorchrunEnvironmentWins) {
  set("SLURM_PROCID", "0");
  set("SLURM_STEP_ID", "0");
  set("SLURM_NTASKS", "1");
  set("SLURM_LOCALID", "0");
  set("SLURM_TASKS_PER_NODE", "1");
  set("RANK", "0");
  set("WORLD_SIZE", "1");
  set("OMPI_COMM_WORLD_RANK", "1");
  set("OMPI_COMM_WORLD_SIZE", "2");
  const LaunchInfo info = detect_launch();
  EXPECT_EQ(info.launcher, "openmpi");
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.world_size, 2);
}

TEST_F(LaunchTest, MalformedValuesNameTheVariable) {
  struct Case {
    std::map<std::string, std::string> env;
    std::string variable;  // must appear in the message
  };
  const Case cases[] = {
      {{{"OMPI_COMM_WORLD_RANK", "abc"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, "OMPI_COMM_WORLD_RANK"},
      {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2x"}}, "OMPI_COMM_WORLD_SIZE"},
      {{{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, "OMPI_COMM_WORLD_RANK"},
      {{{"OMPI_COMM_WORLD_RANK", "0"}}, "OMPI_COMM_WORLD_SIZE"},
      {{{"PMI_RANK", "-1"}, {"PMI_SIZE", "2"}}, "PMI_RANK"},
      {{{"PMI_RANK", ""}, {"PMI_SIZE", "2"}}, "PMI_RANK"},
      {{{"PMI_RANK", "0"}, {"PMI_SIZE", "0"}}, "PMI_SIZE"},
      {{{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "3"}, {"MPI_LOCALNRANKS", "2"}},
       "MPI_LOCALRANKID"},
      {{{"RANK", "4"}, {"WORLD_SIZE", "4"}}, "RANK"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "99999999999999999999"}}, "WORLD_SIZE"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}, "LOCAL_WORLD_SIZE"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "3"}},
       "LOCAL_WORLD_SIZE"},
      {{{"SLURM_PROCID", "0"},
        {"SLURM_STEP_ID", "0"},
        {"SLURM_STEP_NUM_TASKS", "2"},
        {"SLURM_LOCALID", "0"},
        {"SLURM_STEP_TASKS_PER_NODE", "2(3)"}},
       "SLURM_STEP_TASKS_PER_NODE"},
      {{{"SLURM_PROCID", "0"},
        {"SLURM_STEP_ID", "0"},
        {"SLURM_STEP_NUM_TASKS", "2"},
        {"SLURM_LOCALID", "0"},
        {"SLURM_NODEID", "1"},
        {"SLURM_STEP_TASKS_PER_NODE", "2"}},
       "SLURM_STEP_TASKS_PER_NODE"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "2"}}, "SLURM_LOCALID"},
  };
  for (const Case& c : cases) {
    for (const char* name : kLauncherVariables) unsetenv(name);
    std::string env_text;
    for (const auto& [name, value] : c.env) {
      set(name.c_str(), value.c_str());
      env_text += name + "='" + value + "' ";
    }
    const std::string message = detect_error();
    EXPECT_NE(message, "") << "no InvalidArgument for " << env_text;
    EXPECT_NE(message.find(c.variable), std::string::npos)
        << "for " << env_text << "the message does not name " << c.variable << ": " << message;
  }
}

// --- The factory's choices (no MPI runtime is started here) ---

LaunchInfo launched(const char* launcher, int rank, int world_size) {
  LaunchInfo info;
  info.launcher = launcher;
  info.rank = rank;
  info.world_size = world_size;
  info.local_rank = rank;
  info.local_size = world_size;
  return info;
}

TEST(Factory, AutoPicksMpiUnderAnMpiLauncherAndLocalAlone) {
  EXPECT_EQ(resolve_backend("auto", LaunchInfo{}), "local");
  for (const char* launcher : {"openmpi", "mpich", "slurm"}) {
    if (backend_built("mpi")) {
      EXPECT_EQ(resolve_backend("auto", launched(launcher, 1, 2)), "mpi") << launcher;
    } else {
      const std::string message = error_message<InvalidArgument>(
          [&] { resolve_backend("auto", launched(launcher, 1, 2)); });
      EXPECT_NE(message.find("backend 'mpi' is not built"), std::string::npos) << message;
    }
  }
}

TEST(Factory, UnbuiltBackendsFailByName) {
  if (!backend_built("nccl")) {  // the CUDA build's nccl world: tests/cuda/nccl_front_unit.cc
    const std::string nccl =
        error_message<InvalidArgument>([] { make_world_communicator("nccl", LaunchInfo{}); });
    EXPECT_NE(nccl.find("backend 'nccl' is not built"), std::string::npos) << nccl;
    EXPECT_NE(nccl.find("needs CUDA + NCCL"), std::string::npos) << nccl;
  }
  if (!backend_built("mpi")) {
    const std::string mpi =
        error_message<InvalidArgument>([] { make_world_communicator("mpi", LaunchInfo{}); });
    EXPECT_NE(mpi.find("backend 'mpi' is not built into this zeroshard: install libopenmpi-dev"),
              std::string::npos)
        << mpi;
    EXPECT_NE(mpi.find("-DZS_MPI=ON"), std::string::npos) << mpi;
  }
  const std::string unknown =
      error_message<InvalidArgument>([] { make_world_communicator("gloo", LaunchInfo{}); });
  EXPECT_NE(unknown.find("unknown communication backend 'gloo'"), std::string::npos) << unknown;
  EXPECT_TRUE(backend_built("local"));
  EXPECT_EQ(built_backends().back(), "local");
}

TEST(Factory, LaunchesNoBackendCanServeFailClearly) {
  // torchrun gives no MPI rendezvous; zeroshard has no TCP store, so it cannot join the ranks.
  const std::string torchrun =
      error_message<InvalidArgument>([] { resolve_backend("auto", launched("torchrun", 1, 4)); });
  EXPECT_NE(torchrun.find("launched by torchrun"), std::string::npos) << torchrun;
  // The local backend in a process that is one of N MPI ranks would run N separate worlds.
  const std::string local =
      error_message<InvalidArgument>([] { resolve_backend("local", launched("openmpi", 1, 4)); });
  EXPECT_NE(local.find("run_local_ranks"), std::string::npos) << local;
}

TEST(Factory, LocalWorldOfOneRank) {
  std::unique_ptr<Communicator> world = make_world_communicator("local", LaunchInfo{});
  ASSERT_NE(world, nullptr);
  EXPECT_EQ(world->rank(), 0);
  EXPECT_EQ(world->size(), 1);
  EXPECT_STREQ(world->backend_name(), "local");
  CpuAllocator allocator(nullptr);
  Tensor t = Tensor::empty({3}, DType::kF32, allocator, "probe");
  t.copy_from(std::vector<float>{1, 2, 3});
  world->all_reduce(t, ReduceOp::kSum)->wait();
  EXPECT_EQ(t.to_vector(), (std::vector<float>{1, 2, 3}));
}

}  // namespace
}  // namespace zs::comm
