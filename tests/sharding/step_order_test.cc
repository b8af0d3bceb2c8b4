// The step order backward → finish_backward → (clip) → optimizer step → after_step is enforced:
// StepOrder's transitions on their own, then each out-of-order call on a ShardedModel with AdamW
// and clipping (every stage), which must throw InvalidArgument naming the missed call and change
// no master; and the orders that are legitimate (gradient accumulation, a skipped step, a
// forward without grad mode) still run.
#include "sharding/step_order.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/local/local_backend.h"
#include "models/gpt.h"
#include "optim/adamw.h"
#include "runtime/autograd.h"
#include "runtime/error.h"
#include "sharding/sharded_model.h"
#include "tests/sharding/sharding_test_util.h"
#include "train/shard_views.h"

namespace zs::sharding {
namespace {

using Phase = StepOrder::Phase;

// The message of the InvalidArgument `call` throws ("no error" if none).
template <typename Call>
std::string error_of(Call&& call) {
  try {
    call();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

bool mentions(const std::string& message, const std::string& text) {
  return message.find(text) != std::string::npos;
}

TEST(StepOrder, FollowsTheStepAndRejectsEachCallOutOfIt) {
  StepOrder order;
  EXPECT_EQ(order.phase(), Phase::kIdle);
  // Nothing to read, step on, finish or close before a backward.
  EXPECT_TRUE(mentions(error_of([&] { order.check(GradientUse::kRead, "clip"); }), "backward"));
  EXPECT_TRUE(mentions(error_of([&] { order.check(GradientUse::kStep, "AdamW"); }), "AdamW"));
  EXPECT_TRUE(mentions(error_of([&] { order.finish_backward(); }), "run backward(loss) first"));
  EXPECT_TRUE(mentions(error_of([&] { order.after_step(); }), "finish_backward()"));
  order.forward(true);
  order.backward();
  EXPECT_EQ(order.phase(), Phase::kBackward);
  // Before finish_backward: no second backward, no grad-mode forward, no reading or stepping,
  // no after_step. A forward without grad mode (evaluation) is fine.
  for (const std::string& message :
       {error_of([&] { order.backward(); }), error_of([&] { order.forward(true); }),
        error_of([&] { order.check(GradientUse::kRead, "clip"); }),
        error_of([&] { order.check(GradientUse::kStep, "AdamW"); }),
        error_of([&] { order.after_step(); })}) {
    EXPECT_TRUE(mentions(message, "before ShardedModel::finish_backward()")) << message;
  }
  order.forward(false);
  EXPECT_EQ(order.phase(), Phase::kBackward);
  order.finish_backward();
  EXPECT_EQ(order.phase(), Phase::kFinished);
  EXPECT_TRUE(mentions(error_of([&] { order.finish_backward(); }), "the last finish_backward()"));
  // Gradient accumulation: another micro-batch.
  order.forward(true);
  order.backward();
  order.finish_backward();
  order.check(GradientUse::kRead, "clip");
  order.check(GradientUse::kStep, "AdamW");
  order.stepped();
  EXPECT_EQ(order.phase(), Phase::kStepped);
  order.check(GradientUse::kRead, "grad norm");  // the gradients are still the step's
  // After the step, before after_step: no second step, no forward (even without grad mode), no
  // backward, no finish_backward.
  for (const std::string& message :
       {error_of([&] { order.check(GradientUse::kStep, "AdamW"); }),
        error_of([&] { order.forward(false); }), error_of([&] { order.backward(); }),
        error_of([&] { order.finish_backward(); })}) {
    EXPECT_TRUE(mentions(message, "ShardedModel::after_step()")) << message;
  }
  order.after_step();
  EXPECT_EQ(order.phase(), Phase::kIdle);
  // A skipped step (e.g. a loss-scale overflow): finish_backward, then after_step directly.
  order.backward();
  order.finish_backward();
  order.after_step();
  EXPECT_EQ(order.phase(), Phase::kIdle);
}

// One rank of a small GPT under `stage`, with AdamW over its local shards. A step that failed
// part-way leaves gradient reductions in flight on the communicator thread, holding tensors of
// `allocator`: the destructor flushes them before the allocator goes (as zs-train's rank does),
// else the next Step's allocator, built at the same address, would be what frees them (TSan
// reported it as a race between the two).
struct Step {
  Step(comm::Communicator& comm, int stage)
      : comm(comm),
        allocator(nullptr),
        model(testing::uneven_config()),
        sharded(model, comm, allocator, config_for(stage)),
        optimizer(sharded.local_shards(), optim::AdamWOptions{}),
        ids(Tensor::zeros({2, testing::kSeq}, DType::kI32, allocator, "ids")) {}
  ~Step() { comm.flush(); }
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;
  static ShardingConfig config_for(int stage) {
    ShardingConfig config;
    config.stage = stage;
    return config;
  }
  void forward_backward() { backward(model.loss(ids, ids)); }
  std::vector<std::vector<float>> masters() const {
    std::vector<std::vector<float>> out;
    for (const ShardView& view : sharded.local_shards()) out.push_back(view.master.to_vector());
    return out;
  }

  comm::Communicator& comm;
  CpuAllocator allocator;
  models::Gpt model;
  ShardedModel sharded;
  optim::AdamW optimizer;
  Tensor ids;
};

TEST(StepOrder, ShardedModelRejectsEachOutOfOrderCallNamingTheMissedOne) {
  comm::run_local_ranks(2, [&](comm::Communicator& comm) {
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE("stage " + std::to_string(stage));
      {  // optimizer step and clipping without finish_backward: nothing changes
        Step s(comm, stage);
        s.forward_backward();
        const auto before = s.masters();
        EXPECT_TRUE(mentions(error_of([&] { s.optimizer.step(1e-2f); }),
                             "before ShardedModel::finish_backward()"));
        EXPECT_TRUE(mentions(
            error_of([&] { train::clip_gradients(s.sharded, s.sharded.local_shards(), 1.0f); }),
            "before ShardedModel::finish_backward()"));
        EXPECT_EQ(s.masters(), before);
        EXPECT_EQ(s.optimizer.steps(), 0);
        EXPECT_TRUE(mentions(error_of([&] { s.sharded.after_step(); }), "finish_backward()"));
      }
      {  // a second backward, or the next micro-batch's forward, before finish_backward
        Step s(comm, stage);
        s.forward_backward();
        EXPECT_TRUE(mentions(error_of([&] { s.forward_backward(); }),
                             "before ShardedModel::finish_backward()"));
      }
      {  // finish_backward twice for one backward, or with no backward at all
        Step s(comm, stage);
        EXPECT_TRUE(mentions(error_of([&] { s.sharded.finish_backward(); }), "without a backward"));
        s.forward_backward();
        s.sharded.finish_backward();
        EXPECT_TRUE(mentions(error_of([&] { s.sharded.finish_backward(); }), "without a backward"));
      }
      {  // after the optimizer step, before after_step: no second step, forward or backward
        Step s(comm, stage);
        s.forward_backward();
        s.sharded.finish_backward();
        s.optimizer.step(1e-2f);
        const auto stepped = s.masters();
        EXPECT_TRUE(
            mentions(error_of([&] { s.optimizer.step(1e-2f); }), "ShardedModel::after_step()"));
        EXPECT_EQ(s.masters(), stepped);
        EXPECT_EQ(s.optimizer.steps(), 1);
        EXPECT_TRUE(
            mentions(error_of([&] { s.forward_backward(); }), "ShardedModel::after_step()"));
        s.sharded.after_step();
        EXPECT_TRUE(mentions(error_of([&] { s.sharded.after_step(); }), "finish_backward()"));
        EXPECT_TRUE(mentions(error_of([&] { s.optimizer.step(1e-2f); }), "no gradients"));
      }
    }
  });
}

TEST(StepOrder, ShardedModelRunsTheLegitimateOrders) {
  comm::run_local_ranks(2, [&](comm::Communicator& comm) {
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE("stage " + std::to_string(stage));
      Step s(comm, stage);
      for (int step = 0; step < 2; ++step) {
        // Gradient accumulation: two micro-batches, each backward + finish_backward.
        for (int micro = 0; micro < 2; ++micro) {
          s.forward_backward();
          s.sharded.finish_backward();
        }
        train::clip_gradients(s.sharded, s.sharded.local_shards(), 1.0f);
        s.optimizer.step(1e-2f);
        s.sharded.after_step();
      }
      // A skipped step, with an evaluation forward between backward and finish_backward.
      s.forward_backward();
      {
        NoGradScope no_grad;
        (void)s.model.loss(s.ids, s.ids);
      }
      s.sharded.finish_backward();
      s.sharded.after_step();
      EXPECT_EQ(s.optimizer.steps(), 2);
    }
  });
}

}  // namespace
}  // namespace zs::sharding
