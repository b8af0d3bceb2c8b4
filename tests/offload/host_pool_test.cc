// HostPool (offload/host_pool.h): the host tier's buffers are aligned and host-visible, charged
// to the tier's own tracker by category, refused over the pool's budget with an OutOfMemory that
// names the tier, the bytes and what to do (and nothing stays charged), and a pool for a GPU rank
// in a program without that device's offload backend is refused by name.
#include "offload/host_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "runtime/error.h"
#include "runtime/tensor.h"

namespace zs::offload {
namespace {

TEST(HostPool, BuffersAreAlignedHostVisibleAndChargedToTheTier) {
  HostPool pool("rank 0 host tier", {});
  EXPECT_FALSE(pool.pinned());
  EXPECT_EQ(pool.budget(), 0u);
  Allocator& allocator = pool.allocator();
  EXPECT_TRUE(allocator.host_visible());
  EXPECT_TRUE(allocator.device().is_cpu());
  {
    Tensor master =
        Tensor::zeros({1001}, DType::kF32, allocator, MemoryCategory::kMasterWeights, "master");
    Tensor state =
        Tensor::empty({3}, DType::kF32, allocator, MemoryCategory::kOptimizerState, "exp_avg");
    EXPECT_EQ(reinterpret_cast<uintptr_t>(master.raw_data()) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(state.raw_data()) % 64, 0u);
    EXPECT_EQ(master.to_vector()[1000], 0.0f);
    EXPECT_EQ(pool.tracker().current(MemoryCategory::kMasterWeights), 1001u * 4);
    EXPECT_EQ(pool.tracker().current(MemoryCategory::kOptimizerState), 12u);
    EXPECT_EQ(pool.tracker().device_name(), "rank 0 host tier");
  }
  EXPECT_EQ(pool.tracker().current_total(), 0u);
  EXPECT_EQ(pool.tracker().peak_total(), 1001u * 4 + 12);
}

TEST(HostPool, OverTheBudgetIsAnOutOfMemoryNamingTheTierAndWhatToDo) {
  HostPoolOptions options;
  options.budget = 1000;
  HostPool pool("rank 1 host tier", options);
  Tensor kept =
      Tensor::empty({200}, DType::kF32, pool.allocator(), MemoryCategory::kMasterWeights, "master");
  std::string message;
  try {
    Tensor::empty({100}, DType::kF32, pool.allocator(), MemoryCategory::kOptimizerState, "exp_avg");
    ADD_FAILURE() << "no OutOfMemory";
  } catch (const OutOfMemory& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("rank 1 host tier"), std::string::npos) << message;
  EXPECT_NE(message.find("400 B (400 bytes)"), std::string::npos) << message;
  EXPECT_NE(message.find("to 1.2 KiB"), std::string::npos) << message;
  EXPECT_NE(message.find("--host-memory-budget 1000 B"), std::string::npos) << message;
  EXPECT_NE(message.find("raise --host-memory-budget"), std::string::npos) << message;
  // Nothing of the refused allocation stays charged; what fits still fits.
  EXPECT_EQ(pool.tracker().current_total(), 800u);
  EXPECT_EQ(pool.tracker().current(MemoryCategory::kOptimizerState), 0u);
  Tensor fits = Tensor::empty({50}, DType::kF32, pool.allocator(), MemoryCategory::kOptimizerState,
                              "exp_avg");
  EXPECT_EQ(pool.tracker().current_total(), 1000u);
}

TEST(HostPool, AGpuRankWithoutItsOffloadBackendIsRefusedByName) {
  // This program links zs_offload only: no device fills the pinned-memory table.
  HostPoolOptions options;
  options.device = Device::cuda(0);
  try {
    HostPool pool("rank 0 host tier", options);
    ADD_FAILURE() << "a pool for cuda:0 without pinned memory";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
    EXPECT_NE(message.find("pinned"), std::string::npos) << message;
    EXPECT_NE(message.find("-DZS_CUDA=ON"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace zs::offload
