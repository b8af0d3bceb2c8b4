// ShardedModel::load_full_parameters and visit_full_parameters: loading whole parameters and
// visiting them back round-trips exactly at every stage, world size and compute dtype; the
// compute copies follow the load (the loss after a load is the same bits at every stage);
// loaded values train exactly like the same values set by init; a failing fill changes nothing
// on any rank and fails every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/local/local_backend.h"
#include "models/gpt.h"
#include "runtime/autograd.h"
#include "sharding/sharded_model.h"
#include "tests/sharding/sharding_test_util.h"
#include "tests/support/fixed_batch.h"

namespace zs::sharding {
namespace {

using zs::testing::fixed_batch_loss;

using Values = std::map<std::string, std::vector<float>>;

// A value per (parameter, element) that no init rule produces and that fp32 holds exactly.
float loaded_value(const std::string& name, int64_t i) {
  const float salt = static_cast<float>(std::hash<std::string>{}(name) % 97);
  return 0.001f * static_cast<float>((i * 37 + static_cast<int64_t>(salt)) % 1000) - 0.5f;
}

void fill_loaded(const std::string& name, const Shape& shape, float* dst) {
  for (int64_t i = 0; i < shape_numel(shape); ++i) dst[i] = loaded_value(name, i);
}

Values visit_all(ShardedModel& sharded) {
  Values values;
  sharded.visit_full_parameters(
      [&](const std::string& name, const Shape& shape, const float* data) {
        EXPECT_EQ(values.count(name), 0u) << name << " visited twice";
        values[name].assign(data, data + shape_numel(shape));
      });
  return values;
}

TEST(ParameterIo, LoadThenVisitRoundTripsAtEveryStageWorldAndDtype) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    // The loss after the load, per world size, at stage 0: every other stage must match it.
    for (int world : {1, 2, 3}) {
      float stage0_loss = NAN;
      for (int stage : {0, 1, 2, 3}) {
        std::mutex mutex;
        float loss = NAN;
        comm::run_local_ranks(world, [&](comm::Communicator& comm) {
          MemoryTracker tracker;
          CpuAllocator allocator(&tracker);
          models::Gpt model(uneven_config());
          ShardingConfig config;
          config.stage = stage;
          config.param_dtype = dtype;
          config.reduce_dtype = dtype;
          config.seed = 3;
          config.keep_gathered_below_bytes = 4096;  // the root stays gathered at stage 3
          ShardedModel sharded(model, comm, allocator, config);
          std::vector<std::string> order;
          sharded.load_full_parameters(
              [&](const std::string& name, const Shape& shape, float* dst) {
                for (int64_t i = 0; i < shape_numel(shape); ++i) EXPECT_EQ(dst[i], 0.0f);
                order.push_back(name);
                fill_loaded(name, shape, dst);
              });
          // Once per parameter, in unit order (a tied parameter once).
          EXPECT_EQ(order.size(), model.parameters().size());
          const Values got = visit_all(sharded);
          ASSERT_EQ(got.size(), model.parameters().size());
          for (models::Parameter* p : model.parameters()) {
            ASSERT_EQ(got.count(p->name()), 1u) << p->name();
            const std::vector<float>& values = got.at(p->name());
            ASSERT_EQ(static_cast<int64_t>(values.size()), p->numel());
            for (int64_t i = 0; i < p->numel(); ++i) {
              ASSERT_EQ(values[i], loaded_value(p->name(), i))
                  << p->name() << "[" << i << "] stage " << stage << " world " << world;
            }
          }
          // Nothing the load staged stays allocated.
          EXPECT_EQ(tracker.current(MemoryCategory::kWorkspace), 0u);
          EXPECT_EQ(tracker.current(MemoryCategory::kCommBuffers), 0u);
          // Stages 1/2 hold the full compute parameters: they show the loaded values, rounded
          // to the compute dtype.
          if (stage == 1 || stage == 2) {
            for (models::Parameter* p : model.parameters()) {
              const std::vector<float> compute = p->tensor().to_vector();
              for (int64_t i = 0; i < p->numel(); i += 7) {
                const float expected = loaded_value(p->name(), i);
                if (dtype == DType::kF32) {
                  ASSERT_EQ(compute[i], expected) << p->name();
                } else {
                  ASSERT_NEAR(compute[i], expected, std::fabs(expected) / 128 + 1e-30) << p->name();
                }
              }
            }
          }
          const float local_loss = fixed_batch_loss(model, allocator, kSeq);
          if (comm.rank() == 0) {
            std::lock_guard<std::mutex> lock(mutex);
            loss = local_loss;
          }
        });
        if (stage == 0) {
          stage0_loss = loss;
        } else {
          // The compute copies (and stage 3's kept root) were refreshed from the loaded masters.
          EXPECT_EQ(loss, stage0_loss)
              << dtype_name(dtype) << " world " << world << " stage " << stage;
        }
      }
    }
  }
}

