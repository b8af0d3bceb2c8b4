// The core sharding tests under mpirun: one GoogleTest program that every rank runs, with ranks
// as processes over the MPI world communicator (registered with ctest on 2 and 3 ranks, labels
// mpi;multirank — see tests/CMakeLists.txt). Not a *_test.cc: that glob builds the local test
// program (tests/sharding/sharded_model_test.cc), whose model, batch, training loop and formulas
// these tests share (tests/sharding/sharding_test_util.h).
//
// Usage: mpirun -np N zs_mpi_sharding_tests --ranks=N [gtest flags]. --ranks is required: a run
// that finds another number of ranks fails before any test, it never skips.
//
// - MpiSharding.StagesAreBitwiseIdentical: stages 0–3 of the uneven GPT, a few AdamW steps, each
//   rank its part of the fixed global batch: parameters and losses the same bits in every stage.
// - MpiSharding.EqualsTheLocalBackendBitwise: each stage's MPI run equals the same run on the
//   local backend with the same world size, executed inside each process by run_local_ranks
//   (both backends reduce in rank order 0, 1, …, N−1, so the bits must agree).
// - MpiSharding.MemoryAndTrafficFollowTheFormulas: per-rank memory by category and CommStats
//   bytes of a step equal the ZeRO formulas, for every stage.
//
// Every rank checks its own results and prints its own failures (prefixed with its rank); only
// rank 0 prints the full gtest progress. The tests avoid fatal assertions between collectives,
// so a failure on one rank does not leave the others waiting. The world communicator is made
// once, by the factory, for the whole program.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "comm/local/local_backend.h"
#include "runtime/error.h"
#include "runtime/logging.h"
#include "tests/sharding/sharding_test_util.h"
#include "tests/support/mpi_test_main.h"

namespace zs::sharding {
namespace {

using testing::RunResult;

// The world of this process, for every test (made in main, destroyed before MPI_Finalize).
comm::Communicator* g_world = nullptr;

comm::Communicator& world() { return *g_world; }

constexpr int kSteps = 4;

// This process's rank of the MPI world: train() runs one rank here, the others run in the
// other processes.
void run_on_mpi_world(int world_size, const testing::RankFunction& fn) {
  ZS_CHECK(world_size == world().size(), "the MPI runner serves a world of ", world().size(),
           " ranks, not ", world_size, "; run the test with mpirun -np ", world_size);
  fn(world());
}

// "0x1.8p+1": every bit of the value.
std::string hex_float(float value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%a", static_cast<double>(value));
  return text;
}

// Success when every unit's parameters of `a` and `b` are the same bits (EXPECT_EQ on floats
// would call -0 and 0 equal; these tests promise bits); else the number of differing elements
// and the first one, rather than thousands of values.
::testing::AssertionResult same_param_bits(const RunResult& a, const RunResult& b) {
  if (a.params.size() != b.params.size()) {
    return ::testing::AssertionFailure() << a.params.size() << " units against " << b.params.size();
  }
  if (a.params.empty()) return ::testing::AssertionFailure() << "no parameters";
  for (size_t u = 0; u < a.params.size(); ++u) {
    const std::vector<float>& x = a.params[u];
    const std::vector<float>& y = b.params[u];
    if (x.size() != y.size()) {
      return ::testing::AssertionFailure()
             << "unit " << u << ": " << x.size() << " elements against " << y.size();
    }
    size_t differing = 0;
    size_t first = 0;
    for (size_t i = x.size(); i-- > 0;) {
      if (std::memcmp(&x[i], &y[i], sizeof(float)) != 0) {
        ++differing;
        first = i;
      }
    }
    if (differing > 0) {
      return ::testing::AssertionFailure()
             << "unit " << u << ": " << differing << " of " << x.size()
             << " elements differ, the first at " << first << ": " << hex_float(x[first])
             << " against " << hex_float(y[first]);
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(MpiSharding, StagesAreBitwiseIdentical) {
  const int rank = world().rank();
  const int size = world().size();
  const RunResult reference = testing::train(size, 0, kSteps, {}, run_on_mpi_world);
  for (int stage : {1, 2, 3}) {
    const RunResult run = testing::train(size, stage, kSteps, {}, run_on_mpi_world);
    // Stage 0's full buffer and the gathered shards are padded to the same multiple, so the
    // buffers compare whole.
    EXPECT_TRUE(same_param_bits(run, reference)) << "stage " << stage << " rank " << rank;
    EXPECT_EQ(run.losses, reference.losses) << "stage " << stage << " rank " << rank;
  }
  EXPECT_LT(reference.losses.back(), reference.losses.front()) << "rank " << rank;
}

TEST(MpiSharding, ReductionLimitChangesNoBits) {
  const int rank = world().rank();
  const int size = world().size();
  const RunResult reference = testing::train(size, 0, kSteps, {}, run_on_mpi_world);
  for (int stage : {2, 3}) {
    for (int limit : {0, 1}) {
      ShardingConfig config;
      config.max_reductions_in_flight = limit;
      const RunResult run = testing::train(size, stage, kSteps, config, run_on_mpi_world);
      EXPECT_TRUE(same_param_bits(run, reference))
          << "stage " << stage << " limit " << limit << " rank " << rank;
      EXPECT_EQ(run.losses, reference.losses) << "stage " << stage << " limit " << limit;
    }
  }
}

TEST(MpiSharding, EqualsTheLocalBackendBitwise) {
  const int rank = world().rank();
  const int size = world().size();
  for (int stage : {0, 1, 2, 3}) {
    const RunResult mpi = testing::train(size, stage, kSteps, {}, run_on_mpi_world);
    // The same world size as threads of this process; every process runs it (no collective of
    // the MPI world is involved), so each rank compares against its own copy.
    const RunResult local = testing::train(size, stage, kSteps);
    EXPECT_TRUE(same_param_bits(mpi, local))
        << "stage " << stage << ": the mpi run differs from the local run on rank " << rank;
    EXPECT_EQ(mpi.losses, local.losses) << "stage " << stage << " rank " << rank;
  }
}

TEST(MpiSharding, MemoryAndTrafficFollowTheFormulas) {
  for (int stage : {0, 1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage) + " rank " + std::to_string(world().rank()));
    testing::expect_memory_and_traffic_formulas(world(), stage);
  }
}

using ::zs::testing::parse_ranks;

}  // namespace
}  // namespace zs::sharding

int main(int argc, char** argv) {
  using namespace zs::sharding;
  ::testing::InitGoogleTest(&argc, argv);
  const int expected_ranks = parse_ranks(argc, argv);
  if (expected_ranks < 2) {
    std::cerr << "usage: mpirun -np N " << argv[0] << " --ranks=N [gtest flags] (N >= 2)\n";
    return 2;
  }
  // A wrong result on one rank can leave the others in a collective: bound every wait.
  setenv("ZS_COMM_TIMEOUT_S", "60", /*overwrite=*/0);
  std::unique_ptr<zs::comm::Communicator> world_comm = zs::testing::open_test_world(expected_ranks);
  if (!world_comm) return 1;
  zs::RankScope rank_scope(world_comm->rank());
  g_world = world_comm.get();
  const int status = RUN_ALL_TESTS();
  g_world = nullptr;
  world_comm.reset();  // the last MPI communicator: MPI_Finalize
  return status;
}
