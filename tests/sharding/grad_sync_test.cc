// GradSync::kPerStep (sharding/stage_policy.h): stages 0/1 sum a step's micro-batch gradients
// locally and reduce the sum once. What holds: stages 0 and 1 give the same parameters and
// losses bit for bit with each other (fp32, bf16, bf16 with fp32 reduction, fp16 with loss
// scaling; 2 and 3 ranks), runs repeat bit for bit, one micro-batch per step gives
// kPerMicroBatch's bits, and with accumulation the result is kPerMicroBatch's within fp32
// rounding (the sum and the rank average are taken in the other order); stage 0's naive DdpSync
// variants give its bits. A step's traffic does not depend on the micro-batches per step.
// Misuse is an InvalidArgument naming the fix.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/local/local_backend.h"
#include "models/gpt.h"
#include "runtime/autograd.h"
#include "runtime/error.h"
#include "sharding/sharded_model.h"
#include "tests/sharding/sharding_test_util.h"
#include "tests/support/error_text.h"

namespace zs::sharding {
namespace {

ShardingConfig with(GradSync sync, DType param_dtype = DType::kF32,
                    DType reduce_dtype = DType::kF32) {
  ShardingConfig config;
  config.grad_sync = sync;
  config.param_dtype = param_dtype;
  config.reduce_dtype = reduce_dtype;
  return config;
}

TEST(GradSync, PerStepKeepsStagesZeroAndOneBitwiseIdentical) {
  struct Dtypes {
    DType param, reduce;
  };
  for (Dtypes d : {Dtypes{DType::kF32, DType::kF32}, Dtypes{DType::kBF16, DType::kBF16},
                   Dtypes{DType::kBF16, DType::kF32}, Dtypes{DType::kF16, DType::kF32}}) {
    for (int world : {2, 3}) {
      RunOptions run;
      run.world = world;
      run.steps = 4;
      run.micro_batches = world == 2 ? 3 : 2;  // the global batch of 12 divides
      run.loss_scaling = d.param == DType::kF16;
      run.stage = 0;
      const ShardingConfig config = with(GradSync::kPerStep, d.param, d.reduce);
      const RunResult stage0 = train(run, config);
      const std::string what = std::string(dtype_name(d.param)) + "/" + dtype_name(d.reduce) +
                               " world " + std::to_string(world);
      EXPECT_EQ(train(run, config).params, stage0.params) << "a rerun, " << what;
      run.stage = 1;
      const RunResult stage1 = train(run, config);
      EXPECT_EQ(stage1.params, stage0.params) << what;
      EXPECT_EQ(stage1.losses, stage0.losses) << what;
      EXPECT_EQ(stage1.skipped, stage0.skipped) << what;
    }
  }
}

// Stage 0's naive syncs reduce the same local sum element-wise in rank order: the same bits.
TEST(GradSync, PerStepGivesTheSameBitsWithEachDdpSync) {
  RunOptions run;
  run.stage = 0;
  run.steps = 3;
  run.micro_batches = 3;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    ShardingConfig config = with(GradSync::kPerStep, dtype, dtype);
    const RunResult bucketed = train(run, config);
    for (DdpSync sync : {DdpSync::kPerTensor, DdpSync::kGatherScatter}) {
      config.ddp_sync = sync;
      EXPECT_EQ(train(run, config).params, bucketed.params)
          << ddp_sync_name(sync) << " " << dtype_name(dtype);
    }
  }
}

TEST(GradSync, OneMicroBatchPerStepRunsAsPerMicroBatch) {
  for (int stage : {0, 1}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      RunOptions run;
      run.stage = stage;
      run.steps = 3;
      const RunResult per_step = train(run, with(GradSync::kPerStep, dtype, dtype));
      const RunResult per_micro = train(run, with(GradSync::kPerMicroBatch, dtype, dtype));
      EXPECT_EQ(per_step.params, per_micro.params) << "stage " << stage << dtype_name(dtype);
      EXPECT_EQ(per_step.losses, per_micro.losses) << "stage " << stage << dtype_name(dtype);
    }
  }
}

TEST(GradSync, PerStepAgreesWithPerMicroBatchWithinRounding) {
  RunOptions run;
  run.micro_batches = 3;
  for (int stage : {0, 1}) {
    run.stage = stage;
    const RunResult per_step = train(run, with(GradSync::kPerStep));
    const RunResult per_micro = train(run, with(GradSync::kPerMicroBatch));
    // The same gradients summed in another order: fp32 rounding, grown over 6 Adam steps.
    EXPECT_LT(max_difference(per_step, per_micro), 5e-5) << "stage " << stage;
    EXPECT_GT(max_difference(per_step, per_micro), 0.0)
        << "stage " << stage << ": the orders were expected to round differently here";
  }
}

