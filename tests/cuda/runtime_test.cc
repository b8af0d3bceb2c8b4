// Tests of runtime/cuda on a GPU (label gpu; each skips with "no CUDA device: skipped (compiled
// only)" where there is none): the stream-ordered allocator charges the MemoryTracker by
// category and stops at the budget before CUDA allocates; pinned host memory; host↔device
// round trips on the copy stream; events order work across streams.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/cuda/allocator.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/copy.h"
#include "runtime/cuda/stream.h"
#include "runtime/error.h"
#include "tests/cuda/cuda_test_util.h"

namespace zs {
namespace {

using testing::CudaTest;

class CudaRuntimeTest : public CudaTest {};

TEST_F(CudaRuntimeTest, AllocatorChargesTheTrackerByCategoryAndReleases) {
  {
    Tensor params = Tensor::empty({1000}, DType::kF32, *device_allocator_,
                                  MemoryCategory::kParameters, "params");
    Tensor grads =
        Tensor::empty({500}, DType::kF16, *device_allocator_, MemoryCategory::kGradients, "grads");
    EXPECT_EQ(params.device(), Device::cuda(0));
    EXPECT_EQ(device_tracker_.current(MemoryCategory::kParameters), 4000u);
    EXPECT_EQ(device_tracker_.current(MemoryCategory::kGradients), 1000u);
    EXPECT_GE(device_allocator_->reserved_bytes(), 5000u);
  }
  EXPECT_EQ(device_tracker_.current_total(), 0u);
  EXPECT_EQ(device_tracker_.peak_total(), 5000u);
}

TEST_F(CudaRuntimeTest, BudgetStopsTheAllocationWithTheBreakdown) {
  device_tracker_.set_budget(1 << 20);
  try {
    Tensor big = Tensor::empty({1 << 20}, DType::kF32, *device_allocator_,
                               MemoryCategory::kActivations, "too big");
    FAIL() << "no OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("activations"), std::string::npos) << e.what();
  }
  EXPECT_EQ(device_tracker_.current_total(), 0u);
}

TEST_F(CudaRuntimeTest, PinnedAndPageableRoundTripsThroughTheDevice) {
  MemoryTracker pinned_tracker("pinned");
  cuda::PinnedHostAllocator pinned(&pinned_tracker);
  for (Allocator* host :
       {static_cast<Allocator*>(&host_allocator_), static_cast<Allocator*>(&pinned)}) {
    Tensor src = Tensor::empty({4097}, DType::kF32, *host, MemoryCategory::kOther, "src");
    std::vector<float> values(4097);
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f - 7.0f;
    src.copy_from(values);
    Tensor device = upload(src);
    EXPECT_EQ(download(device).to_vector(), values);
  }
  EXPECT_EQ(pinned_tracker.current_total(), 0u);
}

TEST_F(CudaRuntimeTest, EventsOrderWorkAcrossStreams) {
  cuda::Stream other(0);
  cuda::Event event(0);
  EXPECT_TRUE(event.query());  // nothing recorded yet
  Tensor src = Tensor::empty({1 << 16}, DType::kF32, host_allocator_, MemoryCategory::kOther, "s");
  src.copy_from(std::vector<float>(1 << 16, 3.0f));
  Tensor device = upload(src);
  // other waits for stream_ (which wrote `device` via the copy ordering), then copies it.
  Tensor copy = device_empty({1 << 16}, DType::kF32);
  other.wait_for(*stream_);
  ZS_CUDA_CHECK(cudaMemcpyAsync(copy.raw_device_data(), device.raw_device_data(), copy.nbytes(),
                                cudaMemcpyDeviceToDevice, other.get()));
  event.record(other);
  stream_->wait(event);
  EXPECT_EQ(download(copy).to_vector(), std::vector<float>(1 << 16, 3.0f));
  event.synchronize();
  EXPECT_TRUE(event.query());
  EXPECT_TRUE(other.query());
}

}  // namespace
}  // namespace zs
