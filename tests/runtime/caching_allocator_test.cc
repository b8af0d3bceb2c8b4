// CpuAllocator's cache of freed blocks: a freed block of a size class serves the next
// allocation of that class; the MemoryTracker is charged only live bytes by category while the
// allocator reports what it reserves; empty_cache() hands the cache back; a budget raises
// OutOfMemory on live bytes (cached blocks do not count, and a refused charge leaves the cache
// alone); small blocks, a disabled cache and the cache limit bypass it; a released and
// re-materialized Storage (stage 3's gathered parameters) gets its block back.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/error.h"
#include "runtime/memory_tracker.h"
#include "runtime/storage.h"

namespace zs {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(CachingAllocator, SizeClassesAreEightPerPowerOfTwoAndPageMultiples) {
  CpuAllocator allocator(nullptr);
  EXPECT_EQ(allocator.block_bytes(100), 128u);                   // below the cache: 64-byte units
  EXPECT_EQ(allocator.block_bytes(64 << 10), size_t{64} << 10);  // 64 KiB: steps of 8 KiB
  EXPECT_EQ(allocator.block_bytes((64 << 10) + 1), size_t{72} << 10);
  EXPECT_EQ(allocator.block_bytes(kMiB), kMiB);
  EXPECT_EQ(allocator.block_bytes(kMiB + 1), kMiB + kMiB / 8);
  EXPECT_EQ(allocator.block_bytes(kMiB + kMiB / 8), kMiB + kMiB / 8);
  for (size_t n : {size_t{65536}, size_t{100000}, size_t{3} << 20, size_t{123456789}}) {
    const size_t block = allocator.block_bytes(n);
    EXPECT_GE(block, n);
    EXPECT_LE(block, n + n / 8) << n;
    EXPECT_EQ(block % 4096, 0u) << n;
  }
}

TEST(CachingAllocator, AFreedBlockServesTheNextAllocationOfItsClass) {
  MemoryTracker tracker;
  CpuAllocator allocator(&tracker);
  void* first = allocator.allocate(kMiB, MemoryCategory::kParameters, "a");
  std::memset(first, 1, kMiB);
  allocator.deallocate(first, kMiB, MemoryCategory::kParameters, "a");
  CpuAllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.cached_bytes, kMiB);
  EXPECT_EQ(stats.cached_blocks, 1u);
  EXPECT_EQ(stats.reserved_bytes, kMiB);
  // A slightly smaller request of the same class takes the same block.
  void* second = allocator.allocate(kMiB - 1000, MemoryCategory::kGradients, "b");
  EXPECT_EQ(second, first);
  stats = allocator.stats();
  EXPECT_EQ(stats.cached_bytes, 0u);
  EXPECT_EQ(stats.cache_hits, 1u);
  EXPECT_EQ(stats.cache_misses, 1u);
  // Another class does not.
  void* third = allocator.allocate(2 * kMiB, MemoryCategory::kGradients, "c");
  EXPECT_NE(third, first);
  EXPECT_EQ(allocator.stats().cache_misses, 2u);
  EXPECT_EQ(allocator.stats().reserved_bytes, 3 * kMiB);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(third) % CpuAllocator::kAlignment, 0u);
  allocator.deallocate(second, kMiB - 1000, MemoryCategory::kGradients, "b");
  allocator.deallocate(third, 2 * kMiB, MemoryCategory::kGradients, "c");
  EXPECT_EQ(allocator.stats().cached_bytes, 3 * kMiB);
}

