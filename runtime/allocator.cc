// Allocator and Storage implementation.
#include "runtime/allocator.h"

#include <algorithm>
#include <cstdlib>

#include "runtime/error.h"
#include "runtime/storage.h"

namespace zs {

void* Allocator::allocate(size_t nbytes, MemoryCategory category, const std::string& what) {
  if (nbytes == 0) return nullptr;
  if (tracker_) tracker_->charge(category, nbytes, what);
  void* ptr = nullptr;
  try {
    ptr = raw_allocate(nbytes);
  } catch (...) {
    if (tracker_) tracker_->uncharge(category, nbytes, what);
    throw;
  }
  return ptr;
}

void Allocator::deallocate(void* ptr, size_t nbytes, MemoryCategory category,
                           const std::string& what) {
  if (ptr == nullptr) return;
  raw_deallocate(ptr, nbytes);
  if (tracker_) tracker_->uncharge(category, nbytes, what);
}

namespace {

size_t round_up_to(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

void* aligned_block(size_t bytes) { return std::aligned_alloc(CpuAllocator::kAlignment, bytes); }

}  // namespace

CpuAllocator::CpuAllocator(MemoryTracker* tracker, const CpuAllocatorOptions& options)
    : Allocator(Device::cpu(), tracker), options_(options) {}

CpuAllocator::~CpuAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  empty_cache_locked();
}

size_t CpuAllocator::block_bytes(size_t nbytes) const {
  if (nbytes > kMaxBlockBytes) return nbytes;  // no rounding that could wrap around
  if (!cacheable(nbytes)) return round_up_to(nbytes, kAlignment);
  size_t top = 1;  // the highest power of two <= nbytes
  while (top <= nbytes / 2) top *= 2;
  return round_up_to(nbytes, std::max<size_t>(4096, top / 8));
}

void* CpuAllocator::raw_allocate(size_t nbytes) {
  ZS_CHECK_AS(OutOfMemory, nbytes <= kMaxBlockBytes, "host allocation of ", nbytes,
              " bytes is larger than any machine's memory; check the tensor's shape");
  const size_t bytes = block_bytes(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  void* ptr = nullptr;
  if (cacheable(nbytes)) {
    auto it = free_blocks_.find(bytes);
    if (it != free_blocks_.end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= bytes;
      --stats_.cached_blocks;
      ++stats_.cache_hits;
      return ptr;  // already counted in reserved
    }
    ++stats_.cache_misses;
  }
  ptr = aligned_block(bytes);
  if (ptr == nullptr && stats_.cached_bytes > 0) {
    // The cache may hold what the system lacks: give it back and try once more.
    empty_cache_locked();
    ptr = aligned_block(bytes);
  }
  ZS_CHECK_AS(OutOfMemory, ptr != nullptr, "host allocation of ", nbytes,
              " bytes failed: the machine is out of memory; lower the batch size or use more "
              "ranks/nodes");
  stats_.reserved_bytes += bytes;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  return ptr;
}

void CpuAllocator::raw_deallocate(void* ptr, size_t nbytes) {
  const size_t bytes = block_bytes(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  if (cacheable(nbytes) && stats_.cached_bytes + bytes <= options_.max_cached_bytes) {
    free_blocks_[bytes].push_back(ptr);
    stats_.cached_bytes += bytes;
    ++stats_.cached_blocks;
    return;
  }
  std::free(ptr);
  stats_.reserved_bytes -= bytes;
}

CpuAllocatorStats CpuAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CpuAllocator::reset_peak_reserved() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

void CpuAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  empty_cache_locked();
}

void CpuAllocator::empty_cache_locked() {
  for (auto& [bytes, blocks] : free_blocks_) {
    for (void* block : blocks) std::free(block);
    stats_.reserved_bytes -= bytes * blocks.size();
  }
  free_blocks_.clear();
  stats_.cached_bytes = 0;
  stats_.cached_blocks = 0;
}

std::shared_ptr<Storage> Storage::create(Allocator& allocator, size_t nbytes,
                                         MemoryCategory category, std::string name) {
  return std::shared_ptr<Storage>(new Storage(allocator, nbytes, category, std::move(name), true));
}

std::shared_ptr<Storage> Storage::create_released(Allocator& allocator, size_t nbytes,
                                                  MemoryCategory category, std::string name) {
  return std::shared_ptr<Storage>(new Storage(allocator, nbytes, category, std::move(name), false));
}

Storage::Storage(Allocator& allocator, size_t nbytes, MemoryCategory category, std::string name,
                 bool allocate)
    : allocator_(&allocator), nbytes_(nbytes), category_(category), name_(std::move(name)) {
  if (allocate) {
    data_ = allocator_->allocate(nbytes_, category_, name_);
  } else {
    released_ = true;
  }
}

Storage::~Storage() {
  if (!released_) allocator_->deallocate(data_, nbytes_, category_, name_);
}

void* Storage::data() const {
  ZS_CHECK_AS(ReleasedTensor, !released_, "storage '", name_,
              "' was released; gather it (materialize) before touching its data");
  return data_;
}

void Storage::release() {
  if (released_) return;
  allocator_->deallocate(data_, nbytes_, category_, name_);
  data_ = nullptr;
  released_ = true;
}

void Storage::materialize() {
  if (!released_) return;
  data_ = allocator_->allocate(nbytes_, category_, name_);
  released_ = false;
}

}  // namespace zs
