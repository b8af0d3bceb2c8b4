// CollectiveSpans (sharding/collective_spans.h).
#include "sharding/collective_spans.h"

#include <algorithm>
#include <utility>

namespace zs::sharding {

void CollectiveSpans::issued(const comm::WorkPtr& work, TraceLane lane, const char* what,
                             const std::string& unit, SteadyClock::time_point issued_at) {
  if (!trace_) return;
  pending_.push_back({work, lane, std::string(what) + " " + unit, issued_at});
}

void CollectiveSpans::record_completed() {
  if (!trace_) return;
  const auto done = std::stable_partition(pending_.begin(), pending_.end(),
                                          [](const Pending& p) { return !p.work->test(); });
  for (auto it = done; it != pending_.end(); ++it) {
    trace_->record(it->lane, std::move(it->name), it->issued_at, it->work->completed_at());
  }
  pending_.erase(done, pending_.end());
}

}  // namespace zs::sharding
