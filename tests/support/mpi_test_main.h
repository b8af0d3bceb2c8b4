// Pieces of the GoogleTest mains that run under mpirun (tests/comm/mpi_main.cc,
// tests/sharding/mpi_sharding_main.cc): the --ranks=N argument a run must match, a listener
// that prints failures prefixed with the rank that saw them, and the world those mains open.
// Header-only.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>

#include "comm/factory.h"

namespace zs::testing {

// Prints only failures, prefixed with the rank (ranks other than 0).
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::cout << "[rank " << rank_ << "] " << (result.file_name() ? result.file_name() : "?") << ":"
              << result.line_number() << ": Failure\n"
              << result.summary() << std::endl;
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::cout << "[rank " << rank_ << "] FAILED " << info.test_suite_name() << "." << info.name()
                << std::endl;
    }
  }

 private:
  const int rank_;
};

// The N of a --ranks=N argument, or 0 when absent.
inline int parse_ranks(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--ranks=", 8) == 0) return std::atoi(argv[i] + 8);
  }
  return 0;
}

// The MPI world of a test main launched for `expected_ranks` ranks, or null after printing why
// (MPI could not form it, or it has another size: the run fails, never skips). On ranks other
// than 0 the default printer is replaced by a RankFailurePrinter.
inline std::unique_ptr<comm::Communicator> open_test_world(int expected_ranks) {
  std::unique_ptr<comm::Communicator> world;
  try {
    world = comm::make_world_communicator("mpi");
  } catch (const std::exception& e) {
    std::cerr << "cannot create the MPI world: " << e.what() << "\n";
    return nullptr;
  }
  if (world->size() != expected_ranks) {
    std::cerr << "[rank " << world->rank() << "] this test needs " << expected_ranks
              << " ranks (--ranks) but MPI_COMM_WORLD has " << world->size()
              << "; launch it as mpirun -np " << expected_ranks << "\n";
    return nullptr;
  }
  if (world->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(world->rank()));
  }
  return world;
}

}  // namespace zs::testing
