// QuietStdout: the benches that run training (zs-bench-checkpoint, zs-bench-offload) silence the
// engine's memory and traffic tables, which would bury their own figures.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

namespace zs::bench {

// Sends this process's stdout to /dev/null while it lives (the engine's memory and traffic
// tables, which would bury the benchmark's own).
class QuietStdout {
 public:
  QuietStdout() : saved_(::dup(1)) {
    std::fflush(stdout);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::close(null);
  }
  ~QuietStdout() {
    std::fflush(stdout);
    ::dup2(saved_, 1);
    ::close(saved_);
  }
  QuietStdout(const QuietStdout&) = delete;
  QuietStdout& operator=(const QuietStdout&) = delete;

 private:
  int saved_;
};

}  // namespace zs::bench
