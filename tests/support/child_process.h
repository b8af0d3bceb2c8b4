// Runs a program as a child process for tests that drive zeroshard's executables (zs-train) the
// way a user or a launcher does: its standard output and error go to a log file, it can be killed
// with SIGKILL after a delay, and it is always reaped. Header-only; each call is independent and
// may run from any thread (the log file is the caller's).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace zs::testing {

struct Child {
  pid_t pid = -1;
  bool killed = false;  // by our SIGKILL (else it exited by itself)
  int exit_code = -1;   // when it exited
  double seconds = 0;
};

// Starts `args` (args[0] a path) with stdout and stderr into `log`; kills it with SIGKILL once
// `kill_after` seconds have passed (never when negative) unless it exited first; always reaps it.
inline Child run_child(const std::vector<std::string>& args, const std::string& log,
                       double kill_after = -1) {
  using Clock = std::chrono::steady_clock;
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  Child child;
  const auto start = Clock::now();
  const int error = ::posix_spawn(&child.pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    ADD_FAILURE() << "cannot start " << argv[0] << ": " << std::strerror(error);
    return child;
  }
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(child.pid, &status, WNOHANG);
    if (done == child.pid) break;
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (kill_after >= 0 && elapsed >= kill_after) {
      ::kill(child.pid, SIGKILL);
      ::waitpid(child.pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  child.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (WIFSIGNALED(status)) {
    child.killed = WTERMSIG(status) == SIGKILL;
  } else if (WIFEXITED(status)) {
    child.exit_code = WEXITSTATUS(status);
  }
  return child;
}

}  // namespace zs::testing
