// Ranks as threads in a test (header-only): run_threads runs one function per index on its own
// thread and reports the first failure after all of them ended.
#pragma once

#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace zs::testing {

// Runs fn(i) for i in [0, n) on n threads, joins them all, then rethrows the exception of the
// lowest i that threw (if any).
inline void run_threads(int n, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        fn(i);
      } catch (...) {
        errors[static_cast<size_t>(i)] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace zs::testing
