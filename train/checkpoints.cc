// make_checkpointer and data_position (train/checkpoints.h).
#include "train/checkpoints.h"

namespace zs::train {

std::unique_ptr<Checkpointer> make_checkpointer(const TrainConfig& /*config*/,
                                                const TrainState& /*state*/) {
  return std::make_unique<NoCheckpoints>();
}

data::BatchPosition data_position(const data::BatchSampler& sampler, int64_t completed_steps,
                                  int64_t micro_batches_per_step) {
  data::BatchPosition position;
  for (int64_t i = 0; i < completed_steps * micro_batches_per_step; ++i) {
    position = sampler.next(position);
  }
  return position;
}

}  // namespace zs::train
