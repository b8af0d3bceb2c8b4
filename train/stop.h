// Stopping a run before its last step, without losing it (issue 28): preemption and planned
// exits.
//
// - Preemption. Slurm sends SIGTERM at preemption and at the time limit (SIGKILL follows after
//   its grace period, KillWait); a user at a terminal sends SIGINT. StopSignals catches both for
//   the length of a run: the signal only sets a flag, every rank finishes the step it is in, the
//   ranks agree to stop after the same step, a checkpoint is saved there when --checkpoint-dir is
//   set, and zs-train exits with kExitPreempted (and a restarting run does not restart). A second
//   signal ends the process at once, as the signal's default action does.
// - Planned exits, as Megatron-LM's --exit-interval and --exit-duration-in-mins do:
//   --exit-after-steps N stops after this process has run N steps, --exit-after-minutes M after
//   the first step that ends M minutes after the run started; both save a checkpoint (they need
//   --checkpoint-dir) and exit 0. A chain of such jobs with --resume auto continues the run bit for
//   bit as one uninterrupted run would.
//
// The ranks agree through a one-float all-reduce (max) after each step: a signal reaches the
// ranks of a job at different moments, and their clocks differ.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "train/loop.h"
#include "train/records.h"

namespace zs {
class Allocator;
}
namespace zs::comm {
class Communicator;
}

namespace zs::train {

struct TrainConfig;

// zs-train's exit status after a signal stopped the run (EX_TEMPFAIL: try again; a requeued job
// continues with --resume auto). A planned exit is 0.
constexpr int kExitPreempted = 75;

// SIGTERM and SIGINT caught for the lifetime of this object (one at a time in a process): the
// first one is recorded, the second ends the process with the signal's default action. Restores
// the previous handlers when it goes.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The signal received since the newest StopSignals was made (0: none). Any thread.
  static int received();
  // When the newest StopSignals was made: the start --exit-after-minutes counts from.
  static std::chrono::steady_clock::time_point started();
};

// One rank's rule for stopping after a step; every rank calls after_step at the same points.
class StopRule final : public StopCheck {
 public:
  // `compute`: where the agreement's float lives (the communicator's buffer device).
  StopRule(const TrainConfig& config, comm::Communicator& comm, Allocator& compute);
  // After `completed` steps, `first_step` the first this process ran: why every rank stops now
  // (the same on every rank), or kNone.
  StopReason after_step(int64_t first_step, int64_t completed) override;
  // "SIGTERM", "--exit-after-steps 3": what stopped the run, for the log.
  std::string describe(StopReason reason) const;

 private:
  StopReason local(int64_t first_step, int64_t completed) const;

  const TrainConfig& config_;
  comm::Communicator& comm_;
  Allocator& compute_;
};

}  // namespace zs::train
