// Stage 3's two queues, the unit order check and hybrid's early all-reduce across groups
// (sharding/sharded_model.h, "Two queues", "Unit order check", "Hybrid overlap"): a stage-3
// backward completes its all-gathers while every gradient reduction is held in the backend (on
// one queue it could not: its gathers would wait behind them), the split changes no bits and no
// traffic, ranks that recorded different unit orders all fail with an error naming the first
// difference instead of pairing different units' all-gathers, and hybrid's all-reduce of a
// unit's shard across the groups starts during backward, with the same bits whenever it runs.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/local/local_backend.h"
#include "models/layers.h"
#include "ops/elementwise.h"
#include "runtime/autograd.h"
#include "tests/sharding/sharding_test_util.h"

namespace zs::sharding {
namespace {

using std::chrono::milliseconds;

// Holds gradient reductions (reduce_scatter, all_reduce) of one rank while holding() is on: they
// wait in the backend, on their communicator's thread, until release() — or until kGiveUp, so
// that a schedule that needs a held reduction to finish ends the test instead of hanging it
// (gave_up() counts those).
class ReductionHold {
 public:
  static constexpr milliseconds kGiveUp{5000};

  void hold() {
    std::lock_guard<std::mutex> lock(mutex_);
    holding_ = true;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      holding_ = false;
    }
    released_.notify_all();
  }
  // Called by the backend before a reduction.
  void wait_if_held() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!holding_) return;
    ++waiting_;
    waiting_changed_.notify_all();
    if (!released_.wait_for(lock, kGiveUp, [this] { return !holding_; })) ++gave_up_;
    --waiting_;
  }
  // Waits until a reduction is held (at most kGiveUp); returns how many are.
  int wait_for_a_held_reduction() {
    std::unique_lock<std::mutex> lock(mutex_);
    waiting_changed_.wait_for(lock, kGiveUp, [this] { return waiting_ > 0; });
    return waiting_;
  }
  int gave_up() {
    std::lock_guard<std::mutex> lock(mutex_);
    return gave_up_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable released_;
  std::condition_variable waiting_changed_;
  bool holding_ = false;
  int waiting_ = 0;
  int gave_up_ = 0;
};

// Forwards to the local backend; reductions first pass the rank's hold. split() returns the
// sub-backend unwrapped (as comm/fault_backend.h does): a duplicate's collectives are not held.
class HoldingBackend final : public comm::Backend {
 public:
  HoldingBackend(std::unique_ptr<comm::Backend> target, ReductionHold& hold)
      : target_(std::move(target)), hold_(hold) {}
  int rank() const override { return target_->rank(); }
  int size() const override { return target_->size(); }
  const char* name() const override { return target_->name(); }
  uint64_t bytes_copied() const override { return target_->bytes_copied(); }
  void all_reduce(void* data, size_t count, DType dtype, comm::ReduceOp op,
                  const comm::Call& call) override {
    hold_.wait_if_held();
    target_->all_reduce(data, count, dtype, op, call);
  }
  void all_gather(const void* shard, void* full, size_t count, DType dtype,
                  const comm::Call& call) override {
    target_->all_gather(shard, full, count, dtype, call);
  }
  void reduce_scatter(const void* full, void* shard, size_t count, DType dtype, comm::ReduceOp op,
                      const comm::Call& call) override {
    hold_.wait_if_held();
    target_->reduce_scatter(full, shard, count, dtype, op, call);
  }
  void broadcast(void* data, size_t count, DType dtype, int root, const comm::Call& call) override {
    target_->broadcast(data, count, dtype, root, call);
  }
  void gather(const void* in, void* out, size_t count, DType dtype, int root,
              const comm::Call& call) override {
    target_->gather(in, out, count, dtype, root, call);
  }
  void scatter(const void* in, void* out, size_t count, DType dtype, int root,
               const comm::Call& call) override {
    target_->scatter(in, out, count, dtype, root, call);
  }
  void barrier(const comm::Call& call) override { target_->barrier(call); }
  void send(const void* data, size_t count, DType dtype, int peer,
            const comm::Call& call) override {
    target_->send(data, count, dtype, peer, call);
  }
  void recv(void* data, size_t count, DType dtype, int peer, const comm::Call& call) override {
    target_->recv(data, count, dtype, peer, call);
  }
  std::unique_ptr<comm::Backend> split(int color, int key, const comm::Call& call) override {
    return target_->split(color, key, call);
  }
  void abort(const std::string& reason) override { target_->abort(reason); }