TEST(ParameterIo, LoadedValuesTrainLikeTheSameValuesSetByInit) {
  // The values init produces with seed 3, exported through visit.
  Values init_values;
  comm::run_local_ranks(1, [&](comm::Communicator& comm) {
    CpuAllocator allocator(nullptr);
    models::Gpt model(uneven_config());
    ShardingConfig config;
    config.seed = 3;
    ShardedModel sharded(model, comm, allocator, config);
    init_values = visit_all(sharded);
  });
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int stage : {0, 1, 3}) {
      ShardingConfig config;
      config.param_dtype = dtype;
      config.reduce_dtype = dtype;
      RunOptions run;
      run.stage = stage;
      run.steps = 4;
      const RunResult reference = train(run, config);  // seed 3
      RunOptions loaded = run;
      loaded.seed = 8;
      loaded.prepare = [&](ShardedModel& sharded, comm::Communicator&) {
        sharded.load_full_parameters([&](const std::string& name, const Shape&, float* dst) {
          const std::vector<float>& values = init_values.at(name);
          std::copy(values.begin(), values.end(), dst);
        });
      };
      const RunResult got = train(loaded, config);
      EXPECT_EQ(got.params, reference.params) << dtype_name(dtype) << " stage " << stage;
      EXPECT_EQ(got.losses, reference.losses) << dtype_name(dtype) << " stage " << stage;
      // Seed 8 alone trains differently: the load did the work.
      RunOptions unloaded = run;
      unloaded.seed = 8;
      EXPECT_NE(train(unloaded, config).losses, reference.losses);
    }
  }
}

TEST(ParameterIo, AFailingFillChangesNothingOnAnyRankAndFailsEveryRank) {
  for (int stage : {0, 3}) {
    comm::run_local_ranks(2, [&](comm::Communicator& comm) {
      CpuAllocator allocator(nullptr);
      models::Gpt model(uneven_config());
      ShardingConfig config;
      config.stage = stage;
      config.seed = 3;
      ShardedModel sharded(model, comm, allocator, config);
      const Values before = visit_all(sharded);
      const float loss_before = fixed_batch_loss(model, allocator, kSeq);
      int calls = 0;
      auto fill = [&](const std::string& name, const Shape& shape, float* dst) {
        // Rank 1 fails at the fifth parameter, after writing into the buffer.
        fill_loaded(name, shape, dst);
        if (comm.rank() == 1 && ++calls == 5) throw std::runtime_error("bad tensor " + name);
      };
      if (comm.rank() == 1) {
        EXPECT_THROW(sharded.load_full_parameters(fill), std::runtime_error);
      } else {
        try {
          sharded.load_full_parameters(fill);
          ADD_FAILURE() << "rank 0 expected InvalidArgument";
        } catch (const InvalidArgument& e) {
          EXPECT_NE(std::string(e.what()).find("failed on rank 1"), std::string::npos) << e.what();
        }
      }
      EXPECT_EQ(visit_all(sharded), before) << "stage " << stage;
      EXPECT_EQ(fixed_batch_loss(model, allocator, kSeq), loss_before) << "stage " << stage;
      // The model is still usable: a good load afterwards works on both ranks.
      sharded.load_full_parameters(fill_loaded);
      const std::string first = model.parameters()[0]->name();
      EXPECT_EQ(visit_all(sharded).at(first)[5], loaded_value(first, 5));
    });
  }
}

TEST(ParameterIo, AFailingVisitStillGathersEveryUnitAndRethrows) {
  comm::run_local_ranks(2, [&](comm::Communicator& comm) {
    CpuAllocator allocator(nullptr);
    models::Gpt model(uneven_config());
    ShardingConfig config;
    config.stage = 3;
    ShardedModel sharded(model, comm, allocator, config);
    const uint64_t gathers_before = comm.stats().get(comm::CollectiveKind::kAllGather).calls;
    int visits = 0;
    auto visit = [&](const std::string&, const Shape&, const float*) {
      ++visits;
      if (comm.rank() == 0) throw std::runtime_error("disk full");
    };
    if (comm.rank() == 0) {
      EXPECT_THROW(sharded.visit_full_parameters(visit), std::runtime_error);
      EXPECT_EQ(visits, 1);
    } else {
      sharded.visit_full_parameters(visit);
      EXPECT_EQ(visits, static_cast<int>(model.parameters().size()));
    }
    comm.barrier()->wait();  // the collectives matched: both ranks get here
    EXPECT_EQ(comm.stats().get(comm::CollectiveKind::kAllGather).calls - gathers_before,
              sharded.units().size());
  });
}

}  // namespace
}  // namespace zs::sharding
