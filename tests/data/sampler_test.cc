// Distributed samplers: the epoch order is a permutation fixed by (seed, epoch); the ranks' parts
// of a step are disjoint and their union in rank order is the W = 1 batch for W = 1, 2, 4;
// targets are the inputs shifted by one; classification rows are padded with lengths and labels.
#include "data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "data_test_util.h"
#include "runtime/error.h"

namespace zs::data {
namespace {

using testing::error_message;
using testing::ScratchDir;

// Token i of the file is (7 i + 3) mod 65521: distinct over any window, and cheap to predict.
uint32_t token_at(uint64_t i) { return static_cast<uint32_t>((7 * i + 3) % 65521); }

TokenDataset make_dataset(const std::string& path, size_t num_tokens) {
  std::vector<uint32_t> tokens(num_tokens);
  for (size_t i = 0; i < num_tokens; ++i) tokens[i] = token_at(i);
  write_token_file(path, tokens, TokenWriteOptions{{}, 2, 65521});
  return TokenDataset(path, 65521);
}

SamplerOptions options(int64_t global_batch, int rank, int world_size, uint64_t seed = 1234) {
  SamplerOptions o;
  o.global_batch = global_batch;
  o.rank = rank;
  o.world_size = world_size;
  o.seed = seed;
  return o;
}

std::vector<int32_t> values(const Tensor& tensor) {
  const int32_t* data = tensor.data<int32_t>();
  return std::vector<int32_t>(data, data + tensor.numel());
}

TEST(EpochPermutation, IsAPermutationFixedBySeedAndEpoch) {
  const std::vector<int64_t> order = epoch_permutation(1000, 7, "s", 0);
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(epoch_permutation(1000, 7, "s", 0), order);  // same seed + epoch: identical
  EXPECT_NE(epoch_permutation(1000, 7, "s", 1), order);  // another epoch
  EXPECT_NE(epoch_permutation(1000, 8, "s", 0), order);  // another seed
  EXPECT_NE(epoch_permutation(1000, 7, "t", 0), order);  // another stream
  EXPECT_TRUE(epoch_permutation(0, 7, "s", 0).empty());
}

TEST(LmWindowSampler, TargetsAreInputsShiftedByOne) {
  ScratchDir scratch;
  const TokenDataset dataset = make_dataset(scratch.path("lm.bin"), 1001);
  CpuAllocator allocator(nullptr);
  const int64_t T = 16;
  LmWindowSampler sampler(dataset, T, options(8, 0, 1));
  EXPECT_EQ(sampler.num_windows(), 1000 / T);  // floor((N - 1) / T) = 62
  EXPECT_EQ(sampler.steps_per_epoch(), 62 / 8);
  Batch batch = sampler.make_batch(allocator);
  EXPECT_EQ(batch.ids.shape(), (Shape{8, T}));
  EXPECT_EQ(batch.targets.shape(), (Shape{8, T}));
  EXPECT_FALSE(batch.lengths.defined());
  const BatchPosition position{2, 3};
  sampler.fill(position, batch);
  EXPECT_EQ(batch.position, position);
  const std::vector<int64_t> windows = sampler.order().rank_items(position);
  const std::vector<int32_t> ids = values(batch.ids), targets = values(batch.targets);
  for (int64_t b = 0; b < 8; ++b) {
    const uint64_t start = static_cast<uint64_t>(windows[b] * T);
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(ids[b * T + t], static_cast<int32_t>(token_at(start + t)));
      EXPECT_EQ(targets[b * T + t], static_cast<int32_t>(token_at(start + t + 1)));
      if (t + 1 < T) {
        EXPECT_EQ(targets[b * T + t], ids[b * T + t + 1]);
      }
    }
  }
}

TEST(LmWindowSampler, LastWindowReachesTheLastToken) {
  ScratchDir scratch;
  // N - 1 = 4 T: four windows, the last ending exactly at token N - 1.
  const TokenDataset dataset = make_dataset(scratch.path("edge.bin"), 4 * 5 + 1);
  CpuAllocator allocator(nullptr);
  SamplerOptions o = options(4, 0, 1);
  o.shuffle = false;
  LmWindowSampler sampler(dataset, 5, o);
  ASSERT_EQ(sampler.num_windows(), 4);
  Batch batch = sampler.make_batch(allocator);
  sampler.fill({0, 0}, batch);
  EXPECT_EQ(values(batch.targets).back(), static_cast<int32_t>(token_at(20)));
  EXPECT_EQ(values(batch.ids)[5], static_cast<int32_t>(token_at(5)));  // in dataset order
}

TEST(LmWindowSampler, RankPartsAreDisjointAndTheirUnionIsTheOneRankBatch) {
  ScratchDir scratch;
  const TokenDataset dataset = make_dataset(scratch.path("ws.bin"), 20000);
  CpuAllocator allocator(nullptr);
  const int64_t T = 32, B = 8;
  LmWindowSampler reference(dataset, T, options(B, 0, 1));
  Batch whole = reference.make_batch(allocator);
  const int64_t steps = reference.steps_per_epoch();  // floor(624 / 8) = 78
  ASSERT_EQ(steps, 78);
  for (int world : {1, 2, 4}) {
    std::vector<std::unique_ptr<LmWindowSampler>> ranks;
    std::vector<Batch> parts;
    for (int r = 0; r < world; ++r) {
      ranks.push_back(std::make_unique<LmWindowSampler>(dataset, T, options(B, r, world)));
      parts.push_back(ranks.back()->make_batch(allocator));
      EXPECT_EQ(parts.back().ids.shape(), (Shape{B / world, T}));
    }
    for (const BatchPosition position :
         {BatchPosition{0, 0}, BatchPosition{0, 1}, BatchPosition{0, steps - 1},
          BatchPosition{1, 0}, BatchPosition{5, 40}}) {
      reference.fill(position, whole);
      std::vector<int32_t> ids, targets;
      std::set<int64_t> windows;
      for (int r = 0; r < world; ++r) {
        ranks[r]->fill(position, parts[r]);
        const std::vector<int32_t> part_ids = values(parts[r].ids);
        const std::vector<int32_t> part_targets = values(parts[r].targets);
        ids.insert(ids.end(), part_ids.begin(), part_ids.end());
        targets.insert(targets.end(), part_targets.begin(), part_targets.end());
        for (int64_t w : ranks[r]->order().rank_items(position)) {
          EXPECT_TRUE(windows.insert(w).second) << "window " << w << " on two ranks";
        }
      }
      EXPECT_EQ(ids, values(whole.ids))
          << "world " << world << " epoch " << position.epoch << " step " << position.step;
      EXPECT_EQ(targets, values(whole.targets));
      EXPECT_EQ(windows.size(), static_cast<size_t>(B));
    }
  }
}

TEST(LmWindowSampler, AnEpochVisitsDistinctWindowsAndEpochsDiffer) {
  ScratchDir scratch;
  const TokenDataset dataset = make_dataset(scratch.path("epoch.bin"), 5000);
  const int64_t T = 10, B = 12;
  LmWindowSampler sampler(dataset, T, options(B, 0, 1));
  LmWindowSampler same(dataset, T, options(B, 0, 1));
  LmWindowSampler other_seed(dataset, T, options(B, 0, 1, 99));
  std::vector<int64_t> epoch0, epoch1;
  std::set<int64_t> seen;
  for (int64_t step = 0; step < sampler.steps_per_epoch(); ++step) {
    for (int64_t w : sampler.order().global_items({0, step})) {
      EXPECT_TRUE(seen.insert(w).second) << "window " << w << " twice in one epoch";
      epoch0.push_back(w);
    }
    const std::vector<int64_t> next = sampler.order().global_items({1, step});
    epoch1.insert(epoch1.end(), next.begin(), next.end());
    EXPECT_EQ(same.order().global_items({0, step}), sampler.order().global_items({0, step}));
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(sampler.steps_per_epoch() * B));
  EXPECT_NE(epoch0, epoch1);
  EXPECT_NE(other_seed.order().global_items({0, 0}), sampler.order().global_items({0, 0}));
}

TEST(LmWindowSampler, PositionsAdvanceAcrossEpochs) {
  ScratchDir scratch;
  const TokenDataset dataset = make_dataset(scratch.path("next.bin"), 101);
  LmWindowSampler sampler(dataset, 10, options(4, 0, 1));  // 10 windows: 2 steps per epoch
  EXPECT_EQ(sampler.next({0, 0}), (BatchPosition{0, 1}));
  EXPECT_EQ(sampler.next({0, 1}), (BatchPosition{1, 0}));
  EXPECT_THROW(sampler.next({0, 2}), InvalidArgument);
  EXPECT_THROW(sampler.order().global_items({-1, 0}), InvalidArgument);
  EXPECT_THROW(sampler.order().global_items({int64_t{1} << 32, 0}), InvalidArgument);
}

TEST(LmWindowSampler, BadConfigurationsSayWhatToDo) {
  ScratchDir scratch;
  const TokenDataset dataset = make_dataset(scratch.path("bad.bin"), 101);
  EXPECT_CONTAINS(
      error_message<InvalidArgument>([&] { LmWindowSampler s(dataset, 10, options(6, 0, 4)); }),
      "global_batch 6 is not a multiple of the world size 4");
  EXPECT_CONTAINS(
      error_message<InvalidArgument>([&] { LmWindowSampler s(dataset, 10, options(16, 0, 1)); }),
      "the dataset has 10 items, fewer than one global batch of 16");
  EXPECT_CONTAINS(
      error_message<InvalidArgument>([&] { LmWindowSampler s(dataset, 101, options(1, 0, 1)); }),
      "holds 101 tokens, fewer than one window of seq_len + 1 = 102");
  EXPECT_THROW(LmWindowSampler(dataset, 10, options(4, 4, 4)), InvalidArgument);
  CpuAllocator allocator(nullptr);
  LmWindowSampler sampler(dataset, 10, options(4, 0, 2));
  Batch wrong;
  wrong.ids = Tensor::empty({4, 10}, DType::kI32, allocator);
  wrong.targets = Tensor::empty({4, 10}, DType::kI32, allocator);
  EXPECT_CONTAINS(error_message<InvalidArgument>([&] {
                    sampler.fill({0, 0}, wrong);
                  }),
                  "expected int32 [2, 10]");
}

ClassificationDataset make_examples(size_t count) {
  ClassificationDataset data;
  data.label_names = {"even", "odd"};
  for (size_t i = 0; i < count; ++i) {
    data.texts.push_back("example " + std::to_string(i) + std::string(i % 13, '!'));
    data.labels.push_back(static_cast<int32_t>(i % 2));
  }
  return data;
}

TEST(ClassificationSampler, RowsArePaddedTextWithLengthsAndLabels) {
  const ClassificationDataset data = make_examples(40);
  CpuAllocator allocator(nullptr);
  const int64_t T = 12;
  ClassificationSampler sampler(data, T, options(4, 0, 1), /*pad_id=*/-1);
  Batch batch = sampler.make_batch(allocator);
  EXPECT_EQ(batch.ids.shape(), (Shape{4, T}));
  EXPECT_EQ(batch.targets.shape(), (Shape{4}));
  EXPECT_EQ(batch.lengths.shape(), (Shape{4}));
  sampler.fill({3, 5}, batch);
  const std::vector<int64_t> examples = sampler.order().rank_items({3, 5});
  const std::vector<int32_t> ids = values(batch.ids), labels = values(batch.targets),
                             lengths = values(batch.lengths);
  for (int64_t b = 0; b < 4; ++b) {
    const std::string& text = data.texts[examples[b]];
    const int64_t length = std::min<int64_t>(static_cast<int64_t>(text.size()), T);
    EXPECT_EQ(lengths[b], length);
    EXPECT_EQ(labels[b], data.labels[examples[b]]);
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(ids[b * T + t], t < length ? static_cast<uint8_t>(text[t]) : -1);
    }
  }
}

