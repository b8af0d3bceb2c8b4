// MemoryTracker, allocator and storage: exact category accounting, peaks, budget errors,
// timeline JSON, and released storages that error by name.
#include "runtime/memory_tracker.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "runtime/allocator.h"
#include "runtime/error.h"
#include "runtime/storage.h"
#include "runtime/tensor.h"

namespace zs {
namespace {

TEST(MemoryTracker, CategoriesAndPeaksAreExact) {
  MemoryTracker tracker("test");
  CpuAllocator allocator(&tracker);
  {
    auto params = Storage::create(allocator, 1000, MemoryCategory::kParameters, "p");
    auto grads = Storage::create(allocator, 300, MemoryCategory::kGradients, "g");
    EXPECT_EQ(tracker.current(MemoryCategory::kParameters), 1000u);
    EXPECT_EQ(tracker.current(MemoryCategory::kGradients), 300u);
    EXPECT_EQ(tracker.current_total(), 1300u);
    {
      auto act = Storage::create(allocator, 5000, MemoryCategory::kActivations, "a");
      EXPECT_EQ(tracker.current_total(), 6300u);
    }
    EXPECT_EQ(tracker.current(MemoryCategory::kActivations), 0u);
    EXPECT_EQ(tracker.peak(MemoryCategory::kActivations), 5000u);
    EXPECT_EQ(tracker.peak_total(), 6300u);
    auto act2 = Storage::create(allocator, 2000, MemoryCategory::kActivations, "a2");
    // Peak of the sum is 6300 (1000 + 300 + 5000), not the sum of category peaks (6300 too
    // here); now 3300 live.
    EXPECT_EQ(tracker.peak_total(), 6300u);
    tracker.reset_peaks();
    EXPECT_EQ(tracker.peak_total(), 3300u);
    EXPECT_EQ(tracker.peak(MemoryCategory::kActivations), 2000u);
  }
  EXPECT_EQ(tracker.current_total(), 0u);
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    EXPECT_EQ(tracker.current(static_cast<MemoryCategory>(c)), 0u);
  }
}

TEST(MemoryTracker, PeakOfSumIsNotSumOfPeaks) {
  MemoryTracker tracker;
  CpuAllocator allocator(&tracker);
  { auto a = Storage::create(allocator, 100, MemoryCategory::kActivations, "a"); }
  { auto w = Storage::create(allocator, 70, MemoryCategory::kWorkspace, "w"); }
  EXPECT_EQ(tracker.peak(MemoryCategory::kActivations), 100u);
  EXPECT_EQ(tracker.peak(MemoryCategory::kWorkspace), 70u);
  EXPECT_EQ(tracker.peak_total(), 100u);
}

TEST(MemoryTracker, CategoryScopeSetsTensorCategory) {
  MemoryTracker tracker;
  CpuAllocator allocator(&tracker);
  EXPECT_EQ(current_memory_category(), MemoryCategory::kOther);
  {
    MemoryCategoryScope scope(MemoryCategory::kOptimizerState);
    Tensor m = Tensor::empty({10, 10}, DType::kF32, allocator, "adam.m");
    {
      MemoryCategoryScope inner(MemoryCategory::kCommBuffers);
      Tensor b = Tensor::empty({4}, DType::kF16, allocator, "bucket");
      EXPECT_EQ(tracker.current(MemoryCategory::kCommBuffers), 8u);
    }
    EXPECT_EQ(current_memory_category(), MemoryCategory::kOptimizerState);
    EXPECT_EQ(tracker.current(MemoryCategory::kOptimizerState), 400u);
  }
  EXPECT_EQ(current_memory_category(), MemoryCategory::kOther);
}

TEST(MemoryTracker, ScopeIsPerThread) {
  MemoryCategoryScope scope(MemoryCategory::kGradients);
  MemoryCategory seen = MemoryCategory::kGradients;
  std::thread([&] { seen = current_memory_category(); }).join();
  EXPECT_EQ(seen, MemoryCategory::kOther);
}

TEST(MemoryTracker, BudgetRaisesOutOfMemoryWithBreakdownAndChargesNothing) {
  MemoryTracker tracker("rank 0 cpu");
  tracker.set_budget(10000);
  CpuAllocator allocator(&tracker);
  auto act = Storage::create(allocator, 6000, MemoryCategory::kActivations, "act");
  auto exactly_fits = Storage::create(allocator, 4000, MemoryCategory::kParameters, "p");
  EXPECT_EQ(tracker.current_total(), 10000u);
  try {
    auto over = Storage::create(allocator, 1, MemoryCategory::kWorkspace, "one byte");
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 0 cpu"), std::string::npos) << what;
    EXPECT_NE(what.find("'one byte'"), std::string::npos) << what;
    EXPECT_NE(what.find("budget of"), std::string::npos) << what;
    EXPECT_NE(what.find("activations"), std::string::npos) << what;
    EXPECT_NE(what.find("hint: activations dominate"), std::string::npos) << what;
  }
  EXPECT_EQ(tracker.current_total(), 10000u);
  EXPECT_EQ(tracker.current(MemoryCategory::kWorkspace), 0u);
  EXPECT_EQ(tracker.peak_total(), 10000u);
}

TEST(MemoryTracker, TimelineRecordsEventsAndWritesJson) {
  MemoryTracker tracker("cpu");
  CpuAllocator allocator(&tracker);
  tracker.enable_timeline(true);
  {
    auto p = Storage::create(allocator, 64, MemoryCategory::kParameters, "w\"quoted\"");
    tracker.mark("forward");
  }
  auto events = tracker.timeline();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].delta, 64);
  EXPECT_EQ(events[0].category, MemoryCategory::kParameters);
  EXPECT_EQ(events[0].total_bytes, 64u);
  EXPECT_EQ(events[1].label, "forward");
  EXPECT_EQ(events[1].delta, 0);
  EXPECT_EQ(events[2].delta, -64);
  EXPECT_EQ(events[2].total_bytes, 0u);
  EXPECT_LE(events[0].time_ms, events[2].time_ms);

  const std::string path = ::testing::TempDir() + "zs_timeline.json";
  tracker.write_timeline_json(path);
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  const std::string json = text.str();
  EXPECT_NE(json.find("\"delta\": 64"), std::string::npos) << json;
  EXPECT_NE(json.find("\"label\": \"w\\\"quoted\\\"\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"parameters\": 64"), std::string::npos) << json;
  std::remove(path.c_str());
  EXPECT_THROW(tracker.write_timeline_json("/nonexistent-dir/x.json"), IoError);
}

