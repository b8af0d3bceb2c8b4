// Restarts after a failure (train/restarts.h): which errors are retried, the restart loop around
// the engine's world, and the faults tests inject.
#include "train/restarts.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "comm/fault_backend.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace zs::train {
namespace {

// What a restart resumes from: the newest checkpoint in --checkpoint-dir once the run has saved
// one there; before that, what the first attempt started from (--resume PATH, or scratch).
std::string resume_for_restart(const TrainConfig& config) {
  return checkpoint::step_dirs(config.checkpoint_dir).empty() ? config.resume : "auto";
}

// Where a restart with `restart`'s --resume starts from, for the log.
std::string describe_resume(const TrainConfig& restart) {
  if (restart.resume == "auto") {
    return "resuming from the newest checkpoint in " + restart.checkpoint_dir;
  }
  if (restart.resume.empty()) return "no checkpoint yet; from scratch";
  return "no checkpoint yet; from " + restart.resume;
}

// Drops the records of `records` at or after `from` (> `from` when `inclusive` is false).
template <typename Record>
void drop_from(std::vector<Record>& records, int64_t from, bool inclusive) {
  records.erase(
      std::remove_if(records.begin(), records.end(),
                     [&](const Record& r) { return inclusive ? r.step >= from : r.step > from; }),
      records.end());
}

// Appends `next` (an attempt's records) to `merged` (the earlier attempts'): the records of
// steps and evaluations that `next` ran again are dropped from the earlier ones, so every step
// appears once. The other figures (memory, traffic, sample) are the newest attempt's.
void merge_attempt(TrainResult& merged, TrainResult next) {
  if (!next.steps.empty()) {
    // An attempt resuming at step k re-runs steps k.. and the evaluations after k steps.
    drop_from(merged.steps, next.steps.front().step, true);
    drop_from(merged.evals, next.steps.front().step, false);
  }
  if (!next.evals.empty()) drop_from(merged.evals, next.evals.front().step, true);
  merged.steps.insert(merged.steps.end(), next.steps.begin(), next.steps.end());
  merged.evals.insert(merged.evals.end(), next.evals.begin(), next.evals.end());
  next.steps = std::move(merged.steps);
  next.evals = std::move(merged.evals);
  next.restarts = merged.restarts;
  merged = std::move(next);
}

const char* fault_kind_name(InjectedFault::Kind kind) {
  switch (kind) {
    case InjectedFault::Kind::kCommError:
      return "comm";
    case InjectedFault::Kind::kIoError:
      return "io";
    case InjectedFault::Kind::kNumericalError:
      return "numerical";
    case InjectedFault::Kind::kInvalidArgument:
      return "invalid";
    case InjectedFault::Kind::kHang:
      return "hang";
    case InjectedFault::Kind::kSigterm:
      return "sigterm";
  }
  return "?";
}

}  // namespace

bool restart_can_cure(const std::exception& error) {
  // The same input gives these again: retrying would spend the restarts on the same failure.
  return dynamic_cast<const InvalidArgument*>(&error) == nullptr &&
         dynamic_cast<const NotImplemented*>(&error) == nullptr &&
         dynamic_cast<const CorruptCheckpoint*>(&error) == nullptr &&
         dynamic_cast<const OutOfMemory*>(&error) == nullptr &&
         dynamic_cast<const NumericalError*>(&error) == nullptr &&
         dynamic_cast<const ReleasedTensor*>(&error) == nullptr;
}

std::string error_kind(const std::exception& error) {
  // Most derived first (CommTimeout is a CommError).
  if (dynamic_cast<const CommTimeout*>(&error)) return "CommTimeout";
  if (dynamic_cast<const CommError*>(&error)) return "CommError";
  if (dynamic_cast<const IoError*>(&error)) return "IoError";
  if (dynamic_cast<const InvalidArgument*>(&error)) return "InvalidArgument";
  if (dynamic_cast<const NotImplemented*>(&error)) return "NotImplemented";
  if (dynamic_cast<const CorruptCheckpoint*>(&error)) return "CorruptCheckpoint";
  if (dynamic_cast<const OutOfMemory*>(&error)) return "OutOfMemory";
  if (dynamic_cast<const NumericalError*>(&error)) return "NumericalError";
  if (dynamic_cast<const ReleasedTensor*>(&error)) return "ReleasedTensor";
  if (dynamic_cast<const Error*>(&error)) return "Error";
  return "std::exception";
}

void check_restart_settings(const TrainConfig& config, bool rank_threads,
                            const comm::LaunchInfo& launch) {
  ZS_CHECK(config.max_restarts >= 0, "--max-restarts ", config.max_restarts,
           " must be >= 0 (0: no restarts)");
  if (config.max_restarts == 0) return;
  ZS_CHECK(!config.checkpoint_dir.empty(), "--max-restarts ", config.max_restarts,
           " needs --checkpoint-dir: a restart resumes from the newest checkpoint there, and "
           "without one it would start from scratch; add --checkpoint-dir DIR (and "
           "--checkpoint-interval N), or drop --max-restarts");
  ZS_CHECK(rank_threads, "--max-restarts ", config.max_restarts,
           " restarts the rank threads of one process, but this process is one rank of a job (",
           launch.describe(),
           ") and cannot restart its peers; drop --max-restarts and run the job under the "
           "launcher, which reruns it with --resume auto: scripts/zs-launch --max-restarts ",
           config.max_restarts, " -- mpirun ... zs-train --checkpoint-dir DIR ... (or srun)");
  if (config.checkpoint_interval == 0) {
    ZS_LOG_WARN(
        "--max-restarts {} without --checkpoint-interval: checkpoints are saved only at the "
        "end, so a restart starts from scratch (or from --resume); set --checkpoint-interval N",
        config.max_restarts);
  }
}

