// Tests of stage 3's prefetch depth in bytes (ShardingConfig::prefetch_bytes): the bytes
// gathered ahead and not yet used never exceed the bound, a bound of several units prefetches
// more than one unit ahead, a bound below one unit prefetches nothing, and no bound changes a
// bit of the parameters or the losses.
#include <gtest/gtest.h>

#include "sharding/sharded_model.h"
#include "tests/sharding/sharding_test_util.h"

namespace zs::sharding {
namespace {

using testing::kSeq;
using testing::train;
using testing::uneven_config;

// Two ranks of a 4-block GPT at stage 3, three steps of forward and backward with `bound`;
// returns rank 0's peak prefetched bytes, and the size of one block's full parameters.
struct PrefetchRun {
  size_t peak_prefetched = 0;
  size_t block_bytes = 0;
};

PrefetchRun run_with_bound(double bound_in_blocks) {
  PrefetchRun out;
  comm::run_local_ranks(2, [&](comm::Communicator& comm) {
    CpuAllocator allocator(nullptr);
    models::GptConfig gpt = uneven_config();
    gpt.n_layer = 4;
    size_t block_bytes = 0;
    {
      ShardingConfig probe_config;
      probe_config.prefetch = false;
      models::Gpt probe(gpt);
      ShardedModel sizes(probe, comm, allocator, probe_config);
      for (const auto& unit : sizes.units()) {
        if (unit.name != "<root>") block_bytes = static_cast<size_t>(unit.padded_numel) * 4;
      }
    }
    models::Gpt model(gpt);
    ShardingConfig config;
    config.prefetch_bytes = std::max<size_t>(
        1, static_cast<size_t>(bound_in_blocks * static_cast<double>(block_bytes)));
    ShardedModel sharded(model, comm, allocator, config);
    Tensor ids = Tensor::zeros({2, kSeq}, DType::kI32, allocator, "ids");
    for (int step = 0; step < 3; ++step) {
      backward(model.loss(ids, ids));
      sharded.finish_backward();
    }
    EXPECT_LE(sharded.peak_prefetched_bytes(), config.prefetch_bytes) << "rank " << comm.rank();
    EXPECT_TRUE(sharded.prefetching());
    if (comm.rank() == 0) {
      out.peak_prefetched = sharded.peak_prefetched_bytes();
      out.block_bytes = block_bytes;
    }
  });
  return out;
}

TEST(PrefetchBytes, GatheredAheadStaysWithinTheBound) {
  // Room for two and a half blocks: two blocks are gathered ahead at once, never three.
  const PrefetchRun deep = run_with_bound(2.5);
  ASSERT_GT(deep.block_bytes, 0u);
  EXPECT_EQ(deep.peak_prefetched, 2 * deep.block_bytes);
  // Room for one block: one at a time.
  const PrefetchRun one = run_with_bound(1.0);
  EXPECT_EQ(one.peak_prefetched, one.block_bytes);
  // Less than a block: the bound is strict, so no block is prefetched (each is gathered when it
  // runs). The root is smaller than a block and may still be.
  const PrefetchRun none = run_with_bound(0.5);
  EXPECT_LT(none.peak_prefetched, none.block_bytes);
}

TEST(PrefetchBytes, BoundsChangeNoBits) {
  const testing::RunResult reference = train(2, 3, 4);  // one unit ahead
  for (const size_t bound : {size_t{1}, size_t{4096}, size_t{1} << 30}) {
    ShardingConfig config;
    config.prefetch_bytes = bound;
    const testing::RunResult bounded = train(2, 3, 4, config);
    EXPECT_EQ(bounded.params, reference.params) << "prefetch_bytes " << bound;
    EXPECT_EQ(bounded.losses, reference.losses) << "prefetch_bytes " << bound;
  }
}

}  // namespace
}  // namespace zs::sharding