TEST(CachingAllocator, TheTrackerSeesOnlyLiveBytesByCategory) {
  MemoryTracker tracker;
  CpuAllocator allocator(&tracker);
  void* params = allocator.allocate(kMiB + 100, MemoryCategory::kParameters, "params");
  EXPECT_EQ(tracker.current(MemoryCategory::kParameters), kMiB + 100);  // requested, not class
  allocator.deallocate(params, kMiB + 100, MemoryCategory::kParameters, "params");
  EXPECT_EQ(tracker.current(MemoryCategory::kParameters), 0u);
  EXPECT_EQ(tracker.current_total(), 0u);
  EXPECT_EQ(allocator.stats().reserved_bytes, kMiB + kMiB / 8);  // held in the cache
  // The cached block, reused for gradients, is charged to gradients.
  void* grads = allocator.allocate(kMiB + 200, MemoryCategory::kGradients, "grads");
  EXPECT_EQ(grads, params);
  EXPECT_EQ(tracker.current(MemoryCategory::kGradients), kMiB + 200);
  EXPECT_EQ(tracker.current(MemoryCategory::kParameters), 0u);
  EXPECT_EQ(tracker.peak_total(), kMiB + 200);
  allocator.deallocate(grads, kMiB + 200, MemoryCategory::kGradients, "grads");
  EXPECT_EQ(tracker.current_total(), 0u);
  EXPECT_EQ(allocator.stats().peak_reserved_bytes, kMiB + kMiB / 8);
}

TEST(CachingAllocator, EmptyCacheHandsTheCachedBlocksBack) {
  CpuAllocator allocator(nullptr);
  void* live = allocator.allocate(kMiB, MemoryCategory::kOther, "live");
  for (size_t n : {kMiB, 2 * kMiB, 2 * kMiB}) {
    allocator.deallocate(allocator.allocate(n, MemoryCategory::kOther, "x"), n,
                         MemoryCategory::kOther, "x");
  }
  // The second 2 MiB reused the first: one block per class.
  EXPECT_EQ(allocator.stats().cached_bytes, 3 * kMiB);
  EXPECT_EQ(allocator.stats().reserved_bytes, 4 * kMiB);
  allocator.empty_cache();
  const CpuAllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.cached_bytes, 0u);
  EXPECT_EQ(stats.cached_blocks, 0u);
  EXPECT_EQ(stats.reserved_bytes, kMiB);  // the live block stays
  EXPECT_EQ(stats.peak_reserved_bytes, 4 * kMiB);
  allocator.reset_peak_reserved();
  EXPECT_EQ(allocator.stats().peak_reserved_bytes, kMiB);
  allocator.deallocate(live, kMiB, MemoryCategory::kOther, "live");
}

TEST(CachingAllocator, TheBudgetCountsLiveBytesOnly) {
  MemoryTracker tracker;
  tracker.set_budget(3 * kMiB);
  CpuAllocator allocator(&tracker);
  void* a = allocator.allocate(2 * kMiB, MemoryCategory::kParameters, "a");
  allocator.deallocate(a, 2 * kMiB, MemoryCategory::kParameters, "a");
  // 2 MiB cached + 2.5 MiB new is over the budget in reserved bytes, not in live bytes.
  void* b = allocator.allocate(2 * kMiB + kMiB / 2, MemoryCategory::kActivations, "b");
  EXPECT_EQ(tracker.current_total(), 2 * kMiB + kMiB / 2);
  EXPECT_GT(allocator.stats().reserved_bytes, tracker.budget());
  // Live bytes over the budget: OutOfMemory, even though a cached block of the class exists.
  const CpuAllocatorStats before = allocator.stats();
  try {
    allocator.allocate(2 * kMiB, MemoryCategory::kParameters, "c");
    ADD_FAILURE() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("'c'"), std::string::npos) << e.what();
  }
  // The refused allocation took nothing from the cache and charged nothing.
  EXPECT_EQ(allocator.stats().cached_bytes, before.cached_bytes);
  EXPECT_EQ(allocator.stats().cache_hits, before.cache_hits);
  EXPECT_EQ(tracker.current_total(), 2 * kMiB + kMiB / 2);
  allocator.deallocate(b, 2 * kMiB + kMiB / 2, MemoryCategory::kActivations, "b");
  // Within the budget again, the cached 2 MiB block serves the same request.
  void* c = allocator.allocate(2 * kMiB, MemoryCategory::kParameters, "c");
  EXPECT_EQ(c, a);
  allocator.deallocate(c, 2 * kMiB, MemoryCategory::kParameters, "c");
}

