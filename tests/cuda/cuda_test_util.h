// Support for the CUDA tests (header-only): the skip rule; CudaTest, a fixture with a stream, a
// tracked stream-ordered device allocator and a copy stream to move tensors on and off the GPU;
// and CudaOpTest, CudaTest plus what the tests of device ops against the CPU ops share (random
// host inputs in any float dtype, copies to the GPU, the element-wise comparisons with the CPU
// result under a Tolerance, raw bytes).
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

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/copy.h"
#include "runtime/cuda/stream.h"
#include "runtime/memory_tracker.h"
#include "runtime/tensor.h"
#include "tests/support/gradcheck.h"
#include "tests/support/op_test.h"

#define ZS_SKIP_WITHOUT_CUDA()                                      \
  do {                                                              \
    if (::zs::cuda::cuda_device_count() == 0) {                     \
      GTEST_SKIP() << "no CUDA device: skipped (compiled only) ["   \
                   << ::zs::cuda::cuda_unavailable_reason() << "]"; \
    }                                                               \
  } while (0)

namespace zs::testing {

// The float dtypes the CUDA kernels take.
inline constexpr DType kFloatDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// How a device result must match the CPU's (CudaOpTest::expect_match): the same bits, or within
// rel·|cpu| + abs, plus one storage ulp for fp16/bf16.
struct Tolerance {
  bool bits = false;
  double rel = 0.0;
  double abs = 0.0;
};
inline constexpr Tolerance kBits{true, 0.0, 0.0};

// Targets uniform in [0, vocab), every fifth row ignore_index.
inline std::vector<int32_t> random_targets(int64_t rows, int64_t vocab, int32_t ignore_index,
                                           uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    targets[static_cast<size_t>(r)] = r % 5 == 2 ? ignore_index : dist(gen);
  }
  return targets;
}

// Embedding ids in [0, vocab): mostly from a few small ids, so rows repeat many times (the
// scatter-add's runs), plus every fourth from the whole table.
inline std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> hot(
      0, static_cast<int32_t>(std::min<int64_t>(vocab, 20) - 1));
  std::uniform_int_distribution<int32_t> any(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) ids[static_cast<size_t>(p)] = p % 4 == 3 ? any(gen) : hot(gen);
  return ids;
}

// Sets ZS_CUDNN_ATTENTION for the scope and restores the previous value.
class ScopedCudnnSwitch {
 public:
  explicit ScopedCudnnSwitch(const char* value) {
    if (const char* previous = std::getenv(kName)) previous_ = previous;
    ::setenv(kName, value, 1);
  }
  ~ScopedCudnnSwitch() {
    if (previous_) {
      ::setenv(kName, previous_->c_str(), 1);
    } else {
      ::unsetenv(kName);
    }
  }
  ScopedCudnnSwitch(const ScopedCudnnSwitch&) = delete;
  ScopedCudnnSwitch& operator=(const ScopedCudnnSwitch&) = delete;

 private:
  static constexpr const char* kName = "ZS_CUDNN_ATTENTION";
  std::optional<std::string> previous_;
};

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

// CudaTest for device ops compared with the CPU ops through autograd: the thread's tape is
// dropped after each test (it may hold tensors of this fixture's allocators).
class CudaOpTest : public CudaTest {
 protected:
  void TearDown() override {
    current_tape().clear();
    CudaTest::TearDown();
  }

  // Uniform values in [lo, hi) drawn in fp32 (random_tensor's values for `seed`), stored as
  // `dtype` (rounded to nearest even when 16-bit), on the host.
  Tensor random_host(const Shape& shape, uint32_t seed, float lo, float hi, DType dtype,
                     bool requires_grad = false) {
    Tensor fp32 = random_tensor(shape, host_allocator_, seed, lo, hi, false);
    return dtype == DType::kF32 ? fp32.set_requires_grad(requires_grad)
                                : converted(fp32, dtype, requires_grad);
  }

  // |got − want| ≤ rel·|want| + abs (+ one storage ulp for fp16/bf16) element-wise; infinities
  // must match exactly. Reports the first 10 elements off.
  static void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                           DType dtype, double rel, double abs, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    int reported = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::isinf(want[i]) && got[i] == want[i]) continue;
      double tol = rel * std::fabs(want[i]) + abs;
      if (dtype != DType::kF32) tol += one_ulp_tolerance(dtype, want[i]);
      if (!(std::fabs(got[i] - want[i]) <= tol) && reported++ < 10) {
        ADD_FAILURE() << what << " (" << dtype_name(dtype) << ") element " << i << ": got "
                      << got[i] << ", CPU " << want[i] << ", tolerance " << tol;
      }
    }
  }

  // The same values on the GPU (Tensor::copy_from: a synchronous upload on the allocator stream),
  // same name; exact for int32 below 2^24 (ids, targets, lengths).
  Tensor to_gpu(const Tensor& host, bool requires_grad = false) {
    Tensor device = Tensor::empty(host.shape(), host.dtype(), *device_allocator_,
                                  MemoryCategory::kOther, host.name());
    device.copy_from(host.to_vector());
    device.set_requires_grad(requires_grad);
    return device;
  }

  // A tensor of a device op against the same op's on the CPU: defined, same shape and dtype, on
  // CUDA, and every element within `tol`. Reports the first 8 elements off.
  static void expect_match(const Tensor& got, const Tensor& want, Tolerance tol,
                           const std::string& what) {
    ASSERT_TRUE(got.defined() && want.defined()) << what;
    ASSERT_EQ(got.shape(), want.shape()) << what;
    ASSERT_EQ(got.dtype(), want.dtype()) << what;
    EXPECT_TRUE(got.device().is_cuda()) << what;
    const std::vector<float> g = got.to_vector();
    const std::vector<float> w = want.to_vector();
    int reported = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      bool ok = false;
      double bound = 0.0;
      if (tol.bits) {
        ok = std::memcmp(&g[i], &w[i], sizeof(float)) == 0;
      } else {
        bound = tol.rel * std::fabs(w[i]) + tol.abs;
        if (want.dtype() != DType::kF32) bound += one_ulp_tolerance(want.dtype(), w[i]);
        ok = std::fabs(static_cast<double>(g[i]) - w[i]) <= bound;
      }
      if (!ok && reported++ < 8) {
        ADD_FAILURE() << what << " (" << dtype_name(want.dtype()) << ") element " << i << ": cuda "
                      << g[i] << ", cpu " << w[i]
                      << (tol.bits ? " (expected the same bits)"
                                   : ", tolerance " + std::to_string(bound));
      }
    }
  }

  // The bytes of a host tensor, for bit-for-bit comparisons.
  static std::vector<unsigned char> bytes_of(const Tensor& host) {
    std::vector<unsigned char> bytes(host.nbytes());
    if (!bytes.empty()) std::memcpy(bytes.data(), host.raw_data(), bytes.size());
    return bytes;
  }
};

}  // namespace zs::testing
