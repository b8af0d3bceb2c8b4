// Elapsed wall time for the timings zeroshard logs and returns (a save's stall and write, its
// copy/checksum/write/commit breakdown): one steady clock and one conversion to seconds. Pure
// functions; thread-safe.
#pragma once

#include <chrono>

namespace zs {

using SteadyClock = std::chrono::steady_clock;

// Seconds from `start` to now.
inline double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

}  // namespace zs
