// StopSignals and StopRule (train/stop.h).
#include "train/stop.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <sstream>

#include "comm/communicator.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#include "train/config.h"

namespace zs::train {
namespace {

std::atomic<int> g_received{0};
std::atomic<std::chrono::steady_clock::time_point::rep> g_started{0};

// Async-signal-safe: an atomic store, write(2), and for a second signal the default action.
extern "C" void on_stop_signal(int signal) {
  if (g_received.exchange(signal) != 0) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
    return;
  }
  static const char kMessage[] =
      "zs-train: signal received: every rank finishes its step, saves a checkpoint if "
      "--checkpoint-dir is set, and exits (a second signal ends the run at once)\n";
  const ssize_t ignored = write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
  (void)ignored;
}

std::string fmt_minutes(double minutes) {
  std::ostringstream text;
  text << minutes;
  return text.str();
}

struct sigaction g_previous_term;
struct sigaction g_previous_int;

}  // namespace

StopSignals::StopSignals() {
  g_received.store(0);
  g_started.store(std::chrono::steady_clock::now().time_since_epoch().count());
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a write or read the signal interrupts goes on
  sigaction(SIGTERM, &action, &g_previous_term);
  sigaction(SIGINT, &action, &g_previous_int);
}

StopSignals::~StopSignals() {
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGINT, &g_previous_int, nullptr);
}

int StopSignals::received() { return g_received.load(); }

std::chrono::steady_clock::time_point StopSignals::started() {
  return std::chrono::steady_clock::time_point(
      std::chrono::steady_clock::duration(g_started.load()));
}

StopRule::StopRule(const TrainConfig& config, comm::Communicator& comm, Allocator& compute)
    : config_(config), comm_(comm), compute_(compute) {}

StopReason StopRule::local(int64_t first_step, int64_t completed) const {
  if (StopSignals::received() != 0) return StopReason::kSignal;
  if (config_.exit_after_steps > 0 && completed - first_step >= config_.exit_after_steps) {
    return StopReason::kPlanned;
  }
  if (config_.exit_after_minutes > 0) {
    const double minutes =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - StopSignals::started())
            .count() /
        60.0;
    if (minutes >= config_.exit_after_minutes) return StopReason::kPlanned;
  }
  return StopReason::kNone;
}

StopReason StopRule::after_step(int64_t first_step, int64_t completed) {
  Tensor reason =
      Tensor::empty({1}, DType::kF32, compute_, MemoryCategory::kCommBuffers, "stop reason");
  reason.fill(static_cast<float>(local(first_step, completed)));
  comm_.all_reduce(reason, comm::ReduceOp::kMax, {{}, "stop agreement"})->wait();
  return static_cast<StopReason>(static_cast<int>(reason.item()));
}

std::string StopRule::describe(StopReason reason) const {
  switch (reason) {
    case StopReason::kSignal: {
      const int signal = StopSignals::received();
      return signal == SIGINT    ? std::string("SIGINT")
             : signal == SIGTERM ? std::string("SIGTERM")
                                 : std::string("a signal on another rank");
    }
    case StopReason::kPlanned:
      return config_.exit_after_steps > 0 && config_.exit_after_minutes > 0
                 ? "--exit-after-steps " + std::to_string(config_.exit_after_steps) +
                       " or --exit-after-minutes " + fmt_minutes(config_.exit_after_minutes)
             : config_.exit_after_steps > 0
                 ? "--exit-after-steps " + std::to_string(config_.exit_after_steps)
                 : "--exit-after-minutes " + fmt_minutes(config_.exit_after_minutes);
    case StopReason::kNone:
      break;
  }
  return "nothing";
}

}  // namespace zs::train
