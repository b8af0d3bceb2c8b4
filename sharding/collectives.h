// The collective strategies a ShardedModel drives, each chosen once at construction from the
// StagePolicy and the configuration: ParamGather, the all-gather of a unit's parameters.
//
// A new way of gathering (quantized, hierarchical) is one more ParamGather and one line in
// make_param_gather. A strategy owns the communicator it needs beyond the shard group (the
// gather queue's duplicate), and the traffic it sends is in that communicator's stats(). The
// caller traces the collective (CollectiveSpans) and orders it on the device (Work::wait_on).
//
// Ordering: like every collective, each rank calls a strategy in the same order. Thread-safety:
// used by the owning rank's thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "runtime/tensor.h"
#include "sharding/stage_policy.h"

namespace zs::sharding {

struct ShardingConfig;

class ParamGather {
 public:
  virtual ~ParamGather() = default;
  // The communicator the gathers run on (ShardedModel::gather_group()).
  virtual comm::Communicator& group() = 0;
  // All-gathers every rank's `shard` into `full` (in place when `shard` is
  // group().rank_slice(full)), tagged with the unit's name. The Work keeps both alive.
  virtual comm::WorkPtr all_gather(const Tensor& shard, const Tensor& full,
                                   const std::string& unit) = 0;
};

// The flat all-gather over the shard group, or, for stage 3 with separate_gather_queue, over a
// duplicate of it (a queue of its own, so gathers never wait behind gradient reductions; see
// "Two queues" in sharded_model.h). Making the duplicate is a collective over the shard group. A
// backend that cannot duplicate (nccl before 2.18) leaves one queue for both, with a warning on
// world rank 0.
class FlatParamGather final : public ParamGather {
 public:
  FlatParamGather(comm::Communicator& shard_group, bool own_queue, bool warn);
  comm::Communicator& group() override { return *comm_; }
  comm::WorkPtr all_gather(const Tensor& shard, const Tensor& full,
                           const std::string& unit) override;

 private:
  std::unique_ptr<comm::Communicator> duplicate_;
  comm::Communicator* comm_;
};

// The gather of a model whose shard group is `shard_group` (`world_rank` warns on rank 0).
std::unique_ptr<ParamGather> make_param_gather(comm::Communicator& shard_group,
                                               const StagePolicy& policy,
                                               const ShardingConfig& config, int world_rank);

// What a caller may put in place of the strategies a ShardedModel chooses: each function gets
// the chosen one and returns the one to use (itself, a wrapper around it, or another). Empty:
// the chosen ones. Tests prove the seams with strategies of their own.
struct StrategyOverrides {
  std::function<std::unique_ptr<ParamGather>(std::unique_ptr<ParamGather> chosen)> gather;
};

}  // namespace zs::sharding
