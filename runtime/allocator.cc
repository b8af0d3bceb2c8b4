// Allocator and Storage implementation.
#include "runtime/allocator.h"

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

void* CpuAllocator::raw_allocate(size_t nbytes) {
  const size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  void* ptr = std::aligned_alloc(kAlignment, rounded);
  ZS_CHECK_AS(OutOfMemory, ptr != nullptr, "host allocation of ", nbytes,
              " bytes failed: the machine is out of memory; lower the batch size or use more "
              "ranks/nodes");
  return ptr;
}

void CpuAllocator::raw_deallocate(void* ptr, size_t) { std::free(ptr); }

std::shared_ptr<Storage> Storage::create(Allocator& allocator, size_t nbytes,
                                         MemoryCategory category, std::string name) {
  return std::shared_ptr<Storage>(new Storage(allocator, nbytes, category, std::move(name)));
}

Storage::Storage(Allocator& allocator, size_t nbytes, MemoryCategory category, std::string name)
    : allocator_(&allocator), nbytes_(nbytes), category_(category), name_(std::move(name)) {
  data_ = allocator_->allocate(nbytes_, category_, name_);
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
