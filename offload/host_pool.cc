// HostPool (offload/host_pool.h): the tier's allocator, its budget check and the choice between
// aligned and pinned host memory.
#include "offload/host_pool.h"

#include "runtime/device_kernels.h"
#include "runtime/error.h"

namespace zs::offload {

// Charged to the tier's tracker by Allocator::allocate; checks the pool's budget before it takes
// memory from `memory_` (an untracked aligned or pinned allocator).
class HostPool::TierAllocator final : public Allocator {
 public:
  TierAllocator(HostPool& pool, std::unique_ptr<Allocator> memory)
      : Allocator(Device::cpu(), &pool.tracker_), pool_(pool), memory_(std::move(memory)) {}
  bool host_visible() const override { return true; }

 protected:
  void* raw_allocate(size_t nbytes) override {
    const size_t budget = pool_.budget_;
    const size_t total = pool_.tracker_.current_total();  // charged already, this one included
    if (budget != 0 && total > budget) {
      ZS_THROW(OutOfMemory, "out of host memory on ", pool_.tracker_.device_name(), ": allocating ",
               format_bytes(nbytes), " (", nbytes, " bytes) would bring the host tier to ",
               format_bytes(total), ", over --host-memory-budget ", format_bytes(budget), " (",
               budget, " bytes).\n", pool_.tracker_.breakdown(),
               "hint: the host tier holds the offloaded fp32 masters, optimizer state and the host "
               "copy of the gradient shard (about 16 bytes per parameter with AdamW, divided by "
               "the ranks that shard them): raise --host-memory-budget if the machine has the RAM, "
               "shard over more ranks (--zero-stage 1 or higher on more ranks), or leave "
               "--offload-optimizer off where the device has room (zs-mem --offload optimizer "
               "prints both tiers)");
    }
    return memory_->allocate(nbytes, MemoryCategory::kOther, "host tier");
  }
  void raw_deallocate(void* ptr, size_t nbytes) override {
    memory_->deallocate(ptr, nbytes, MemoryCategory::kOther, "host tier");
  }

 private:
  HostPool& pool_;
  std::unique_ptr<Allocator> memory_;
};

namespace {

std::unique_ptr<Allocator> tier_memory(Device device, bool* pinned) {
  *pinned = false;
  if (device.is_cpu()) {
    // Buffers are made once and kept: no cache (see the header).
    CpuAllocatorOptions options;
    options.caching = false;
    return std::make_unique<CpuAllocator>(nullptr, options);
  }
  const HostMemoryBackend* backend = DeviceTables<HostMemoryBackend>::find(device.kind);
  ZS_CHECK(backend != nullptr && backend->make_pinned != nullptr,
           "offload: the host tier of a rank on ", device.str(),
           " needs pinned host memory from that device's offload backend, which this program does "
           "not have (a build without -DZS_CUDA=ON, or a program that does not link "
           "zs_offload_cuda); build with CUDA or run on --device cpu");
  *pinned = true;
  return backend->make_pinned();
}

}  // namespace

HostPool::HostPool(std::string name, const HostPoolOptions& options)
    : tracker_(std::move(name)), budget_(options.budget) {
  allocator_ = std::make_unique<TierAllocator>(*this, tier_memory(options.device, &pinned_));
}

HostPool::~HostPool() = default;

Allocator& HostPool::allocator() { return *allocator_; }

}  // namespace zs::offload
