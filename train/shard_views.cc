// LocalShard -> optim::ShardView.
#include "train/shard_views.h"

namespace zs::train {

std::vector<optim::ShardView> optimizer_views(const sharding::ShardedModel& model) {
  std::vector<optim::ShardView> views;
  for (const sharding::LocalShard& shard : model.local_shards()) {
    optim::ShardView view{shard.unit, shard.master, shard.grad, {}};
    for (const sharding::ShardSegment& segment : shard.segments) {
      view.segments.push_back({segment.begin, segment.end, segment.decay});
    }
    views.push_back(std::move(view));
  }
  return views;
}

}  // namespace zs::train
