// Support for the CUDA tests (header-only): the skip rule, and a fixture with a stream, a
// tracked stream-ordered device allocator and a copy stream to move tensors on and off the GPU.
//
// Skip rule (STYLE.md, "GPU tests skip only when no GPU is present and print that they did"):
// every GPU test starts with ZS_SKIP_WITHOUT_CUDA(), which skips with the line
// "no CUDA device: skipped (compiled only)" plus CUDA's reason when cuda_device_count() == 0.
// On a machine with a GPU the same tests run and compare each kernel with the CPU op.
//
// Stream order in the fixture: device tensors are allocated on stream_ (the allocator's stream);
// upload() orders the copy after stream_ (the allocation) and stream_ after the copy; download()
// orders the copy after stream_ (the kernels that wrote the tensor) and waits for it. So tests
// can launch every kernel on stream_ without further synchronization.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "runtime/allocator.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/copy.h"
#include "runtime/cuda/stream.h"
#include "runtime/memory_tracker.h"
#include "runtime/tensor.h"

#define ZS_SKIP_WITHOUT_CUDA()                                      \
  do {                                                              \
    if (::zs::cuda::cuda_device_count() == 0) {                     \
      GTEST_SKIP() << "no CUDA device: skipped (compiled only) ["   \
                   << ::zs::cuda::cuda_unavailable_reason() << "]"; \
    }                                                               \
  } while (0)

namespace zs::testing {

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ZS_SKIP_WITHOUT_CUDA();
    stream_ = std::make_unique<cuda::Stream>(0);
    device_allocator_ = std::make_unique<cuda::CudaAllocator>(*stream_, &device_tracker_);
    copies_ = std::make_unique<cuda::CopyStream>(0);
  }
  void TearDown() override {
    if (stream_) stream_->synchronize();
  }

  // A device copy of a host tensor, ready for kernels on stream_.
  Tensor upload(const Tensor& host) {
    Tensor device = Tensor::empty(host.shape(), host.dtype(), *device_allocator_,
                                  MemoryCategory::kOther, host.name());
    copies_->order_after(*stream_);
    copies_->copy(device, host);
    copies_->order_before(*stream_);
    return device;
  }
  // A new device tensor (contents undefined) on stream_.
  Tensor device_empty(const Shape& shape, DType dtype) {
    return Tensor::empty(shape, dtype, *device_allocator_, MemoryCategory::kOther, "device");
  }
  // A host copy of a device tensor after the work enqueued on stream_ so far.
  Tensor download(const Tensor& device) {
    copies_->order_after(*stream_);
    return cuda::to_host(device, host_allocator_, *copies_);
  }

  MemoryTracker host_tracker_{"cpu"};
  CpuAllocator host_allocator_{&host_tracker_};
  MemoryTracker device_tracker_{"cuda:0"};
  // Declared after the trackers they charge, destroyed before them.
  std::unique_ptr<cuda::Stream> stream_;
  std::unique_ptr<cuda::CudaAllocator> device_allocator_;
  std::unique_ptr<cuda::CopyStream> copies_;
};

}  // namespace zs::testing