TEST(MemoryTracker, ConcurrentChargesAreExact) {
  MemoryTracker tracker;
  CpuAllocator allocator(&tracker);
  auto work = [&] {
    for (int i = 0; i < 2000; ++i) {
      auto s = Storage::create(allocator, 128, MemoryCategory::kCommBuffers, "b");
    }
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  EXPECT_EQ(tracker.current_total(), 0u);
  EXPECT_GE(tracker.peak(MemoryCategory::kCommBuffers), 128u);
  EXPECT_LE(tracker.peak(MemoryCategory::kCommBuffers), 256u);
}

TEST(Storage, ReleasedViewErrorsWithItsName) {
  MemoryTracker tracker;
  CpuAllocator allocator(&tracker);
  auto flat = Storage::create(allocator, 40 * sizeof(float), MemoryCategory::kParameters,
                              "unit blocks.0 gathered");
  Tensor weight = Tensor::from_storage(flat, 0, {4, 8}, DType::kF32, "blocks.0.attn.weight");
  Tensor bias = Tensor::from_storage(flat, 32 * sizeof(float), {8}, DType::kF32, "blocks.0.bias");
  weight.fill(1.0f);
  bias.fill(2.0f);
  EXPECT_EQ(tracker.current(MemoryCategory::kParameters), 160u);
  flat->release();
  EXPECT_EQ(tracker.current(MemoryCategory::kParameters), 0u);
  EXPECT_TRUE(weight.is_released());
  try {
    (void)weight.data<float>();
    FAIL() << "expected ReleasedTensor";
  } catch (const ReleasedTensor& e) {
    EXPECT_NE(std::string(e.what()).find("'blocks.0.attn.weight'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("unit blocks.0 gathered"), std::string::npos) << e.what();
  }
  EXPECT_THROW(bias.to_vector(), ReleasedTensor);
  flat->release();  // idempotent
  flat->materialize();
  EXPECT_EQ(tracker.current(MemoryCategory::kParameters), 160u);
  bias.fill(3.0f);
  EXPECT_EQ(bias.to_vector()[7], 3.0f);
}

TEST(Storage, ViewOutOfRangeIsRejected) {
  CpuAllocator allocator(nullptr);
  auto s = Storage::create(allocator, 16, MemoryCategory::kOther, "small");
  EXPECT_THROW(Tensor::from_storage(s, 8, {3}, DType::kF32, "x"), InvalidArgument);
  EXPECT_THROW(Tensor::from_storage(s, 2, {1}, DType::kF32, "x"), InvalidArgument);
  EXPECT_NO_THROW(Tensor::from_storage(s, 8, {2}, DType::kF32, "x"));
}

}  // namespace
}  // namespace zs
