// StagePolicy: every answer for stages 0–3 and hybrid in closed form (the table in
// sharding/stage_policy.h), the invalid combinations, and that ShardedModel reports the units
// it keeps gathered by that policy.
#include "sharding/stage_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "comm/local/local_backend.h"
#include "models/gpt.h"
#include "runtime/error.h"
#include "sharding/sharded_model.h"
#include "tests/sharding/sharding_test_util.h"

namespace zs::sharding {
namespace {

TEST(StagePolicy, AnswersEachStageInClosedForm) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (bool hybrid : {false, true}) {
      if (hybrid && stage != 3) continue;
      const StagePolicy p = StagePolicy::make(stage, hybrid, 4);
      SCOPED_TRACE("stage " + std::to_string(stage) + (hybrid ? " hybrid" : ""));
      EXPECT_EQ(p.stage, stage);
      EXPECT_EQ(p.hybrid, hybrid);
      // Persistent: full parameters up to stage 2, full gradients up to stage 1, full masters
      // only at stage 0.
      EXPECT_EQ(p.full_params_persist, stage <= 2);
      EXPECT_EQ(p.full_grads_persist, stage <= 1);
      EXPECT_EQ(p.masters_sharded, stage >= 1);
      // Reduction: DDP all-reduces, the sharded stages reduce-scatter; only stage 1 waits for
      // the end of backward; hybrid adds the all-reduce across the groups.
      EXPECT_EQ(p.reduce_collective,
                stage == 0 ? GradientCollective::kAllReduce : GradientCollective::kReduceScatter);
      EXPECT_EQ(p.reduce_timing,
                stage == 1 ? ReduceTiming::kEndOfBackward : ReduceTiming::kPerUnit);
      EXPECT_EQ(p.all_reduce_across_groups, hybrid);
      // After the step: the sharded stages all-gather the updated slices.
      EXPECT_EQ(p.gather_after_step, stage >= 1);
      // Owned master elements of a unit of 96 padded elements over 4 ranks (24 each), rank 2.
      EXPECT_EQ(p.master_numel(96, 24), stage == 0 ? 96 : 24);
      EXPECT_EQ(p.master_begin(2, 24), stage == 0 ? 0 : 48);
    }
  }
}

// A shard group of one rank shards nothing: every stage, and hybrid, runs as stage 0 (DDP) over
// the world, and the policy says which stage was asked for.
TEST(StagePolicy, AShardGroupOfOneRankRunsEveryStageAsStageZero) {
  const StagePolicy ddp = StagePolicy::make(0, false, 4);
  for (int stage = 0; stage <= 3; ++stage) {
    for (bool hybrid : {false, true}) {
      if (hybrid && stage != 3) continue;
      const StagePolicy p = StagePolicy::make(stage, hybrid, 1);
      SCOPED_TRACE("stage " + std::to_string(stage) + (hybrid ? " hybrid" : ""));
      EXPECT_EQ(p.stage, 0);
      EXPECT_EQ(p.requested_stage, stage);
      EXPECT_FALSE(p.hybrid);
      EXPECT_TRUE(p.full_params_persist);
      EXPECT_TRUE(p.full_grads_persist);
      EXPECT_FALSE(p.masters_sharded);
      EXPECT_EQ(p.reduce_collective, ddp.reduce_collective);
      EXPECT_EQ(p.reduce_timing, ddp.reduce_timing);
      EXPECT_FALSE(p.all_reduce_across_groups);
      EXPECT_FALSE(p.gather_after_step);
      EXPECT_EQ(p.master_numel(96, 96), 96);
      EXPECT_EQ(p.master_begin(0, 96), 0);
    }
  }
  EXPECT_THROW(StagePolicy::make(3, false, 0), InvalidArgument);
}

TEST(StagePolicy, StaysGatheredIsEveryUnitWherePersistentElseTheSmallOnes) {
  for (int stage = 0; stage <= 3; ++stage) {
    const StagePolicy p = StagePolicy::make(stage, false, 4);
    EXPECT_EQ(p.stays_gathered(1000, 0), stage <= 2) << stage;
    EXPECT_EQ(p.stays_gathered(1000, 1000), stage <= 2) << stage;  // strictly below
    EXPECT_TRUE(p.stays_gathered(999, 1000)) << stage;
  }
}

TEST(StagePolicy, RejectsAStageOutsideZeroToThreeAndHybridBelowStageThree) {
  EXPECT_THROW(StagePolicy::make(-1, false, 4), InvalidArgument);
  EXPECT_THROW(StagePolicy::make(4, false, 4), InvalidArgument);
  for (int stage : {0, 1, 2}) EXPECT_THROW(StagePolicy::make(stage, true, 4), InvalidArgument);
}

TEST(StagePolicy, ShardedModelReportsTheUnitsThatStayGathered) {
  comm::run_local_ranks(2, [&](comm::Communicator& comm) {
    CpuAllocator allocator(nullptr);
    for (int stage = 0; stage <= 3; ++stage) {
      models::Gpt model(testing::uneven_config());
      ShardingConfig config;
      config.stage = stage;
      // Between a block's and the root's full bytes: the smaller kind stays gathered at stage 3.
      size_t block_bytes = 0, root_bytes = 0;
      {
        models::Gpt probe(testing::uneven_config());
        ShardingConfig probe_config;
        probe_config.stage = stage;
        ShardedModel sizes(probe, comm, allocator, probe_config);
        for (const auto& unit : sizes.units()) {
          (unit.name == "<root>" ? root_bytes : block_bytes) = 4 * unit.padded_numel;
        }
      }
      ASSERT_NE(block_bytes, root_bytes);
      const bool keep_root = root_bytes < block_bytes;
      config.keep_gathered_below_bytes = std::min(block_bytes, root_bytes) + 1;
      ShardedModel sharded(model, comm, allocator, config);
      EXPECT_EQ(sharded.policy().stage, stage);
      for (const auto& unit : sharded.units()) {
        EXPECT_EQ(unit.stays_gathered, stage <= 2 || (unit.name == "<root>") == keep_root)
            << "stage " << stage << " unit " << unit.name;
      }
    }
  });
}

}  // namespace
}  // namespace zs::sharding
