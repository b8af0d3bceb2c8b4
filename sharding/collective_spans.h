// CollectiveSpans: the trace spans (runtime/trace.h) of a rank's collectives, from issue to
// completion.
//
// A span begins when the rank issued the collective (it may then queue behind earlier ones on
// its communicator, which the span includes: it is the time the rank waited for the result to
// be possible, not the wire time alone) and ends at Work::completed_at(), the moment the
// communicator's thread completed it (CPU backends: when it had run; nccl: when that thread saw
// the completion event fire, so up to one poll late). The end is known only once the Work has
// completed, which on a GPU can be after the host moved on (wait_on does not block), so a
// collective is held here until record_completed() finds it complete; the owner calls that at
// points where most have (after its waits), and what is still in flight stays for the next call.
// Collectives still in flight when this object goes are not recorded.
//
// Disabled (null trace) it holds nothing and costs a null check. Not thread-safe: the rank's
// thread issues and records (the Trace itself is).
#pragma once

#include <string>
#include <vector>

#include "comm/work.h"
#include "runtime/trace.h"

namespace zs::sharding {

class CollectiveSpans {
 public:
  void set_trace(Trace* trace) { trace_ = trace; }
  Trace* trace() const { return trace_; }
  bool enabled() const { return trace_ != nullptr; }
  // The issue time to pass to issued(): now, or (disabled) no clock read.
  SteadyClock::time_point start() const {
    return trace_ ? SteadyClock::now() : SteadyClock::time_point{};
  }
  // Holds `work`, issued at `issued_at`, until it completes; its span is named "<what> <unit>".
  void issued(const comm::WorkPtr& work, TraceLane lane, const char* what, const std::string& unit,
              SteadyClock::time_point issued_at);
  // Records the spans of the held collectives that have completed, and lets them go.
  void record_completed();

 private:
  struct Pending {
    comm::WorkPtr work;
    TraceLane lane;
    std::string name;
    SteadyClock::time_point issued_at;
  };
  Trace* trace_ = nullptr;
  std::vector<Pending> pending_;
};

}  // namespace zs::sharding
