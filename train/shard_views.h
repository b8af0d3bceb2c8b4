// The bridge between the sharding engine and the optimizers, which are sibling layers that do
// not include each other: the optimizer's view of each unit's local shard (fp32 master,
// reduced gradient, weight-decay segments). The views hold tensor handles of the shards, which
// live as long as the ShardedModel; build the optimizer once over them.
#pragma once

#include <vector>

#include "optim/shard_view.h"
#include "sharding/sharded_model.h"

namespace zs::train {

// One view per unit, named by the unit (the names key optimizer state in checkpoints).
std::vector<optim::ShardView> optimizer_views(const sharding::ShardedModel& model);

}  // namespace zs::train