TEST(CachingAllocator, SmallBlocksDisabledCacheAndTheLimitBypassIt) {
  {
    CpuAllocator allocator(nullptr);
    void* small = allocator.allocate(1000, MemoryCategory::kOther, "small");
    allocator.deallocate(small, 1000, MemoryCategory::kOther, "small");
    EXPECT_EQ(allocator.stats().cached_bytes, 0u);
    EXPECT_EQ(allocator.stats().reserved_bytes, 0u);
    EXPECT_EQ(allocator.stats().cache_misses, 0u);  // not cacheable: not a miss either
  }
  {
    CpuAllocatorOptions options;
    options.caching = false;
    CpuAllocator allocator(nullptr, options);
    void* block = allocator.allocate(kMiB, MemoryCategory::kOther, "block");
    EXPECT_EQ(allocator.stats().reserved_bytes, kMiB);
    allocator.deallocate(block, kMiB, MemoryCategory::kOther, "block");
    EXPECT_EQ(allocator.stats().cached_bytes, 0u);
    EXPECT_EQ(allocator.stats().reserved_bytes, 0u);
  }
  {
    CpuAllocatorOptions options;
    options.max_cached_bytes = 3 * kMiB;
    CpuAllocator allocator(nullptr, options);
    void* a = allocator.allocate(2 * kMiB, MemoryCategory::kOther, "a");
    void* b = allocator.allocate(2 * kMiB, MemoryCategory::kOther, "b");
    allocator.deallocate(a, 2 * kMiB, MemoryCategory::kOther, "a");
    allocator.deallocate(b, 2 * kMiB, MemoryCategory::kOther, "b");  // would make 4 MiB
    EXPECT_EQ(allocator.stats().cached_bytes, 2 * kMiB);
    EXPECT_EQ(allocator.stats().reserved_bytes, 2 * kMiB);
  }
}

TEST(CachingAllocator, AReleasedStorageGetsItsBlockBack) {
  MemoryTracker tracker;
  CpuAllocator allocator(&tracker);
  auto storage = Storage::create(allocator, 3 * kMiB, MemoryCategory::kParameters, "unit params");
  void* gathered = storage->data_unchecked();
  for (int step = 0; step < 5; ++step) {
    storage->release();
    EXPECT_EQ(tracker.current(MemoryCategory::kParameters), 0u);
    storage->materialize();
    EXPECT_EQ(storage->data_unchecked(), gathered) << step;
    EXPECT_EQ(tracker.current(MemoryCategory::kParameters), 3 * kMiB);
  }
  EXPECT_EQ(allocator.stats().cache_misses, 1u);
  EXPECT_EQ(allocator.stats().cache_hits, 5u);
  EXPECT_EQ(allocator.stats().peak_reserved_bytes, 3 * kMiB);
}

TEST(CachingAllocator, AnImpossibleSizeIsOutOfMemoryNotAWrappedSmallBlock) {
  MemoryTracker tracker;
  CpuAllocator allocator(&tracker);
  EXPECT_THROW(allocator.allocate(~size_t{0} - 10, MemoryCategory::kOther, "huge"), OutOfMemory);
  EXPECT_EQ(tracker.current_total(), 0u);  // the charge was taken back
  EXPECT_EQ(allocator.stats().reserved_bytes, 0u);
}

TEST(CachingAllocator, ConcurrentThreadsShareTheCacheSafely) {
  MemoryTracker tracker;
  CpuAllocator allocator(&tracker);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const size_t n = (size_t{64} << 10) * static_cast<size_t>(1 + (i + t) % 5);
        auto* p =
            static_cast<unsigned char*>(allocator.allocate(n, MemoryCategory::kActivations, "act"));
        p[0] = p[n - 1] = static_cast<unsigned char>(i);
        allocator.deallocate(p, n, MemoryCategory::kActivations, "act");
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(tracker.current_total(), 0u);
  const CpuAllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.reserved_bytes, stats.cached_bytes);  // nothing live: everything is cached
  EXPECT_EQ(stats.cache_hits + stats.cache_misses, 800u);
  EXPECT_LE(stats.cached_blocks, 4u * 5u);  // at most one block per thread and class
}

}  // namespace
}  // namespace zs
