// Helpers shared by the local backend's test files (local_test.cc, local_failure_test.cc):
// collective options with a timeout, tensors and their bytes, and run_collecting, which runs a
// function on every rank thread and records what each rank threw and when.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/fault_backend.h"
#include "comm/local/local_backend.h"
#include "runtime/allocator.h"

namespace zs::comm::local_testing {

using Ms = std::chrono::milliseconds;

inline CollectiveOptions with_timeout(Ms timeout) {
  CollectiveOptions options;
  options.timeout = timeout;
  return options;
}

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline Tensor make(CpuAllocator& allocator, int64_t count, DType dtype, const char* name) {
  return Tensor::empty({count}, dtype, allocator, MemoryCategory::kCommBuffers, name);
}

inline std::vector<unsigned char> bytes_of(const Tensor& t) {
  std::vector<unsigned char> out(t.nbytes());
  if (!out.empty()) std::memcpy(out.data(), t.raw_data(), out.size());
  return out;
}

// What each rank saw: its error (type and message) and when it arrived.
struct RankOutcome {
  bool threw = false;
  bool comm_error = false;
  bool timeout = false;
  std::string message;
  double seconds = 0;  // from the start of the run to the error
};

// Runs fn on every rank through run_local_ranks and records each rank's error in its outcome.
// The errors still propagate to run_local_ranks (which aborts the group on the first, as in a
// real run); its final rethrow is swallowed here.
inline std::vector<RankOutcome> run_collecting(int size,
                                               const std::function<void(Communicator&)>& fn,
                                               const LocalRunOptions& options = {}) {
  std::vector<RankOutcome> outcomes(static_cast<size_t>(size));
  const auto start = Clock::now();
  try {
    run_local_ranks(
        size,
        [&](Communicator& comm) {
          RankOutcome& mine = outcomes[static_cast<size_t>(comm.rank())];
          try {
            fn(comm);
          } catch (const CommTimeout& e) {
            mine = {true, true, true, e.what(), seconds_since(start)};
            throw;
          } catch (const CommError& e) {
            mine = {true, true, false, e.what(), seconds_since(start)};
            throw;
          } catch (const std::exception& e) {
            mine = {true, false, false, e.what(), seconds_since(start)};
            throw;
          }
        },
        options);
  } catch (const std::exception&) {
  }
  return outcomes;
}

inline LocalRunOptions with_faults(std::function<FaultSettings(int rank)> settings_of) {
  LocalRunOptions options;
  options.wrap_backend = [settings_of](std::unique_ptr<Backend> backend, int rank) {
    return std::unique_ptr<Backend>(
        new FaultInjectingBackend(std::move(backend), settings_of(rank)));
  };
  return options;
}

}  // namespace zs::comm::local_testing
