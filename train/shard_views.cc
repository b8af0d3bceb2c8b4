// The global gradient norm of a ShardedModel's shards (train/shard_views.h).
#include "train/shard_views.h"

#include <cmath>

#include "optim/clip.h"

namespace zs::train {

float gradient_norm(sharding::ShardedModel& model, const std::vector<optim::ShardView>& views) {
  comm::Communicator& group = model.shard_group();
  double local = 0;
  if (!model.policy().masters_sharded) {
    // Full replicas (stage 0): sum the slice this rank would own under sharding (padded buffers
    // divide evenly), in the same order the sharded stages sum their shards.
    for (const optim::ShardView& view : views) {
      const int64_t slice = view.master.numel() / group.size();
      local += optim::grad_sum_of_squares(
          optim::slice_view(view, group.rank() * slice, (group.rank() + 1) * slice));
    }
  } else {
    local = optim::grad_sum_of_squares(views);
  }
  return optim::global_grad_norm(local, group);
}

float clip_gradients(sharding::ShardedModel& model, const std::vector<optim::ShardView>& views,
                     float max_norm) {
  const float norm = gradient_norm(model, views);
  if (std::isfinite(norm)) optim::scale_grads(views, optim::clip_coefficient(norm, max_norm));
  return norm;
}

}  // namespace zs::train
