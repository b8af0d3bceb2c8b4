// ShardedModel::set_host_copies (runtime/host_copies.h): optimizer offload's gradient downloads
// and compute-copy uploads go through the rank's HostCopies, and the model waits for them before
// the host reads what they bring. The HostCopies here holds every download back until wait(), as
// a copy stream may: a read of a gradient shard before the wait would see the last step's bytes
// (or zeros), and the run would not give the bits of the run with synchronous copies.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "runtime/host_copies.h"
#include "tests/sharding/sharding_test_util.h"

namespace zs::sharding {
namespace {

class DeferredDownloads final : public HostCopies {
 public:
  void download(const Tensor& device, void* host) override {
    pending_.push_back({device, host});
    ++downloads;
  }
  void upload(const Tensor& device, const void* host) override {
    device.copy_from_host(host);
    ++uploads;
  }
  void wait() override {
    for (const Pending& p : pending_) p.device.copy_to_host(p.host);
    pending_.clear();
    ++waits;
  }
  int downloads = 0;
  int uploads = 0;
  int waits = 0;

 private:
  struct Pending {
    Tensor device;
    void* host;
  };
  std::vector<Pending> pending_;
};

TEST(HostCopies, OffloadWaitsForItsDownloadsAndGivesTheBitsOfSynchronousCopies) {
  for (const int stage : {1, 2, 3}) {
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + " " + dtype_name(dtype));
      testing::RunOptions run;
      run.stage = stage;
      run.steps = 3;
      run.micro_batches = 2;
      run.clip_norm = 0.5f;
      run.optimizer_offload = true;
      ShardingConfig config;
      config.param_dtype = dtype;
      const testing::RunResult synchronous = testing::train(run, config);
      std::vector<std::unique_ptr<DeferredDownloads>> copies(static_cast<size_t>(run.world));
      for (auto& c : copies) c = std::make_unique<DeferredDownloads>();
      run.prepare = [&](ShardedModel& sharded, comm::Communicator& comm) {
        sharded.set_host_copies(copies[static_cast<size_t>(comm.rank())].get());
      };
      const testing::RunResult deferred = testing::train(run, config);
      EXPECT_EQ(deferred.losses, synchronous.losses);
      EXPECT_EQ(deferred.params, synchronous.params);
      for (const auto& c : copies) {
        EXPECT_GT(c->downloads, 0);
        EXPECT_GT(c->uploads, 0);
        EXPECT_GE(c->waits, run.steps * run.micro_batches);
      }
    }
  }
}

}  // namespace
}  // namespace zs::sharding
