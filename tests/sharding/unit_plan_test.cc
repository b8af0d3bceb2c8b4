// plan_units and the padding arithmetic: which modules become units, what each holds, their
// nesting, and that ShardedModel's units are exactly the plan (names, sizes, padding) for several
// world sizes, alignments and policies.
#include "sharding/unit_plan.h"

#include <gtest/gtest.h>

#include "comm/local/local_backend.h"
#include "models/gpt.h"
#include "models/gpt_presets.h"
#include "runtime/allocator.h"
#include "runtime/error.h"
#include "sharding/sharded_model.h"
#include "tests/sharding/sharding_test_util.h"

namespace zs::sharding {
namespace {

TEST(UnitPlan, BlocksAndTheRoot) {
  models::Gpt model(uneven_config());
  const std::vector<UnitPlan> plan = plan_units(model, {"Block"});
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].name, "<root>");
  EXPECT_EQ(plan[0].module, &model);
  EXPECT_EQ(plan[0].parent, -1);
  EXPECT_EQ(plan[1].name, "blocks.0");
  EXPECT_EQ(plan[2].name, "blocks.1");
  EXPECT_EQ(plan[1].parent, 0);
  EXPECT_EQ(plan[2].parent, 0);
  // The root keeps what no block claimed: embeddings and the final norm.
  std::vector<std::string> root_names;
  for (models::Parameter* p : plan[0].parameters) root_names.push_back(p->name());
  EXPECT_EQ(root_names, (std::vector<std::string>{"wte", "wpe", "ln_f.weight", "ln_f.bias"}));
  const int64_t c = 12;
  EXPECT_EQ(plan[0].numel, 37 * c + 9 * c + 2 * c);
  EXPECT_EQ(plan[1].numel, 12 * c * c + 13 * c);
  EXPECT_EQ(plan[1].parameters.size(), 12u);
  int64_t total = 0;
  for (const UnitPlan& unit : plan) {
    ASSERT_EQ(unit.offsets.size(), unit.parameters.size());
    int64_t offset = 0;
    for (size_t i = 0; i < unit.parameters.size(); ++i) {
      EXPECT_EQ(unit.offsets[i], offset);
      offset += unit.parameters[i]->numel();
    }
    EXPECT_EQ(unit.numel, offset);
    total += unit.numel;
  }
  EXPECT_EQ(total, model.num_parameters());
}

TEST(UnitPlan, NestedUnitsPointAtTheirEnclosingUnit) {
  models::Gpt model(uneven_config());
  const std::vector<UnitPlan> plan = plan_units(model, {"Block", "Linear"});
  // Per block: the block (its norms) and 4 Linears.
  ASSERT_EQ(plan.size(), 1u + 2 * 5);
  EXPECT_EQ(plan[1].name, "blocks.0");
  EXPECT_EQ(plan[1].parameters.size(), 4u);  // ln1 and ln2
  EXPECT_EQ(plan[2].name, "blocks.0.attn.qkv");
  EXPECT_EQ(plan[2].parent, 1);
  EXPECT_EQ(plan[5].name, "blocks.0.mlp.proj");
  EXPECT_EQ(plan[5].parent, 1);
  EXPECT_EQ(plan[6].name, "blocks.1");
  EXPECT_EQ(plan[6].parent, 0);
  EXPECT_EQ(plan[7].parent, 6);
}

TEST(UnitPlan, NoPolicyMeansOneUnitAndSizePolicyClaimsBigModules) {
  models::Gpt model(uneven_config());
  const std::vector<UnitPlan> one = plan_units(model, {});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].numel, model.num_parameters());
  // At least 600 unclaimed elements (inner modules first): a block's MLP fc (624) and its
  // attention (qkv 468 + proj 156), then the block itself (MLP proj 588 + norms 48); the MLP
  // (proj alone, 588) and qkv alone are too small.
  const std::vector<UnitPlan> by_size = plan_units(model, {}, 600);
  std::vector<std::string> names;
  for (const UnitPlan& unit : by_size) names.push_back(unit.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"<root>", "blocks.0", "blocks.0.attn", "blocks.0.mlp.fc",
                                      "blocks.1", "blocks.1.attn", "blocks.1.mlp.fc"}));
  EXPECT_EQ(by_size[1].numel, 588 + 48);
  EXPECT_EQ(by_size[2].parent, 1);
  EXPECT_EQ(by_size[3].parent, 1);
}

TEST(UnitPlan, PaddingArithmetic) {
  EXPECT_EQ(padded_numel(0, 1, 16), 16);  // an empty unit still has one aligned slot per rank
  EXPECT_EQ(padded_numel(0, 4, 16), 64);
  EXPECT_EQ(padded_numel(1, 2, 16), 32);
  EXPECT_EQ(padded_numel(32, 2, 16), 32);
  EXPECT_EQ(padded_numel(33, 2, 16), 64);
  EXPECT_EQ(padded_numel(100, 3, 5), 105);
  EXPECT_EQ(shard_numel(100, 3, 5), 35);
  EXPECT_EQ(shard_numel(124439808, 8, 16), 15554976);  // 124439808 = 8·16·972186 exactly
  EXPECT_THROW(padded_numel(-1, 1, 1), InvalidArgument);
  EXPECT_THROW(padded_numel(1, 0, 1), InvalidArgument);
  EXPECT_THROW(padded_numel(1, 1, 0), InvalidArgument);
}

TEST(UnitPlan, ShardedModelUnitsAreThePlan) {
  struct Case {
    int world;
    int64_t alignment;
    std::vector<std::string> wrap_types;
    int64_t wrap_min_parameters;
  };
  const std::vector<Case> cases = {{1, 16, {"Block"}, 0},
                                   {2, 16, {"Block"}, 0},
                                   {3, 5, {"Block", "Linear"}, 0},
                                   {4, 1, {}, 600}};
  for (const Case& c : cases) {
    comm::run_local_ranks(c.world, [&](comm::Communicator& comm) {
      CpuAllocator allocator(nullptr);
      models::Gpt planned_model(uneven_config());
      const std::vector<UnitPlan> plan =
          plan_units(planned_model, c.wrap_types, c.wrap_min_parameters);
      models::Gpt model(uneven_config());
      ShardingConfig config;
      config.wrap_types = c.wrap_types;
      config.wrap_min_parameters = c.wrap_min_parameters;
      config.alignment = c.alignment;
      ShardedModel sharded(model, comm, allocator, config);
      const std::vector<ShardedModel::UnitInfo> units = sharded.units();
      ASSERT_EQ(units.size(), plan.size());
      for (size_t i = 0; i < plan.size(); ++i) {
        EXPECT_EQ(units[i].name, plan[i].name);
        EXPECT_EQ(units[i].numel, plan[i].numel);
        EXPECT_EQ(units[i].num_parameters, plan[i].parameters.size());
        EXPECT_EQ(units[i].padded_numel, padded_numel(plan[i].numel, c.world, c.alignment));
        EXPECT_EQ(units[i].shard_numel, shard_numel(plan[i].numel, c.world, c.alignment));
      }
    });
  }
}

}  // namespace
}  // namespace zs::sharding