 private:
  std::unique_ptr<comm::Backend> target_;
  ReductionHold& hold_;
};

struct HeldStep {
  bool separate_queue = false;
  int held_after_backward = 0;  // reductions still held when the backward had returned
  int gave_up = 0;              // reductions that stopped waiting (the backward needed them)
  uint64_t gathers_in_backward = 0;
};

// Two steps of stage 3 on 2 ranks; the second one's reductions are held from its forward until
// its backward has returned.
std::vector<HeldStep> step_with_held_reductions(bool separate_gather_queue) {
  constexpr int kWorld = 2;
  std::vector<ReductionHold> holds(kWorld);
  std::vector<HeldStep> results(kWorld);
  comm::LocalRunOptions options;
  options.wrap_backend = [&](std::unique_ptr<comm::Backend> backend, int rank) {
    return std::make_unique<HoldingBackend>(std::move(backend), holds[static_cast<size_t>(rank)]);
  };
  comm::run_local_ranks(
      kWorld,
      [&](comm::Communicator& comm) {
        ReductionHold& hold = holds[static_cast<size_t>(comm.rank())];
        HeldStep& result = results[static_cast<size_t>(comm.rank())];
        CpuAllocator allocator(nullptr);
        models::GptConfig gpt = uneven_config();
        gpt.n_layer = 4;
        models::Gpt model(gpt);
        ShardingConfig config;
        config.stage = 3;
        config.separate_gather_queue = separate_gather_queue;
        config.max_reductions_in_flight = 0;  // its host wait would block on the held reductions
        ShardedModel sharded(model, comm, allocator, config);
        result.separate_queue = &sharded.gather_group() != &comm;
        Tensor ids = Tensor::zeros({2, kSeq}, DType::kI32, allocator, "ids");
        // Step 1 records the order (and the ranks check it); step 2 prefetches along it.
        backward(model.loss(ids, ids));
        sharded.finish_backward();
        sharded.after_step();
        hold.hold();
        Tensor loss = model.loss(ids, ids);
        const uint64_t gathers_before = sharded.gather_group().calls_issued();
        backward(loss);
        result.gathers_in_backward = sharded.gather_group().calls_issued() - gathers_before;
        result.held_after_backward = hold.wait_for_a_held_reduction();
        hold.release();
        sharded.finish_backward();
        sharded.after_step();
        result.gave_up = hold.gave_up();
      },
      options);
  return results;
}

TEST(Overlap, StageThreeGathersCompleteWhileTheReductionsAreHeld) {
  for (const HeldStep& rank : step_with_held_reductions(/*separate_gather_queue=*/true)) {
    EXPECT_TRUE(rank.separate_queue);
    // The backward gathered every unit it released in forward (4 blocks; the root stays
    // gathered from the forward), and all of that completed while no reduction could.
    EXPECT_GE(rank.gathers_in_backward, 4u);
    EXPECT_GE(rank.held_after_backward, 1);
    EXPECT_EQ(rank.gave_up, 0) << "a reduction had to finish before the backward could";
  }
}

// Training results and traffic with and without the second queue: the same bits, the same
// bytes (the duplicate's traffic is counted in the shard group's stats).
TEST(Overlap, TheGatherQueueChangesNoBitsAndNoTraffic) {
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    ShardingConfig config;
    config.param_dtype = config.reduce_dtype = dtype;
    RunOptions run;
    run.world = 3;
    run.stage = 3;
    run.steps = 3;
    run.micro_batches = 2;
    RunResult results[2];
    for (const bool separate : {false, true}) {
      config.separate_gather_queue = separate;
      run.prepare = [&](ShardedModel& sharded, comm::Communicator& comm) {
        EXPECT_EQ(&sharded.gather_group() != &comm, separate);
      };
      results[separate] = train(run, config);
    }
    EXPECT_EQ(results[0].params, results[1].params) << dtype_name(dtype);
    EXPECT_EQ(results[0].losses, results[1].losses) << dtype_name(dtype);
  }
  comm::run_local_ranks(2, [&](comm::Communicator& comm) {
    uint64_t sent[2] = {0, 0};
    for (const bool separate : {false, true}) {
      CpuAllocator allocator(nullptr);
      models::Gpt model(uneven_config());
      ShardingConfig config;
      config.separate_gather_queue = separate;
      ShardedModel sharded(model, comm, allocator, config);
      Tensor ids = Tensor::zeros({2, kSeq}, DType::kI32, allocator, "ids");
      comm.stats().reset();
      for (int step = 0; step < 2; ++step) {
        backward(model.loss(ids, ids));
        sharded.finish_backward();
        sharded.after_step();
      }
      sent[separate] = comm.stats().total().bytes_sent;
      EXPECT_GT(comm.stats().get(comm::CollectiveKind::kAllGather).calls, 0u);
    }
    EXPECT_EQ(sent[0], sent[1]);
  });
}

