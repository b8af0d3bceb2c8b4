// Stage 0's naive gradient syncs (ShardingConfig::ddp_sync): per-tensor all-reduce and
// gather-to-rank-0 + scatter give the bucketed all-reduce's parameters bit for bit (every
// backend reduces element-wise in rank order, comm/reduce.h), in fp32, bf16 and fp16 with fp32
// reduction, with gradient accumulation; each moves the bytes of its closed form
// (sharding/sharded_model.h, DdpSync); other stages reject them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/local/local_backend.h"
#include "models/gpt.h"
#include "runtime/autograd.h"
#include "sharding/sharded_model.h"
#include "tests/sharding/sharding_test_util.h"

namespace zs::sharding {
namespace {

ShardingConfig with_dtypes(DdpSync sync, DType param_dtype, DType reduce_dtype) {
  ShardingConfig config;
  config.ddp_sync = sync;
  config.param_dtype = param_dtype;
  config.reduce_dtype = reduce_dtype;
  return config;
}

TEST(DdpSync, NaiveSyncsGiveTheBucketedParametersBitForBit) {
  struct Dtypes {
    DType param, reduce;
  };
  for (Dtypes d : {Dtypes{DType::kF32, DType::kF32}, Dtypes{DType::kBF16, DType::kBF16},
                   Dtypes{DType::kF16, DType::kF32}}) {
    for (int world : {2, 3}) {
      for (int micro_batches : {1, 2}) {
        RunOptions run;
        run.world = world;
        run.stage = 0;
        run.steps = 4;
        run.micro_batches = micro_batches;
        run.loss_scaling = d.param == DType::kF16;
        const RunResult bucketed = train(run, with_dtypes(DdpSync::kBucketed, d.param, d.reduce));
        for (DdpSync sync : {DdpSync::kPerTensor, DdpSync::kGatherScatter}) {
          const RunResult got = train(run, with_dtypes(sync, d.param, d.reduce));
          const std::string what = std::string(ddp_sync_name(sync)) + " " + dtype_name(d.param) +
                                   "/" + dtype_name(d.reduce) + " world " + std::to_string(world) +
                                   " micro " + std::to_string(micro_batches);
          EXPECT_EQ(got.params, bucketed.params) << what;
          EXPECT_EQ(got.losses, bucketed.losses) << what;
        }
      }
    }
  }
}

// One step's traffic on this rank against the closed forms of DdpSync.
void expect_sync_traffic(comm::Communicator& comm, DdpSync sync, DType reduce_dtype) {
  MemoryTracker tracker;
  CpuAllocator allocator(&tracker);
  models::Gpt model(uneven_config());
  ShardingConfig config;
  config.stage = 0;
  config.ddp_sync = sync;
  config.reduce_dtype = reduce_dtype;
  ShardedModel sharded(model, comm, allocator, config);
  const uint64_t n = static_cast<uint64_t>(comm.size());
  const uint64_t size = dtype_size(reduce_dtype);
  const bool root = comm.rank() == 0;
  Tensor ids = Tensor::zeros({2, kSeq}, DType::kI32, allocator, "ids");
  comm.stats().reset();
  tracker.reset_peaks();
  backward(model.loss(ids, ids));
  sharded.finish_backward();
  sharded.after_step();
  comm.barrier()->wait();  // the step's collectives are recorded
  using comm::CollectiveKind;
  const comm::CollectiveStats all_reduce = comm.stats().get(CollectiveKind::kAllReduce);
  const comm::CollectiveStats gather = comm.stats().get(CollectiveKind::kGather);
  const comm::CollectiveStats scatter = comm.stats().get(CollectiveKind::kScatter);
  const std::vector<ShardedModel::UnitInfo> units = sharded.units();
  const std::string what = std::string(ddp_sync_name(sync)) + " world " + std::to_string(n) +
                           " rank " + std::to_string(comm.rank());
  uint64_t sent = 0, received = 0, calls = 0;
  switch (sync) {
    case DdpSync::kBucketed:
      for (const auto& unit : units) {
        sent += 2 * (n - 1) * (static_cast<uint64_t>(unit.padded_numel) * size) / n;
      }
      received = sent;
      calls = n > 1 ? units.size() : 0;  // nothing to average over one rank
      EXPECT_EQ(all_reduce.calls, calls) << what;
      break;
    case DdpSync::kPerTensor:
      for (models::Parameter* p : model.parameters()) {
        sent += 2 * (n - 1) * (static_cast<uint64_t>(p->numel()) * size) / n;
      }
      received = sent;
      calls = n > 1 ? model.parameters().size() : 0;
      EXPECT_EQ(all_reduce.calls, calls) << what;
      break;
    case DdpSync::kGatherScatter:
      for (const auto& unit : units) {
        const uint64_t bytes = static_cast<uint64_t>(unit.padded_numel) * size;
        sent += root ? (n - 1) * bytes : bytes;
        received += root ? (n - 1) * bytes : bytes;
      }
      calls = n > 1 ? 2 * units.size() : 0;
      EXPECT_EQ(all_reduce.calls, 0u) << what;
      EXPECT_EQ(gather.calls, calls / 2) << what;
      EXPECT_EQ(scatter.calls, calls / 2) << what;
      if (n == 1) sent = received = 0;
      // Rank 0 held one unit's N gradients at a time (comm_buffers), and nobody else did (over
      // one rank, nothing is gathered).
      size_t largest = 0;
      for (const auto& unit : units) {
        largest = std::max(largest, static_cast<size_t>(unit.padded_numel) * size * n);
      }
      if (n == 1) largest = 0;
      EXPECT_GE(tracker.peak(MemoryCategory::kCommBuffers), root ? largest : 0) << what;
      break;
  }
  // The step's collectives (the barrier moves nothing).
  const comm::CollectiveStats total = comm.stats().total();
  EXPECT_EQ(total.bytes_sent, sent) << what;
  EXPECT_EQ(total.bytes_received, received) << what;
  EXPECT_EQ(total.calls, calls + 1) << what;  // + the barrier
}

TEST(DdpSync, TrafficMatchesEachClosedForm) {
  for (int world : {1, 2, 3, 4}) {
    for (DType reduce_dtype : {DType::kF32, DType::kBF16}) {
      for (DdpSync sync : {DdpSync::kBucketed, DdpSync::kPerTensor, DdpSync::kGatherScatter}) {
        comm::run_local_ranks(world, [&](comm::Communicator& comm) {
          expect_sync_traffic(comm, sync, reduce_dtype);
        });
      }
    }
  }
}

TEST(DdpSync, OtherStagesRejectTheNaiveSyncs) {
  comm::run_local_ranks(1, [&](comm::Communicator& comm) {
    CpuAllocator allocator(nullptr);
    for (int stage : {1, 2, 3}) {
      for (DdpSync sync : {DdpSync::kPerTensor, DdpSync::kGatherScatter}) {
        models::Gpt model(uneven_config());
        ShardingConfig config;
        config.stage = stage;
        config.ddp_sync = sync;
        try {
          ShardedModel sharded(model, comm, allocator, config);
          ADD_FAILURE() << "stage " << stage << " accepted " << ddp_sync_name(sync);
        } catch (const InvalidArgument& e) {
          const std::string message = e.what();
          EXPECT_NE(message.find(ddp_sync_name(sync)), std::string::npos) << message;
          EXPECT_NE(message.find("stage 0"), std::string::npos) << message;
        }
      }
    }
  });
}

}  // namespace
}  // namespace zs::sharding
