// The prefetching loader: exactly the sampler's batches in order (across epochs, from any start),
// both buffers leased at once, an error injected into the producer rethrown on the consumer
// (never lost, never a hang), and clean shutdown whatever the loader thread is doing.
#include "data/loader.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "data_test_util.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace zs::data {
namespace {

using testing::error_message;
using testing::ScratchDir;

TokenDataset make_dataset(const std::string& path, size_t num_tokens) {
  std::vector<uint32_t> tokens(num_tokens);
  for (size_t i = 0; i < num_tokens; ++i) tokens[i] = static_cast<uint32_t>((i * 31 + 7) % 50000);
  write_token_file(path, tokens, TokenWriteOptions{{}, 0, 50000});
  return TokenDataset(path, 50000);
}

SamplerOptions options(int64_t global_batch, int rank, int world_size) {
  SamplerOptions o;
  o.global_batch = global_batch;
  o.rank = rank;
  o.world_size = world_size;
  o.seed = 42;
  return o;
}

std::vector<int32_t> values(const Tensor& tensor) {
  const int32_t* data = tensor.data<int32_t>();
  return std::vector<int32_t>(data, data + tensor.numel());
}

// Wraps a sampler: fails the fill of the batch at `fail_at` (if set) and can slow every fill,
// like a storage error or a slow disk under the loader thread.
class FaultySampler : public BatchSampler {
 public:
  explicit FaultySampler(const BatchSampler& inner) : inner_(inner) {}
  const EpochOrder& order() const override { return inner_.order(); }
  Batch make_batch(Allocator& allocator) const override { return inner_.make_batch(allocator); }
  void fill(const BatchPosition& position, Batch& batch) const override {
    ++fills;
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    if (fail && position == fail_at) {
      ZS_THROW(IoError, "injected read error at epoch ", position.epoch, " step ", position.step);
    }
    inner_.fill(position, batch);
  }

  bool fail = false;
  BatchPosition fail_at;
  std::chrono::milliseconds delay{0};
  mutable std::atomic<int> fills{0};