// Runs two Linear layers, in the order a, b — or b, a where `swapped` (one rank's control flow
// differs from the others').
class Ordered : public models::Module {
 public:
  explicit Ordered(bool swapped)
      : Module("Ordered"),
        swapped_(swapped),
        a_(emplace<models::Linear>("a", 8, 8)),
        b_(emplace<models::Linear>("b", 8, 8)) {}

 protected:
  Tensor forward(const Tensor& x) override { return swapped_ ? a_(b_(x)) : b_(a_(x)); }

 private:
  bool swapped_;
  models::Linear& a_;
  models::Linear& b_;
};

// Stage 3 over Linear units (optionally hybrid), and the input the Linear models get.
ShardingConfig linear_units(int hybrid_group = 0) {
  ShardingConfig config;
  config.stage = 3;
  config.hybrid_group = hybrid_group;
  config.wrap_types = {"Linear"};
  return config;
}

Tensor halves(Allocator& allocator) {
  Tensor x = Tensor::empty({3, 8}, DType::kF32, allocator, "x");
  x.fill(0.5f);
  return x;
}

TEST(Overlap, RanksThatRecordedDifferentOrdersFailNamingTheFirstDifference) {
  constexpr int kWorld = 3;
  std::vector<std::string> errors(kWorld);
  comm::run_local_ranks(kWorld, [&](comm::Communicator& comm) {
    CpuAllocator allocator(nullptr);
    Ordered model(/*swapped=*/comm.rank() == 2);
    ShardedModel sharded(model, comm, allocator, linear_units());
    const Tensor x = halves(allocator);
    // a and b have the same size, so the first step's on-demand gathers pair them silently; the
    // check at its finish_backward is what notices.
    backward(ops::mean(model(x)));
    try {
      sharded.finish_backward();
    } catch (const InvalidArgument& e) {
      errors[static_cast<size_t>(comm.rank())] = e.what();
    }
  });
  for (int r = 0; r < kWorld; ++r) {
    const std::string& error = errors[static_cast<size_t>(r)];
    // The forward recorded <root>, a, b on ranks 0 and 1 and <root>, b, a on rank 2.
    EXPECT_NE(error.find("recorded different unit orders"), std::string::npos)
        << r << ": " << error;
    EXPECT_NE(error.find("position 1 of the forward pass, where rank 0 ran unit 'a' and rank 2 "
                         "ran unit 'b' (ranks differing from rank 0 there: 2)"),
              std::string::npos)
        << r << ": " << error;
  }
}

// Forward passes only (inference): the forward order is checked at the second forward, before
// it would prefetch along it.
TEST(Overlap, ForwardOnlyRanksCheckTheForwardOrderAtTheSecondForward) {
  constexpr int kWorld = 2;
  std::vector<std::string> errors(kWorld);
  comm::run_local_ranks(kWorld, [&](comm::Communicator& comm) {
    CpuAllocator allocator(nullptr);
    Ordered model(/*swapped=*/comm.rank() == 1);
    ShardedModel sharded(model, comm, allocator, linear_units());
    const Tensor x = halves(allocator);
    NoGradScope no_grad;
    (void)model(x);
    try {
      (void)model(x);
    } catch (const InvalidArgument& e) {
      errors[static_cast<size_t>(comm.rank())] = e.what();
    }
  });
  for (int r = 0; r < kWorld; ++r) {
    const std::string& error = errors[static_cast<size_t>(r)];
    EXPECT_NE(error.find("position 1 of the forward pass, where rank 0 ran unit 'a' and rank 1 "
                         "ran unit 'b'"),
              std::string::npos)
        << r << ": " << error;
  }
}

