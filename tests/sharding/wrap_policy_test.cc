// Wrap policies: by module type, by parameter count, and the root for the rest; every
// parameter lands in exactly one unit, and units follow the forward order.
#include <gtest/gtest.h>

#include "comm/local/local_backend.h"
#include "models/gpt.h"
#include "sharding/sharded_model.h"

namespace zs::sharding {
namespace {

models::GptConfig config_with(int64_t layers) {
  models::GptConfig config;
  config.vocab_size = 31;
  config.context = 8;
  config.width = 16;
  config.n_head = 2;
  config.n_layer = layers;
  return config;
}

std::vector<std::string> unit_names(ShardingConfig config, int64_t layers,
                                    int64_t* total = nullptr) {
  std::vector<std::string> names;
  comm::run_local_ranks(1, [&](comm::Communicator& comm) {
    CpuAllocator allocator(nullptr);
    models::Gpt model(config_with(layers));
    ShardedModel sharded(model, comm, allocator, config);
    int64_t sum = 0;
    for (const auto& unit : sharded.units()) {
      names.push_back(unit.name);
      sum += unit.numel;
    }
    EXPECT_EQ(sum, model.num_parameters());  // each parameter in exactly one unit
    if (total) *total = sum;
  });
  return names;
}

TEST(WrapPolicy, ByTypeBySizeAndTheRoot) {
  ShardingConfig by_type;
  EXPECT_EQ(unit_names(by_type, 3),
            (std::vector<std::string>{"<root>", "blocks.0", "blocks.1", "blocks.2"}));
  // C = 16. Per block: attention 4C² + 4C = 1088 (qkv 816, proj 272), MLP 8C² + 5C = 2128
  // (fc 1088, proj 1040), two layernorms 64. Inner modules claim first.
  ShardingConfig by_size;
  by_size.wrap_types = {};
  by_size.wrap_min_parameters = 2000;
  // Each MLP (2128) qualifies; a block's remaining 1152 does not, but the two blocks' remainders
  // together (2304) make the "blocks" container a unit.
  EXPECT_EQ(unit_names(by_size, 2),
            (std::vector<std::string>{"<root>", "blocks", "blocks.0.mlp", "blocks.1.mlp"}));
  by_size.wrap_min_parameters = 1000;
  // mlp.fc (1088) and mlp.proj (1040) qualify first, leaving the MLP nothing; attention (1088)
  // qualifies; the block's remaining 64 does not.
  EXPECT_EQ(unit_names(by_size, 1),
            (std::vector<std::string>{"<root>", "blocks.0.attn", "blocks.0.mlp.fc",
                                      "blocks.0.mlp.proj"}));
  ShardingConfig none;
  none.wrap_types = {};
  EXPECT_EQ(unit_names(none, 2), (std::vector<std::string>{"<root>"}));
}

}  // namespace
}  // namespace zs::sharding
