// StagePolicy::make: the table of sharding/stage_policy.h, one row per stage.
#include "sharding/stage_policy.h"

#include "runtime/error.h"

namespace zs::sharding {

StagePolicy StagePolicy::make(int stage, bool hybrid) {
  ZS_CHECK(stage >= 0 && stage <= 3, "sharding: stage must be 0, 1, 2 or 3, got ", stage);
  ZS_CHECK(!hybrid || stage == 3, "sharding: hybrid sharding needs stage 3, got stage ", stage);
  StagePolicy policy;
  policy.stage = stage;
  policy.hybrid = hybrid;
  policy.full_params_persist = stage <= 2;
  policy.full_grads_persist = stage <= 1;
  policy.masters_sharded = stage >= 1;
  policy.reduce_collective =
      stage == 0 ? GradientCollective::kAllReduce : GradientCollective::kReduceScatter;
  policy.reduce_timing = stage == 1 ? ReduceTiming::kEndOfBackward : ReduceTiming::kPerUnit;
  policy.all_reduce_across_groups = hybrid;
  policy.gather_after_step = stage >= 1;
  return policy;
}

}  // namespace zs::sharding
