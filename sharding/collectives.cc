// The collective strategies (sharding/collectives.h).
#include "sharding/collectives.h"

#include "runtime/error.h"
#include "runtime/logging.h"
#include "sharding/sharded_model.h"

namespace zs::sharding {

FlatParamGather::FlatParamGather(comm::Communicator& shard_group, bool own_queue, bool warn)
    : comm_(&shard_group) {
  if (!own_queue) return;
  try {
    duplicate_ = shard_group.duplicate();
    comm_ = duplicate_.get();
  } catch (const NotImplemented& e) {
    // A backend that cannot split (nccl before 2.18). Every rank runs the same build, so every
    // rank lands here, and the failed split aborted nothing: one queue for both, as before.
    if (warn) {
      ZS_LOG_WARN(
          "sharding: parameter all-gathers share the gradient reductions' queue ({}); they may "
          "wait behind reductions",
          e.what());
    }
  }
}

comm::WorkPtr FlatParamGather::all_gather(const Tensor& shard, const Tensor& full,
                                          const std::string& unit) {
  return comm_->all_gather(shard, full, {{}, unit});
}

std::unique_ptr<ParamGather> make_param_gather(comm::Communicator& shard_group,
                                               const StagePolicy& policy,
                                               const ShardingConfig& config, int world_rank) {
  // Stage 3 gathers during forward and backward while reductions run: a queue of their own.
  const bool own_queue = !policy.full_params_persist && config.separate_gather_queue;
  return std::make_unique<FlatParamGather>(shard_group, own_queue, world_rank == 0);
}

}  // namespace zs::sharding
