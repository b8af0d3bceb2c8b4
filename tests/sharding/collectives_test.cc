// The collective-strategy seam (sharding/collectives.h), proven by strategies written only in
// this test: a ParamGather that records every gather around the chosen one sees each unit's
// all-gathers with their bytes and changes no bit; a ParamGather that gathers another way (an
// all-reduce of zero-padded shards) put in its place trains to the same bits.
#include "sharding/collectives.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tests/sharding/sharding_test_util.h"

namespace zs::sharding {
namespace {

using testing::RunOptions;
using testing::RunResult;
using testing::train;

// Every gather it is asked for, with the bytes of the full buffer, then the chosen gather's.
class RecordingGather final : public ParamGather {
 public:
  struct Call {
    std::string unit;
    size_t full_bytes;
    size_t shard_bytes;
  };
  explicit RecordingGather(std::unique_ptr<ParamGather> chosen, std::vector<Call>& calls)
      : chosen_(std::move(chosen)), calls_(calls) {}
  comm::Communicator& group() override { return chosen_->group(); }
  comm::WorkPtr all_gather(const Tensor& shard, const Tensor& full,
                           const std::string& unit) override {
    calls_.push_back({unit, full.nbytes(), shard.nbytes()});
    return chosen_->all_gather(shard, full, unit);
  }

 private:
  std::unique_ptr<ParamGather> chosen_;
  std::vector<Call>& calls_;  // this rank's
};

// Another way to gather: every rank writes its shard into a zeroed full buffer and the group
// sums the buffers (x + 0 is x, so the bits are the all-gather's). It keeps the chosen gather,
// which owns the gather queue, for its communicator only.
class AllReduceGather final : public ParamGather {
 public:
  AllReduceGather(std::unique_ptr<ParamGather> chosen, std::atomic<int>& calls)
      : chosen_(std::move(chosen)), calls_(calls) {}
  comm::Communicator& group() override { return chosen_->group(); }
  comm::WorkPtr all_gather(const Tensor& shard, const Tensor& full,
                           const std::string& unit) override {
    const std::vector<float> values = shard.to_vector();  // before the fill: shard may be the slot
    full.fill(0.0f);
    group().rank_slice(full).copy_from(values);
    ++calls_;
    return group().all_reduce(full, comm::ReduceOp::kSum, {{}, unit});
  }

 private:
  std::unique_ptr<ParamGather> chosen_;
  std::atomic<int>& calls_;  // every rank's
};

RunOptions stage3_run() {
  RunOptions run;
  run.world = 3;
  run.stage = 3;
  run.steps = 3;
  run.micro_batches = 2;
  return run;
}

TEST(ParamGatherSeam, ARecordingGatherSeesEveryUnitsGathersAndChangesNoBits) {
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    ShardingConfig config;
    config.param_dtype = config.reduce_dtype = dtype;
    RunOptions run = stage3_run();
    const RunResult chosen = train(run, config);

    std::mutex mutex;
    std::vector<std::vector<RecordingGather::Call>> calls(static_cast<size_t>(run.world));
    std::vector<std::vector<ShardedModel::UnitInfo>> units(static_cast<size_t>(run.world));
    run.overrides.gather = [&](std::unique_ptr<ParamGather> gather) {
      std::lock_guard<std::mutex> lock(mutex);
      const size_t rank = static_cast<size_t>(gather->group().rank());
      return std::make_unique<RecordingGather>(std::move(gather), calls[rank]);
    };
    run.prepare = [&](ShardedModel& sharded, comm::Communicator& comm) {
      units[static_cast<size_t>(comm.rank())] = sharded.units();
    };
    const RunResult recorded = train(run, config);
    EXPECT_EQ(recorded.params, chosen.params) << dtype_name(dtype);
    EXPECT_EQ(recorded.losses, chosen.losses) << dtype_name(dtype);

    for (size_t r = 0; r < calls.size(); ++r) {
      // Per unit released after use: gathered in every forward and every backward (2 micro-
      // batches a step), each time its padded bytes from a shard of 1/world of them.
      std::map<std::string, int> gathers;
      for (const RecordingGather::Call& call : calls[r]) {
        ++gathers[call.unit];
        EXPECT_EQ(call.shard_bytes * static_cast<size_t>(run.world), call.full_bytes) << call.unit;
      }
      int released = 0;
      for (const ShardedModel::UnitInfo& unit : units[r]) {
        if (unit.stays_gathered) continue;
        ++released;
        EXPECT_EQ(gathers[unit.name], 2 * run.steps * run.micro_batches) << unit.name;
        for (const RecordingGather::Call& call : calls[r]) {
          if (call.unit == unit.name) {
            EXPECT_EQ(call.full_bytes, static_cast<size_t>(unit.padded_numel) * dtype_size(dtype));
          }
        }
      }
      EXPECT_GT(released, 0) << "rank " << r;
    }
  }
}

TEST(ParamGatherSeam, AnotherGatherInThePlaceOfTheChosenOneTrainsToTheSameBits) {
  ShardingConfig config;
  RunOptions run = stage3_run();
  const RunResult chosen = train(run, config);
  std::atomic<int> calls{0};
  run.overrides.gather = [&](std::unique_ptr<ParamGather> gather) {
    return std::make_unique<AllReduceGather>(std::move(gather), calls);
  };
  const RunResult other = train(run, config);
  EXPECT_EQ(other.params, chosen.params);
  EXPECT_EQ(other.losses, chosen.losses);
  // Every parameter gather of every rank went through it: 3 units x 2 passes x 6 micro-batches.
  EXPECT_EQ(calls.load(), run.world * 3 * 2 * run.steps * run.micro_batches);
}

}  // namespace
}  // namespace zs::sharding
