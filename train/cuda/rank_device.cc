// The CUDA entry of the engine's rank-device registry (train/device.h): RankDevice on one GPU —
// its compute stream, a CudaAllocator on it charged to the rank's tracker, a copy stream and
// pinned staging for the batches. Built only with ZS_CUDA, as the library zs_train_cuda, which
// installs its entry from a static initializer; its INTERFACE link option
// --undefined=zs_train_cuda_anchor pulls this file into every program that links it (zs_train
// does), see runtime/device_kernels.h, "Registration". zs_train_cuda links only the runtime's
// CUDA library: train/device.h is an interface it implements, not a library it calls.
//
// Thread-safety: one RankDevice per rank, used by the rank's thread; the entry is immutable.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cuda/allocator.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/copy.h"
#include "runtime/cuda/stream.h"
#include "runtime/device_kernels.h"
#include "runtime/error.h"
#include "train/device.h"

// The symbol the linker is told to resolve (train/cuda/CMakeLists.txt).
extern "C" const char zs_train_cuda_anchor = 0;

namespace zs::train {
namespace {

// Offload's host copies (runtime/host_copies.h) on the rank's copy stream: a download waits for
// the compute stream's work so far on the device; the compute stream's later work waits for an
// upload; wait() blocks the host until the copy stream is done. The host tier is pinned
// (offload/host_pool.h), so both return at once.
class CudaHostCopies final : public HostCopies {
 public:
  CudaHostCopies(cuda::Stream& compute, cuda::CopyStream& copies)
      : compute_(compute), copies_(copies) {}
  void download(const Tensor& device, void* host) override {
    copies_.order_after(compute_);
    if (device.nbytes() > 0) copies_.copy(host, device.raw_device_data(), device.nbytes());
  }
  void upload(const Tensor& device, const void* host) override {
    // After the compute stream's earlier work: the destination may be memory the allocator just
    // handed back (a released unit's buffer) that queued kernels still read, or a buffer an
    // all-gather ordered on the compute stream still reads.
    copies_.order_after(compute_);
    if (device.nbytes() > 0) copies_.copy(device.raw_device_data(), host, device.nbytes());
    copies_.order_before(compute_);
  }
  void wait() override { copies_.synchronize(); }

 private:
  cuda::Stream& compute_;
  cuda::CopyStream& copies_;
};

class CudaRankDevice final : public RankDevice {
 public:
  // Makes `index` the current device of the rank's thread (for good: launches without a guard
  // use it, and guards elsewhere restore it rather than device 0 — which would also create a
  // context on GPU 0 in every rank's process).
  CudaRankDevice(int index, MemoryTracker* tracker)
      : current_(make_current(index)),
        stream_(index),
        allocator_(stream_, tracker),
        copies_(index),
        host_copies_(stream_, copies_),
        pinned_(nullptr) {}

  // Copies still reading a staging buffer finish before it is freed.
  ~CudaRankDevice() override {
    for (Staging& s : staging_) {
      if (s.done) s.done->synchronize();
    }
  }

  Device device() const override { return stream_.zs_device(); }
  std::string name() const override {
    cudaDeviceProp properties{};
    ZS_CUDA_CHECK(cudaGetDeviceProperties(&properties, current_));
    return properties.name;
  }
  Allocator& allocator() override { return allocator_; }
  HostCopies& host_copies() override { return host_copies_; }
  comm::StreamRef stream() const override {
    return comm::StreamRef{stream_.zs_device(), static_cast<void*>(stream_.get())};
  }

  Tensor upload(const Tensor& host, size_t slot, const std::string& name) override {
    ZS_CHECK(host.device().is_cpu(), "upload: ", host.describe(), " is not a host tensor");
    if (slot >= staging_.size()) staging_.resize(slot + 1);
    Staging& s = staging_[slot];
    const size_t nbytes = host.nbytes();
    // The buffer's previous copy must be done before the host overwrites it (in a step it is
    // long done: slots are per micro-batch and the engine reads the loss back once per step).
    if (s.done) s.done->synchronize();
    if (!s.buffer || s.buffer->nbytes() < nbytes) {
      s.buffer = Storage::create(pinned_, std::max<size_t>(nbytes, 1), MemoryCategory::kOther,
                                 "batch staging " + std::to_string(slot));
    }
    if (nbytes > 0) std::memcpy(s.buffer->data(), host.raw_data(), nbytes);
    Tensor device = Tensor::empty(host.shape(), host.dtype(), allocator_, name);
    // The new memory is ordered on the compute stream (stream-ordered allocation): the copy
    // stream first catches up with it, then the compute stream waits for the copy.
    copies_.order_after(stream_);
    if (nbytes > 0) copies_.copy(device.raw_device_data(), s.buffer->data(), nbytes);
    copies_.order_before(stream_);
    if (!s.done) s.done = std::make_unique<cuda::Event>(stream_.device());
    s.done->record(copies_.stream());
    return device;
  }

 private:
  static int make_current(int index) {
    ZS_CUDA_CHECK(cudaSetDevice(index));
    return index;
  }

  struct Staging {
    std::shared_ptr<Storage> buffer;  // pinned host memory
    std::unique_ptr<cuda::Event> done;
  };
  int current_;  // the device made current first (make_current)
  cuda::Stream stream_;
  cuda::CudaAllocator allocator_;
  cuda::CopyStream copies_;
  CudaHostCopies host_copies_;        // offload's copies, on copies_
  cuda::PinnedHostAllocator pinned_;  // untracked: host memory, not the GPU's
  std::vector<Staging> staging_;      // destroyed first (declared last)
};

std::unique_ptr<RankDevice> make_cuda_rank_device(int index, MemoryTracker* tracker) {
  return std::make_unique<CudaRankDevice>(index, tracker);
}

const RankDeviceBackend kCudaBackend{"cuda", cuda::cuda_device_count, make_cuda_rank_device};

const bool kRegistered = [] {
  DeviceTables<RankDeviceBackend>::install(Device::Kind::kCUDA, &kCudaBackend);
  return true;
}();

}  // namespace

}  // namespace zs::train
