// Pieces of the GoogleTest mains that run under mpirun (tests/comm/mpi_main.cc,
// tests/sharding/mpi_sharding_main.cc): the --ranks=N argument a run must match, and a
// listener that prints failures prefixed with the rank that saw them. Header-only.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <iostream>

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

}  // namespace zs::testing
