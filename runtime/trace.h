// Trace: a rank's timeline of what it did when — compute, parameter gathers, gradient
// reductions, the optimizer, I/O, data waits — written as a Chrome/Perfetto trace
// (chrome://tracing, ui.perfetto.dev: the JSON "traceEvents" format, complete events "ph":"X"
// with ts/dur in microseconds, pid = the rank, one tid per lane). And the one figure computed
// from it: communication time not overlapped by compute (exposed_communication).
//
// Times are host times of the steady clock (microseconds since its epoch, so the files of ranks
// on one host line up when loaded together). A span of a collective runs from its issue to its
// completion as the communicator's thread saw it (see sharding/collective_spans.h); on a GPU the
// compute spans are when the host ran the ops, i.e. enqueued the kernels, not when the device
// ran them, so figures derived from them describe the host's schedule only.
//
// Cost: the recorder is handed around as a nullable pointer; callers that get null record
// nothing (TraceScope with a null trace reads no clock). Enabled, a span is one clock read at
// each end and one push under a mutex.
//
// Thread-safe: record() and spans() may be called from any thread (the rank's thread and its
// communicator threads). write() reads a snapshot.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/clock.h"

namespace zs {

// The kind of work a span is, and the trace lane (tid) it is drawn in. Overlapping spans of one
// kind that do not nest (collectives in flight together) are spread over extra lanes of that
// kind ("gather", "gather #2", …) when the file is written, so each lane stays well formed.
enum class TraceLane {
  kStep,       // one optimizer step of the loop, from its first batch to its logged loss
  kCompute,    // forward and backward (per micro-batch, and per sharded unit inside)
  kWait,       // the host blocked on a collective inside compute (not compute time)
  kGather,     // parameter all-gathers, issue → completion
  kReduce,     // gradient reductions (reduce-scatter / all-reduce), issue → completion
  kOptimizer,  // gradient clipping and the optimizer step
  kIo,         // checkpoint saves and their publishing
  kData,       // waiting for the next batch
};
const char* trace_lane_name(TraceLane lane);  // "step", "compute", "wait", …

struct TraceSpan {
  TraceLane lane;
  std::string name;
  double begin_us;  // steady-clock microseconds
  double end_us;
};

// Microseconds of `t` on the steady clock's epoch (the time base of TraceSpan).
inline double trace_us(SteadyClock::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

class Trace {
 public:
  // `rank`: the pid of every event, and the process name "rank <r>".
  explicit Trace(int rank) : rank_(rank) {}
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  int rank() const { return rank_; }
  // A span of `lane` from `begin` to `end` (end before begin is recorded as zero length).
  void record(TraceLane lane, std::string name, SteadyClock::time_point begin,
              SteadyClock::time_point end);
  std::vector<TraceSpan> spans() const;
  // Writes the Chrome trace JSON to `path` (runtime/file_io.h AtomicFileWriter: a temporary
  // file renamed into place). Throws IoError naming the path if it cannot be written.
  void write(const std::string& path) const;

 private:
  const int rank_;
  mutable std::mutex mutex_;
  std::vector<TraceSpan> spans_;
};

// The trace JSON of `spans` for rank `rank` (what Trace::write writes).
std::string chrome_trace_json(const std::vector<TraceSpan>& spans, int rank);

// Records one span from construction to destruction; does nothing (reads no clock) when
// `trace` is null.
class TraceScope {
 public:
  TraceScope(Trace* trace, TraceLane lane, const char* name)
      : trace_(trace), lane_(lane), name_(name) {
    if (trace_) begin_ = SteadyClock::now();
  }
  ~TraceScope() {
    if (trace_) trace_->record(lane_, name_, begin_, SteadyClock::now());
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  Trace* trace_;
  TraceLane lane_;
  const char* name_;
  SteadyClock::time_point begin_;
};

// Exposed communication of one step: the time in [begin_us, end_us) (a kStep span) during
// which a collective was in flight (the union of the kGather and kReduce spans) and the rank
// was not computing. Computing is the union of the kCompute and kOptimizer spans minus the
// union of the kWait spans (a forward that blocks on an all-gather is waiting, not computing).
// So a collective hidden behind compute counts 0, a host wait for one counts in full, and
// communication while nothing was traced (between the step's parts) counts too.
struct StepExposure {
  double step_us = 0;           // the kStep span's length
  double communication_us = 0;  // union of the collectives' spans inside the step
  double exposed_us = 0;        // the part of it not overlapped by compute
};
// One entry per kStep span of `spans`, in time order. Pure.
std::vector<StepExposure> exposed_communication(const std::vector<TraceSpan>& spans);

}  // namespace zs
