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

// Clips the gradients of `views` (from optimizer_views(model)) to a global norm of at most
// `max_norm` and returns the norm before clipping, for every stage and hybrid: each gradient
// element is counted exactly once (stage 0 holds full replicas, so each rank sums the slice it
// would own under sharding; hybrid replicas sum within their shard group), so the norm is the
// same bits in every stage. One all-reduce. A non-finite norm leaves the gradients untouched.
float clip_gradients(sharding::ShardedModel& model, const std::vector<optim::ShardView>& views,
                     float max_norm);

// The same global norm, without clipping (the same bits as clip_gradients returns).
float gradient_norm(sharding::ShardedModel& model, const std::vector<optim::ShardView>& views);

}  // namespace zs::train