// Bytes this rank sends in one step of `micro_batches` micro-batches (the second step: the
// first one's stats are reset after it).
uint64_t step_bytes_sent(comm::Communicator& comm, int stage, GradSync sync, int micro_batches) {
  CpuAllocator allocator(nullptr);
  models::Gpt model(uneven_config());
  ShardingConfig config = with(sync);
  config.stage = stage;
  ShardedModel sharded(model, comm, allocator, config);
  Tensor ids = Tensor::zeros({2, kSeq}, DType::kI32, allocator, "ids");
  auto step = [&] {
    for (int micro = 0; micro < micro_batches; ++micro) {
      sharded.defer_sync(micro + 1 < micro_batches);
      backward(model.loss(ids, ids), 1.0f / static_cast<float>(micro_batches));
      sharded.finish_backward();
    }
    sharded.after_step();
  };
  step();
  comm.barrier()->wait();
  comm.stats().reset();
  step();
  comm.barrier()->wait();  // the step's collectives are recorded; the barrier moves nothing
  return comm.stats().total().bytes_sent;
}

TEST(GradSync, PerStepTrafficDoesNotGrowWithMicroBatches) {
  for (int world : {2, 3}) {
    for (int stage : {0, 1}) {
      comm::run_local_ranks(world, [&](comm::Communicator& comm) {
        const uint64_t one = step_bytes_sent(comm, stage, GradSync::kPerStep, 1);
        const uint64_t eight = step_bytes_sent(comm, stage, GradSync::kPerStep, 8);
        const uint64_t per_micro_one = step_bytes_sent(comm, stage, GradSync::kPerMicroBatch, 1);
        const uint64_t per_micro_eight = step_bytes_sent(comm, stage, GradSync::kPerMicroBatch, 8);
        const std::string what = "world " + std::to_string(world) + " stage " +
                                 std::to_string(stage) + " rank " + std::to_string(comm.rank());
        EXPECT_GT(one, 0u) << what;
        EXPECT_EQ(eight, one) << what;
        EXPECT_EQ(per_micro_one, one) << what;
        // Per micro-batch, the reductions repeat: 8× at stage 0, 8× the reduce-scatter plus the
        // one all-gather at stage 1.
        EXPECT_GT(per_micro_eight, 4 * one) << what;
      });
    }
  }
}

TEST(GradSync, MisuseIsAClearError) {
  comm::run_local_ranks(2, [&](comm::Communicator& comm) {
    CpuAllocator allocator(nullptr);
    for (int stage : {2, 3}) {
      models::Gpt model(uneven_config());
      ShardingConfig config = with(GradSync::kPerStep);
      config.stage = stage;
      const std::string message = zs::testing::invalid_argument_message(
          [&] { ShardedModel sharded(model, comm, allocator, config); });
      EXPECT_NE(message.find("per_micro_batch"), std::string::npos) << message;
      EXPECT_NE(message.find("stage " + std::to_string(stage)), std::string::npos) << message;
    }
    models::Gpt model(uneven_config());
    ShardingConfig config = with(GradSync::kPerStep);
    config.stage = 1;
    ShardedModel sharded(model, comm, allocator, config);
    Tensor ids = Tensor::zeros({2, kSeq}, DType::kI32, allocator, "ids");
    // A second micro-batch after the one that reduced the step (no defer_sync(true) before the
    // first): nothing would reduce it.
    backward(model.loss(ids, ids));
    sharded.finish_backward();
    std::string message = zs::testing::invalid_argument_message([&] { model.loss(ids, ids); });
    EXPECT_NE(message.find("defer_sync(true)"), std::string::npos) << message;
    sharded.after_step();
    // The last micro-batch deferred: its gradients are never reduced, so neither reading them
    // nor after_step() may follow.
    sharded.defer_sync(true);
    backward(model.loss(ids, ids));
    sharded.finish_backward();
    message = zs::testing::invalid_argument_message(
        [&] { sharded.local_shards()[0].gate->check(GradientUse::kRead, "clipping"); });
    EXPECT_NE(message.find("defer_sync(false)"), std::string::npos) << message;
    message = zs::testing::invalid_argument_message([&] { sharded.after_step(); });
    EXPECT_NE(message.find("defer_sync(false)"), std::string::npos) << message;
    // Not between a backward and its finish_backward().
    sharded.defer_sync(false);
    backward(model.loss(ids, ids));
    message = zs::testing::invalid_argument_message([&] { sharded.defer_sync(true); });
    EXPECT_NE(message.find("before the micro-batch's forward"), std::string::npos) << message;
    sharded.finish_backward();
    sharded.after_step();
  });
}

}  // namespace
}  // namespace zs::sharding
