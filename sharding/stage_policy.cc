// StagePolicy::make: the table of sharding/stage_policy.h, one row per stage; GradSync's and
// ParamOffload's names.
#include "sharding/stage_policy.h"

#include "runtime/error.h"

namespace zs::sharding {

const char* param_offload_name(ParamOffload offload) {
  switch (offload) {
    case ParamOffload::kNone:
      return "none";
    case ParamOffload::kHost:
      return "host";
    case ParamOffload::kNvme:
      return "nvme";
  }
  return "unknown";
}

const char* grad_sync_name(GradSync sync) {
  switch (sync) {
    case GradSync::kPerMicroBatch:
      return "per_micro_batch";
    case GradSync::kPerStep:
      return "per_step";
  }
  return "unknown";
}

StagePolicy StagePolicy::make(int requested_stage, bool hybrid_requested, int shard_ranks) {
  ZS_CHECK(requested_stage >= 0 && requested_stage <= 3,
           "sharding: stage must be 0, 1, 2 or 3, got ", requested_stage);
  ZS_CHECK(!hybrid_requested || requested_stage == 3,
           "sharding: hybrid sharding needs stage 3, got stage ", requested_stage);
  ZS_CHECK(shard_ranks >= 1, "sharding: a shard group has at least one rank, got ", shard_ranks);
  // One rank per shard group: nothing to shard, run stage 0 over the world.
  const bool shards = shard_ranks > 1;
  const int stage = shards ? requested_stage : 0;
  const bool hybrid = shards && hybrid_requested;
  StagePolicy policy;
  policy.stage = stage;
  policy.requested_stage = requested_stage;
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