TEST(ClassificationSampler, RankPartsAreDisjointAndTheirUnionIsTheOneRankBatch) {
  const ClassificationDataset data = make_examples(103);
  CpuAllocator allocator(nullptr);
  const int64_t T = 16, B = 8;
  ClassificationSampler reference(data, T, options(B, 0, 1));
  Batch whole = reference.make_batch(allocator);
  EXPECT_EQ(reference.steps_per_epoch(), 12);  // 103 / 8, the last partial batch dropped
  for (int world : {1, 2, 4}) {
    for (const BatchPosition position :
         {BatchPosition{0, 0}, BatchPosition{0, 11}, BatchPosition{2, 7}}) {
      reference.fill(position, whole);
      std::vector<int32_t> ids, labels, lengths;
      std::set<int64_t> examples;
      for (int r = 0; r < world; ++r) {
        ClassificationSampler sampler(data, T, options(B, r, world));
        Batch part = sampler.make_batch(allocator);
        sampler.fill(position, part);
        for (auto [out, tensor] : {std::pair{&ids, &part.ids}, std::pair{&labels, &part.targets},
                                   std::pair{&lengths, &part.lengths}}) {
          const std::vector<int32_t> v = values(*tensor);
          out->insert(out->end(), v.begin(), v.end());
        }
        for (int64_t e : sampler.order().rank_items(position)) {
          EXPECT_TRUE(examples.insert(e).second) << "example " << e << " on two ranks";
        }
      }
      EXPECT_EQ(ids, values(whole.ids)) << "world " << world;
      EXPECT_EQ(labels, values(whole.targets));
      EXPECT_EQ(lengths, values(whole.lengths));
      EXPECT_EQ(examples.size(), static_cast<size_t>(B));
    }
  }
}

}  // namespace
}  // namespace zs::data
