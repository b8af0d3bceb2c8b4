// Global gradient-norm clipping through the sharded model: the same norm, bit for bit, in
// stages 0–3 at a world size (each element counted once), within rounding under hybrid
// sharding, equal to the single-rank norm, and the clipped gradients have the target norm.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "comm/local/local_backend.h"
#include "models/gpt.h"
#include "optim/clip.h"
#include "runtime/autograd.h"
#include "runtime/rng.h"
#include "train/shard_views.h"

namespace zs::train {
namespace {

// The norm before and after clipping to `max_norm`, from rank 0, after one backward.
std::pair<float, float> norms(int world, int stage, int hybrid_group, float max_norm) {
  std::mutex mutex;
  std::pair<float, float> result;
  comm::run_local_ranks(world, [&](comm::Communicator& comm) {
    CpuAllocator allocator(nullptr);
    models::GptConfig gpt;
    gpt.vocab_size = 23;
    gpt.context = 8;
    gpt.width = 12;
    gpt.n_head = 3;
    gpt.n_layer = 2;
    models::Gpt model(gpt);
    sharding::ShardingConfig config;
    config.stage = stage;
    config.hybrid_group = hybrid_group;
    config.seed = 2;
    sharding::ShardedModel sharded(model, comm, allocator, config);
    const int64_t local = 4 / world, seq = 5;
    Tensor ids = Tensor::empty({local, seq}, DType::kI32, allocator, "ids");
    for (int64_t i = 0; i < local * seq; ++i) {
      ids.data<int32_t>()[i] = static_cast<int32_t>(
          random_bits(rng_key(4, "ids"), static_cast<uint64_t>(comm.rank() * local * seq + i)) %
          23);
    }
    backward(model.loss(ids, ids));
    sharded.finish_backward();
    const std::vector<optim::ShardView> views = sharded.local_shards();
    const float before = clip_gradients(sharded, views, max_norm);
    const float after = clip_gradients(sharded, views, 1e9f);  // measures, scales by 1
    if (comm.rank() == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      result = {before, after};
    }
  });
  return result;
}

TEST(ClipGradients, SameNormInEveryStageAndWorldSize) {
  const float reference = norms(2, 0, 0, 1e9f).first;
  EXPECT_GT(reference, 0.0f);
  for (int stage : {1, 2, 3}) EXPECT_EQ(norms(2, stage, 0, 1e9f).first, reference) << stage;
  EXPECT_NEAR(norms(1, 3, 0, 1e9f).first, reference, 1e-5 * reference);
  EXPECT_NEAR(norms(4, 3, 2, 1e9f).first, norms(4, 3, 0, 1e9f).first, 1e-5 * reference);
}

TEST(ClipGradients, ClipsToTheTargetNorm) {
  const float unclipped = norms(2, 3, 0, 1e9f).first;
  const float target = unclipped / 4;
  for (int stage : {0, 3}) {
    const auto [before, after] = norms(2, stage, 0, target);
    EXPECT_EQ(before, unclipped);
    EXPECT_NEAR(after, target, 1e-5 * target) << stage;
  }
}

}  // namespace
}  // namespace zs::train
