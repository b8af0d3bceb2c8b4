// RunReport: the loop part that profiles the last step and prints the end-of-run tables.
//
// The last step is the profiled one: traffic counters and memory peaks are reset before it, and
// with config.profile_memory its allocations are recorded. At the end every rank's peaks are
// gathered (min/max over ranks), the last step's traffic is set next to the stage's formula,
// rank 0 prints both tables, and with profile_memory each rank writes its JSON timeline and an
// SVG chart. Issues a collective at the end. One rank's thread.
#pragma once

#include "train/loop.h"
#include "train/rank_context.h"
#include "train/report.h"

namespace zs::train {

class RunReport final : public TrainerPart {
 public:
  explicit RunReport(const RankContext& rank) : rank_(rank) {}
  void before_step(int64_t step, bool last) override;
  void after_step(const StepRecord& record, bool last) override;
  void on_end(int64_t steps) override;

 private:
  const RankContext& rank_;
  StepTraffic step_traffic_{};
  bool have_step_traffic_ = false;
  CategoryBytes profile_start_{};
  CategoryBytes host_profile_start_{};  // the host tier's, with optimizer offload
};

}  // namespace zs::train