TrainResult run_with_restarts(const TrainConfig& config, const Attempt& attempt) {
  TrainResult merged;
  TrainConfig current = config;
  for (int index = 0;; ++index) {
    TrainResult result;
    try {
      attempt(current, index, result);
      merge_attempt(merged, std::move(result));
      return merged;
    } catch (const std::exception& e) {
      merge_attempt(merged, std::move(result));
      if (config.max_restarts == 0) throw;
      if (!restart_can_cure(e)) {
        ZS_LOG_ERROR("not restarting after {}: a restart cannot cure it (it fails again)",
                     error_kind(e));
        throw;
      }
      if (index >= config.max_restarts) {
        ZS_LOG_ERROR("giving up: all {} restarts (--max-restarts) are spent", config.max_restarts);
        throw;
      }
      current.resume = resume_for_restart(config);
      ZS_LOG_WARN("restart {} of {} after: {}: {}", index + 1, config.max_restarts, error_kind(e),
                  e.what());
      ZS_LOG_WARN("restart {}: {}", index + 1, describe_resume(current));
      merged.restarts = index + 1;
    }
  }
}

void InjectedFaults::before_step(int64_t step, bool /*last*/) {
  for (const InjectedFault& f : config_.injected_faults) {
    if (f.step != step || f.rank != rank_ || f.attempt != attempt_) continue;
    const auto what = [&] {
      return "injected fault (" + std::string(fault_kind_name(f.kind)) + "): rank " +
             std::to_string(rank_) + " fails before step " + std::to_string(step) + " of attempt " +
             std::to_string(attempt_);
    };
    switch (f.kind) {
      case InjectedFault::Kind::kCommError:
        ZS_THROW(CommError, what());
      case InjectedFault::Kind::kIoError:
        ZS_THROW(IoError, what());
      case InjectedFault::Kind::kNumericalError:
        ZS_THROW(NumericalError, what());
      case InjectedFault::Kind::kInvalidArgument:
        ZS_THROW(InvalidArgument, what());
      case InjectedFault::Kind::kSigterm:
        ZS_LOG_WARN("{}: raising SIGTERM", what());
        std::raise(SIGTERM);
        break;
      case InjectedFault::Kind::kHang: {
        // Bounded, so that rank threads, whose group aborts without ending the process, end too.
        const std::chrono::milliseconds timeout =
            config_.comm_timeout_s > 0
                ? std::chrono::milliseconds(static_cast<int64_t>(config_.comm_timeout_s * 1000))
                : comm::default_timeout();
        const auto hang = 2 * timeout + std::chrono::seconds(10);
        const double seconds = std::chrono::duration<double>(hang).count();
        ZS_LOG_WARN("{}: hanging for {} s outside every collective", what(), seconds);
        std::this_thread::sleep_for(hang);
        ZS_THROW(CommError, what(), ": the injected hang ended after ", seconds, " s");
      }
    }
  }
}

bool has_comm_faults(const TrainConfig& config, int attempt) {
  return std::any_of(
      config.injected_faults.begin(), config.injected_faults.end(),
      [&](const InjectedFault& f) { return f.step < 0 && (attempt < 0 || f.attempt == attempt); });
}

std::unique_ptr<comm::Backend> local_fault_wrapper(const TrainConfig& config, int attempt,
                                                   std::unique_ptr<comm::Backend> backend,
                                                   int rank) {
  for (const InjectedFault& f : config.injected_faults) {
    if (f.step < 0 && f.attempt == attempt && f.rank == rank) {
      return std::make_unique<comm::FaultInjectingBackend>(std::move(backend), f.comm);
    }
  }
  return backend;
}

InjectedFault parse_injected_fault(const std::string& text) {
  const auto bad = [&] {
    ZS_THROW(InvalidArgument, "--inject-fault '", text,
             "': expected RANK:STEP[:KIND] (KIND: comm, io, numerical, invalid, hang or sigterm), "
             "e.g. 1:5 "
             "makes rank 1 fail with a CommError before step 5");
  };
  InjectedFault fault;
  const size_t first = text.find(':');
  if (first == std::string::npos) bad();
  const size_t second = text.find(':', first + 1);
  const std::string rank = text.substr(0, first);
  const std::string step =
      text.substr(first + 1, second == std::string::npos ? std::string::npos : second - first - 1);
  const std::string kind = second == std::string::npos ? "comm" : text.substr(second + 1);
  const auto number = [&](const std::string& s) -> int64_t {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) bad();
    return std::strtoll(s.c_str(), nullptr, 10);
  };
  fault.rank = static_cast<int>(number(rank));
  fault.step = number(step);
  for (const auto k : {InjectedFault::Kind::kCommError, InjectedFault::Kind::kIoError,
                       InjectedFault::Kind::kNumericalError, InjectedFault::Kind::kInvalidArgument,
                       InjectedFault::Kind::kHang, InjectedFault::Kind::kSigterm}) {
    if (kind == fault_kind_name(k)) {
      fault.kind = k;
      return fault;
    }
  }
  bad();
  return fault;
}

}  // namespace zs::train
