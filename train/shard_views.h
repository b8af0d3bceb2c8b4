// The global gradient norm and its clipping over a ShardedModel's local shards, for every stage
// and hybrid. It needs both sibling layers — the model's stage and shard group (sharding) and
// the norm's arithmetic (optim) — which do not include each other, so it sits here. The shards
// themselves are the one view type both layers share (ShardedModel::local_shards(), an
// optim::ShardView each): no conversion.
#pragma once

#include <vector>

#include "optim/shard_view.h"
#include "sharding/sharded_model.h"

namespace zs::train {

// Clips the gradients of `views` (model.local_shards(), or copies of them) to a global norm of
// at most `max_norm` and returns the norm before clipping, for every stage and hybrid: each
// gradient element is counted exactly once (stage 0 holds full replicas, so each rank sums the
// slice it would own under sharding; hybrid replicas sum within their shard group), so the norm
// is the same bits in every stage. One all-reduce. A non-finite norm leaves the gradients
// untouched. Only between finish_backward() and after_step() (sharding/step_order.h).
float clip_gradients(sharding::ShardedModel& model, const std::vector<optim::ShardView>& views,
                     float max_norm);

// The same global norm, without clipping (the same bits as clip_gradients returns).
float gradient_norm(sharding::ShardedModel& model, const std::vector<optim::ShardView>& views);

}  // namespace zs::train