 private:
  const BatchSampler& inner_;
};

TEST(BatchLoader, DeliversExactlyTheSamplersBatchesInOrder) {
  ScratchDir scratch;
  const TokenDataset dataset = make_dataset(scratch.path("order.bin"), 3001);
  CpuAllocator allocator(nullptr);
  LmWindowSampler sampler(dataset, 30, options(8, 1, 2));  // 100 windows: 12 steps per epoch
  ASSERT_EQ(sampler.steps_per_epoch(), 12);
  LoaderOptions loader_options;
  loader_options.start = {1, 9};  // resume mid-epoch; run into epochs 2 and 3
  loader_options.num_batches = 20;
  BatchLoader loader(sampler, allocator, loader_options);
  Batch expected = sampler.make_batch(allocator);
  BatchPosition position = loader_options.start;
  for (int i = 0; i < 20; ++i) {
    ASSERT_FALSE(loader.exhausted());
    BatchLease lease = loader.next();
    sampler.fill(position, expected);
    EXPECT_EQ(lease->position, position) << "batch " << i;
    EXPECT_EQ(values(lease->ids), values(expected.ids)) << "batch " << i;
    EXPECT_EQ(values(lease->targets), values(expected.targets)) << "batch " << i;
    position = sampler.next(position);
  }
  EXPECT_EQ(position, (BatchPosition{3, 5}));
  EXPECT_TRUE(loader.exhausted());
  EXPECT_EQ(loader.delivered(), 20);
  EXPECT_CONTAINS(error_message<InvalidArgument>([&] { loader.next(); }),
                  "delivered all 20 batches");
}

TEST(BatchLoader, BothBuffersCanBeHeldButNotMore) {
  ScratchDir scratch;
  const TokenDataset dataset = make_dataset(scratch.path("hold.bin"), 2001);
  CpuAllocator allocator(nullptr);
  LmWindowSampler sampler(dataset, 20, options(4, 0, 1));
  BatchLoader loader(sampler, allocator);
  BatchLease first = loader.next();
  BatchLease second = loader.next();
  EXPECT_EQ(first->position, (BatchPosition{0, 0}));
  EXPECT_EQ(second->position, (BatchPosition{0, 1}));
  EXPECT_NE(first->ids.raw_data(), second->ids.raw_data());  // two distinct buffers
  // A third would wait forever for a buffer the consumer holds: an error instead.
  EXPECT_CONTAINS(error_message<InvalidArgument>([&] { loader.next(); }),
                  "release a BatchLease before asking for the next batch");
  const void* first_buffer = first->ids.raw_data();
  first.release();
  EXPECT_FALSE(first.valid());
  EXPECT_THROW(first.batch(), InvalidArgument);
  BatchLease third = loader.next();
  EXPECT_EQ(third->position, (BatchPosition{0, 2}));
  EXPECT_EQ(third->ids.raw_data(), first_buffer);  // refilled the buffer handed back
}

TEST(BatchLoader, ProducerErrorIsRethrownOnTheConsumerInOrder) {
  ScratchDir scratch;
  const TokenDataset dataset = make_dataset(scratch.path("fault.bin"), 2001);
  CpuAllocator allocator(nullptr);
  LmWindowSampler sampler(dataset, 20, options(4, 0, 1));  // 100 windows: 25 steps per epoch
  FaultySampler faulty(sampler);
  faulty.fail = true;
  faulty.fail_at = {0, 3};
  RankScope rank(3);  // the loader thread reports under its creator's rank
  BatchLoader loader(faulty, allocator);
  for (int64_t step = 0; step < 3; ++step) {
    BatchLease lease = loader.next();  // the batches before the failure still arrive
    EXPECT_EQ(lease->position, (BatchPosition{0, step}));
  }
  const std::string message = error_message<IoError>([&] { loader.next(); });
  EXPECT_CONTAINS(message, "injected read error at epoch 0 step 3");
  EXPECT_CONTAINS(message, "[rank 3]");
  // Sticky: the stream has a hole, so every later call reports it again.
  EXPECT_CONTAINS(error_message<IoError>([&] { loader.next(); }), "injected read error");
  EXPECT_EQ(faulty.fills.load(), 4);  // the thread stopped at the failed fill
}

TEST(BatchLoader, ErrorOnTheFirstBatchWhileTheConsumerWaits) {
  ScratchDir scratch;
  const TokenDataset dataset = make_dataset(scratch.path("first.bin"), 2001);
  CpuAllocator allocator(nullptr);
  LmWindowSampler sampler(dataset, 20, options(4, 0, 1));
  FaultySampler faulty(sampler);
  faulty.fail = true;
  faulty.fail_at = {0, 0};
  faulty.delay = std::chrono::milliseconds(50);  // the consumer is already waiting
  BatchLoader loader(faulty, allocator);
  EXPECT_THROW(loader.next(), IoError);
}

TEST(BatchLoader, ShutsDownCleanlyInAnyState) {
  ScratchDir scratch;
  const TokenDataset dataset = make_dataset(scratch.path("shutdown.bin"), 2001);
  CpuAllocator allocator(nullptr);
  LmWindowSampler sampler(dataset, 20, options(4, 0, 1));
  FaultySampler slow(sampler);
  { BatchLoader loader(sampler, allocator); }  // never consumed
  {
    BatchLoader loader(sampler, allocator);
    BatchLease lease = loader.next();
    lease.release();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // thread idle: both buffers full
  }
  {
    slow.delay = std::chrono::milliseconds(30);
    BatchLoader loader(slow, allocator);  // destroyed mid-fill
  }
  {
    LoaderOptions finite;
    finite.num_batches = 1;  // the thread ends by itself after one batch
    BatchLoader loader(sampler, allocator, finite);
    EXPECT_EQ(loader.next()->position, (BatchPosition{0, 0}));
    EXPECT_TRUE(loader.exhausted());
  }
}

TEST(BatchLoader, ConsumerAndProducerOverlap) {
  ScratchDir scratch;
  // With a fill and a step of 20 ms each, 10 batches take ~10 x 20 ms when they overlap and
  // ~10 x 40 ms when they do not; only the order is asserted (timings are not tests).
  const TokenDataset dataset = make_dataset(scratch.path("overlap.bin"), 2001);
  CpuAllocator allocator(nullptr);
  LmWindowSampler sampler(dataset, 20, options(4, 0, 1));
  FaultySampler slow(sampler);
  slow.delay = std::chrono::milliseconds(20);
  LoaderOptions ten;
  ten.num_batches = 10;
  BatchLoader loader(slow, allocator, ten);
  BatchPosition position;
  while (!loader.exhausted()) {
    BatchLease lease = loader.next();
    EXPECT_EQ(lease->position, position);
    position = sampler.next(position);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the "training step"
  }
  EXPECT_EQ(slow.fills.load(), 10);
}

TEST(BatchLoader, InvalidStartIsRejectedUpFront) {
  ScratchDir scratch;
  const TokenDataset dataset = make_dataset(scratch.path("start.bin"), 2001);
  CpuAllocator allocator(nullptr);
  LmWindowSampler sampler(dataset, 20, options(4, 0, 1));
  LoaderOptions bad;
  bad.start = {0, 25};
  EXPECT_THROW(BatchLoader(sampler, allocator, bad), InvalidArgument);
}

}  // namespace
}  // namespace zs::data