TEST(Overlap, RanksThatRecordedTheSameOrderPrefetchAfterTheCheck) {
  comm::run_local_ranks(2, [&](comm::Communicator& comm) {
    CpuAllocator allocator(nullptr);
    Ordered model(/*swapped=*/false);
    ShardedModel sharded(model, comm, allocator, linear_units());
    const Tensor x = halves(allocator);
    const uint64_t before = sharded.gather_group().calls_issued();
    comm.stats().reset();
    for (int step = 0; step < 2; ++step) {
      backward(ops::mean(model(x)));
      sharded.finish_backward();
      sharded.after_step();
    }
    // Per step the forward gathers <root> (no parameters here, an empty gather), a, b and the
    // backward <root>, b, a — on demand in step 1, prefetched in step 2: the same calls. The
    // check adds one all-gather over the world, once (the orders agree: no second one); the
    // gather group's traffic is counted in the world's stats.
    EXPECT_EQ(sharded.gather_group().calls_issued() - before, 2 * 6u);
    EXPECT_EQ(comm.stats().get(comm::CollectiveKind::kAllGather).calls, 2 * 6 + 1u);
    EXPECT_TRUE(sharded.prefetching());
  });
}

// Hybrid (groups of 2 of a world of 4): when the all-reduce across the groups runs — early, as
// soon as the reduce-scatter completed, or late, behind a rate limit, without prefetch or on one
// queue — changes no bit of the training.
TEST(Overlap, HybridAllReduceAcrossGroupsGivesTheSameBitsWheneverItRuns) {
  RunOptions run;
  run.world = 4;
  run.stage = 3;
  run.steps = 3;
  run.micro_batches = 2;
  run.global_batch = 16;
  ShardingConfig early;
  early.hybrid_group = 2;
  early.max_reductions_in_flight = 0;
  ShardingConfig late = early;
  late.max_reductions_in_flight = 1;
  late.prefetch = false;
  late.separate_gather_queue = false;
  ShardingConfig bf16 = early;
  bf16.param_dtype = bf16.reduce_dtype = DType::kBF16;
  ShardingConfig bf16_late = late;
  bf16_late.param_dtype = bf16_late.reduce_dtype = DType::kBF16;
  const RunResult a = train(run, early), b = train(run, late);
  EXPECT_EQ(a.params, b.params);
  EXPECT_EQ(a.losses, b.losses);
  const RunResult c = train(run, bf16), d = train(run, bf16_late);
  EXPECT_EQ(c.params, d.params);
  EXPECT_EQ(c.losses, d.losses);
}

// Two Linear units with a pause between them in backward: after b's "begin" boundary launched
// its reduce-scatter, the pause gives it time to complete before a's boundaries run.
class Paused : public models::Module {
 public:
  Paused()
      : Module("Paused"),
        a_(emplace<models::Linear>("a", 8, 8)),
        b_(emplace<models::Linear>("b", 8, 8)) {}

 protected:
  Tensor forward(const Tensor& x) override {
    Tensor h = a_(x);
    record_boundary("pause", [](BackwardContext&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    });
    return b_(h);
  }

 private:
  models::Linear& a_;
  models::Linear& b_;
};

TEST(Overlap, HybridAllReduceAcrossGroupsStartsDuringBackward) {
  std::vector<uint64_t> in_backward(4 * 2, 0);
  comm::run_local_ranks(4, [&](comm::Communicator& comm) {
    CpuAllocator allocator(nullptr);
    Paused model;
    ShardedModel sharded(model, comm, allocator, linear_units(/*hybrid_group=*/2));
    ASSERT_NE(sharded.replica_group(), nullptr);
    const Tensor x = halves(allocator);
    for (int step = 0; step < 2; ++step) {
      Tensor loss = ops::mean(model(x));
      const uint64_t before = sharded.replica_group()->calls_issued();
      backward(loss);
      in_backward[static_cast<size_t>(comm.rank() * 2 + step)] =
          sharded.replica_group()->calls_issued() - before;
      sharded.finish_backward();
      sharded.after_step();
    }
  });
  for (int r = 0; r < 4; ++r) {
    // Step 1, before the ranks agreed on the backward order: all of them in finish_backward.
    EXPECT_EQ(in_backward[static_cast<size_t>(r * 2)], 0u) << "rank " << r;
    // Step 2: b's during the pause, before a's backward (a's and the root's may follow).
    EXPECT_GE(in_backward[static_cast<size_t>(r * 2 + 1)], 1u) << "rank " << r;
  }
}

}  // namespace
}  // namespace zs::sharding
