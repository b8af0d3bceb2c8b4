// GPT-2 weights through the sharded model: a Hugging Face-layout file loaded with
// ShardedModel::load_full_parameters at ZeRO-3 on 2 ranks (threads, the local backend) gives the
// loss of the unsharded model it came from, and visit_full_parameters into an exporter on rank 0
// writes the same bytes as exporting the unsharded model.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <optional>

#include "checkpoint/gpt2_weights.h"
#include "checkpoint_test_util.h"
#include "comm/local/local_backend.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "sharding/sharded_model.h"
#include "tests/support/fixed_batch.h"

namespace zs::checkpoint {
namespace {

using testing::read_bytes;
using testing::ScratchDir;
using testing::tiny_gpt_config;
using zs::testing::fixed_batch_loss;

TEST(ShardedGpt2Weights, Zero3LoadAndExportMatchTheUnshardedModel) {
  ScratchDir scratch;
  const models::GptConfig config = tiny_gpt_config();
  CpuAllocator allocator(nullptr);
  models::Gpt reference(config);
  models::materialize(reference, allocator, 1);
  const float reference_loss = fixed_batch_loss(reference, allocator, config.context);
  const std::string input = scratch.path("reference.safetensors");
  Gpt2WeightExporter(input, config).save(reference);

  const std::string output = scratch.path("sharded.safetensors");
  std::mutex mutex;
  std::vector<float> losses;
  comm::run_local_ranks(2, [&](comm::Communicator& comm) {
    CpuAllocator rank_allocator(nullptr);
    models::Gpt model(config);
    sharding::ShardingConfig sharding;
    sharding.stage = 3;
    sharding.seed = 9;  // not the reference's init: the load must replace every value
    sharding::ShardedModel sharded(model, comm, rank_allocator, sharding);
    const Gpt2WeightSource source(input, config);  // every rank reads the file it needs
    sharded.load_full_parameters([&](const std::string& name, const Shape& shape, float* dst) {
      source.fill(name, shape, dst);
    });
    const float loss = fixed_batch_loss(model, rank_allocator, config.context);
    {
      std::lock_guard<std::mutex> lock(mutex);
      losses.push_back(loss);
    }
    std::optional<Gpt2WeightExporter> exporter;
    if (comm.rank() == 0) exporter.emplace(output, config);
    sharded.visit_full_parameters(
        [&](const std::string& name, const Shape& shape, const float* data) {
          if (exporter) exporter->add(name, shape, data);
        });
    if (exporter) exporter->commit();
  });
  ASSERT_EQ(losses.size(), 2u);
  for (float loss : losses) EXPECT_EQ(loss, reference_loss);
  EXPECT_EQ(read_bytes(output), read_bytes(input));
}

}  // namespace
}  // namespace zs::checkpoint
