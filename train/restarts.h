// Restarts after a failure: zs-train --max-restarts K with rank threads (the local backend, or
// GPUs as threads without a launcher). When an attempt fails — an exception on a rank thread, an
// injected fault, a collective that failed or timed out; the engine aborts the group so every
// rank leaves at once — the world is built again and the run resumes from the newest checkpoint
// in --checkpoint-dir (as --resume auto does), up to K times. Each restart is logged with its
// cause. Under mpirun/srun a process cannot restart its peers: scripts/zs-launch reruns the job.
//
// Only what a restart can cure is retried: a lost or failing peer (CommError, CommTimeout), an
// I/O error (a full disk or a flaky file system may recover), and errors of no known kind.
// Errors that the same input gives again are not: InvalidArgument (flags, config, data),
// NotImplemented, CorruptCheckpoint (the chosen checkpoint stays corrupt), OutOfMemory from a
// budget (the estimate does not change), NumericalError (the resumed run is bitwise the same and
// diverges at the same step) and ReleasedTensor (a bug, met again at the same point).
//
// The failed attempt's world is gone before the next starts: every rank thread has joined and
// its trackers and communicators are destroyed (the engine's run_world scopes them).
//
// Tests inject faults with TrainConfig::injected_faults (train/config.h): InjectedFaults is the
// loop part that throws them, local_fault_wrapper the communicator wrapping. All functions are
// pure or act on the calling rank's objects only (thread-safe across ranks).
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "comm/backend.h"
#include "comm/launch.h"
#include "train/config.h"
#include "train/loop.h"
#include "train/records.h"

namespace zs::train {

// Whether rerunning from the newest checkpoint can cure `error` (see above).
bool restart_can_cure(const std::exception& error);

// The error's kind in zeroshard's hierarchy ("CommTimeout", "NumericalError", ...;
// "std::exception" for others), for the restart log.
std::string error_kind(const std::exception& error);

// Checks --max-restarts against the run (InvalidArgument otherwise): K >= 0; K > 0 needs
// --checkpoint-dir (a restart without one would start from scratch) and rank threads of this
// process (`rank_threads`); under a launcher the error points to scripts/zs-launch.
void check_restart_settings(const TrainConfig& config, bool rank_threads,
                            const comm::LaunchInfo& launch);

// One attempt: runs the whole world for `config` (attempt 0: the user's; later ones resume from
// the newest checkpoint) and fills `result` with what rank 0 recorded, also when it throws.
using Attempt = std::function<void(const TrainConfig& config, int attempt, TrainResult& result)>;

// Runs attempts until one succeeds, one fails with an error a restart cannot cure, or
// config.max_restarts restarts are spent (then the last error is rethrown). The result holds
// every step once: the records of a failed attempt up to where the next one resumed, then the
// next one's.
TrainResult run_with_restarts(const TrainConfig& config, const Attempt& attempt);

// The loop part that throws config.injected_faults with step >= 0 on `rank` in `attempt`,
// before their step.
class InjectedFaults final : public TrainerPart {
 public:
  InjectedFaults(const TrainConfig& config, int rank, int attempt)
      : config_(config), rank_(rank), attempt_(attempt) {}
  void before_step(int64_t step, bool last) override;

 private:
  const TrainConfig& config_;
  const int rank_;
  const int attempt_;
};

// Wraps rank `rank`'s local backend in a FaultInjectingBackend when config.injected_faults has a
// communicator fault (step < 0) for it in `attempt`; returns the backend unchanged otherwise.
std::unique_ptr<comm::Backend> local_fault_wrapper(const TrainConfig& config, int attempt,
                                                   std::unique_ptr<comm::Backend> backend,
                                                   int rank);

// Whether config.injected_faults has a communicator fault (step < 0) in `attempt` (< 0: in any).
bool has_comm_faults(const TrainConfig& config, int attempt);

// Parses --inject-fault RANK:STEP[:KIND] (KIND: comm (default), io, numerical, invalid, hang) into
// a fault of the first attempt. Throws InvalidArgument naming the flag and the expected form.
InjectedFault parse_injected_fault(const std::string& text);

}  // namespace zs::train
