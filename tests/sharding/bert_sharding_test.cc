// The BERT-style classifier under ShardedModel on the local backend: the default wrap policy
// makes each encoder block a unit and the root takes the rest; ZeRO stages 0–3 at equal world
// size give bitwise-identical parameters, losses and accuracy counts after a few AdamW steps;
// world sizes 2 and 4 agree with one rank within fp32 tolerance; activation checkpointing
// changes no bit.
//
// The training loop of tests/sharding/sharding_test_util.h is written for the GPT's
// (ids, targets) batch, so this file has its own for (ids, lengths, labels): the same fixed
// global batch every step, each rank taking its contiguous part, losses all-gathered and summed
// in rank order, and the accuracy counts all-reduced.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "comm/local/local_backend.h"
#include "models/bert.h"
#include "optim/adamw.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/rng.h"
#include "sharding/sharded_model.h"
#include "tests/sharding/sharding_test_util.h"

namespace zs::sharding {
namespace {

models::BertConfig uneven_config() {
  models::BertConfig config;
  config.vocab_size = 19;  // odd sizes: units do not divide evenly among ranks
  config.context = 9;
  config.width = 12;
  config.n_head = 3;
  config.n_layer = 2;
  config.num_classes = 3;
  return config;
}

constexpr int64_t kGlobalBatch = 8;
constexpr int64_t kSeq = 9;

// Example b of the fixed global batch: [CLS] = 1, tokens 2..18 up to a length in [1, kSeq],
// padding with id 0 after it; the label depends on the tokens so that there is something to fit.
void fill_example(int64_t b, int32_t* ids, int32_t* length, int32_t* label) {
  const int32_t len = 1 + static_cast<int32_t>(random_bits(rng_key(5, "len"), b) % kSeq);
  int32_t sum = 0;
  for (int64_t t = 0; t < kSeq; ++t) {
    int32_t id = 0;
    if (t == 0) {
      id = 1;
    } else if (t < len) {
      id = 2 + static_cast<int32_t>(random_bits(rng_key(5, "tok"), b * kSeq + t) % 17);
      sum += id;
    }
    ids[t] = id;
  }
  *length = len;
  *label = sum % 3;
}

struct BertRun {
  std::vector<std::string> unit_names;
  std::vector<std::vector<float>> params;  // every unit's full fp32 master (all-gathered)
  std::vector<float> losses;               // per step, mean over ranks (summed in rank order)
  int64_t correct = 0;                     // after training, over the global batch
};

BertRun train_bert(int world, int stage, int steps, ShardingConfig config = {}) {
  config.stage = stage;
  config.seed = 3;
  std::vector<std::optional<BertRun>> by_rank(static_cast<size_t>(world));
  comm::run_local_ranks(world, [&](comm::Communicator& comm) {
    BertRun result;
    MemoryTracker tracker;
    CpuAllocator allocator(&tracker);
    models::BertClassifier model(uneven_config());
    ShardedModel sharded(model, comm, allocator, config);
    for (const auto& unit : sharded.units()) result.unit_names.push_back(unit.name);
    optim::AdamWOptions adam;
    adam.weight_decay = 0.1f;
    optim::AdamW optimizer(sharded.local_shards(), adam);
    const int64_t local_batch = kGlobalBatch / world;
    Tensor ids = Tensor::empty({local_batch, kSeq}, DType::kI32, allocator, "ids");
    Tensor lengths = Tensor::empty({local_batch}, DType::kI32, allocator, "lengths");
    Tensor labels = Tensor::empty({local_batch}, DType::kI32, allocator, "labels");
    for (int64_t b = 0; b < local_batch; ++b) {
      fill_example(comm.rank() * local_batch + b, ids.data<int32_t>() + b * kSeq,
                   lengths.data<int32_t>() + b, labels.data<int32_t>() + b);
    }
    Tensor local_losses =
        Tensor::empty({std::max(steps, 1)}, DType::kF32, allocator, "local_losses");
    for (int step = 0; step < steps; ++step) {
      Tensor loss = model.loss(ids, lengths, labels);
      local_losses.data<float>()[step] = loss.item();
      backward(loss);
      sharded.finish_backward();
      optimizer.step(1e-2f);
      sharded.after_step();
    }
    {
      NoGradScope no_grad;  // distributed accuracy: each rank scores its part, counts summed
      Tensor correct = Tensor::empty({1}, DType::kI32, allocator, "correct");
      correct.data<int32_t>()[0] =
          static_cast<int32_t>(models::count_correct(model.logits(ids, lengths), labels));
      comm.all_reduce(correct, comm::ReduceOp::kSum)->wait();
      result.correct = correct.data<int32_t>()[0];
    }
    for (const ShardView& shard : sharded.local_shards()) {
      const int64_t n = shard.master.numel();
      const int64_t full = stage == 0 ? n : n * world;
      Tensor gathered = Tensor::empty({full}, DType::kF32, allocator, "gathered");
      if (stage == 0) {
        gathered.copy_from(shard.master.to_vector());
      } else {
        comm.all_gather(shard.master, gathered)->wait();
      }
      result.params.push_back(gathered.to_vector());
    }
    Tensor all_losses =
        Tensor::empty({local_losses.numel() * world}, DType::kF32, allocator, "all_losses");
    comm.all_gather(local_losses, all_losses)->wait();
    const float* values = all_losses.data<float>();
    result.losses.assign(static_cast<size_t>(steps), 0.0f);
    for (int step = 0; step < steps; ++step) {
      for (int r = 0; r < world; ++r) {
        result.losses[step] += values[r * local_losses.numel() + step] / static_cast<float>(world);
      }
    }
    by_rank[static_cast<size_t>(comm.rank())] = std::move(result);
  });
  return std::move(*by_rank[0]);
}

TEST(BertSharding, BlocksAreUnitsAndTheRootTakesTheRest) {
  comm::run_local_ranks(2, [&](comm::Communicator& comm) {
    CpuAllocator allocator(nullptr);
    models::BertClassifier model(uneven_config());
    ShardingConfig config;  // the default wrap policy
    config.stage = 3;
    ShardedModel sharded(model, comm, allocator, config);
    const auto units = sharded.units();
    ASSERT_EQ(units.size(), 3u);
    int64_t block_params = 0, total = 0;
    for (const auto& unit : units) {
      total += unit.numel;
      if (unit.name == "blocks.0" || unit.name == "blocks.1") {
        EXPECT_EQ(unit.num_parameters, 12u) << unit.name;
        block_params += unit.numel;
      } else {
        EXPECT_EQ(unit.name, "<root>");
        // tok_emb, pos_emb, ln_f (2), pooler (2), head (2).
        EXPECT_EQ(unit.num_parameters, 8u);
      }
    }
    EXPECT_EQ(total, model.num_parameters());
    EXPECT_EQ(block_params, model.blocks().num_parameters());
  });
}

TEST(BertSharding, StagesAreBitwiseIdenticalAtEqualWorldSize) {
  const BertRun reference = train_bert(2, 0, 5);
  ASSERT_EQ(reference.params.size(), 3u);
  for (int stage : {1, 2, 3}) {
    const BertRun run = train_bert(2, stage, 5);
    EXPECT_EQ(run.unit_names, reference.unit_names);
    ASSERT_EQ(run.params.size(), reference.params.size());
    for (size_t u = 0; u < run.params.size(); ++u) {
      EXPECT_EQ(run.params[u], reference.params[u])
          << "stage " << stage << " unit " << run.unit_names[u];
    }
    EXPECT_EQ(run.losses, reference.losses) << "stage " << stage;
    EXPECT_EQ(run.correct, reference.correct) << "stage " << stage;
  }
  EXPECT_LT(reference.losses.back(), reference.losses.front());
}

TEST(BertSharding, WorldSizesAgreeWithOneRank) {
  const BertRun single = train_bert(1, 3, 4);
  for (int world : {2, 4}) {
    const BertRun run = train_bert(world, 3, 4);
    ASSERT_EQ(run.losses.size(), single.losses.size());
    for (size_t s = 0; s < single.losses.size(); ++s) {
      EXPECT_NEAR(run.losses[s], single.losses[s], 2e-5 * std::abs(single.losses[s]))
          << "world " << world << " step " << s;
    }
    EXPECT_LT(max_difference(run, single), 2e-5) << "world " << world;
    EXPECT_EQ(run.correct, single.correct) << "world " << world;
  }
}

// The model's own ops (the [CLS] row selection and tanh) run in the compute dtype too.
TEST(BertSharding, Bf16ComputeTrainsCloseToFp32) {
  const BertRun reference = train_bert(2, 3, 5);
  ShardingConfig bf16;
  bf16.param_dtype = DType::kBF16;
  bf16.reduce_dtype = DType::kBF16;
  const BertRun run = train_bert(2, 3, 5, bf16);
  for (size_t s = 0; s < reference.losses.size(); ++s) {
    EXPECT_NEAR(run.losses[s], reference.losses[s], 2e-2 * reference.losses[s]) << "step " << s;
  }
  EXPECT_LT(run.losses.back(), run.losses.front());
}

// Checkpointed blocks are recomputed in backward with the padding lengths the model left
// installed (models/layers.h PaddingState): the same bits as without checkpointing.
TEST(BertSharding, ActivationCheckpointingIsBitwiseIdentical) {
  for (int stage : {0, 3}) {
    const BertRun reference = train_bert(2, stage, 4);
    ShardingConfig checkpointed;
    checkpointed.checkpoint_every = 1;
    const BertRun run = train_bert(2, stage, 4, checkpointed);
    EXPECT_EQ(run.losses, reference.losses) << "stage " << stage;
    EXPECT_EQ(run.params, reference.params) << "stage " << stage;
    EXPECT_EQ(run.correct, reference.correct) << "stage " << stage;
  }
}

TEST(BertSharding, FitsTheFixedBatchUnderZero3) {
  const BertRun run = train_bert(2, 3, 60);
  EXPECT_LT(run.losses.back(), 0.2f * run.losses.front());
  EXPECT_EQ(run.correct, kGlobalBatch);
}

}  // namespace
}  // namespace zs::sharding
