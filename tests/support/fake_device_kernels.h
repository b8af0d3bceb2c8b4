// A fake CUDA entry of the runtime's device hook table (runtime/device_kernels.h), header-only,
// for GPU-free tests of code that must treat a tensor as device memory: paired with
// tests/support/labelled_allocator.h (host memory labelled cuda:N, not host-visible), the hooks
// reach the bytes the way a device kernel would — through Tensor::raw_device_data(), never the
// host accessors — and count their calls, so a test can check that code under test went through
// the table instead of dereferencing device memory on the host. fp32 and int32 only.
//
// FakeDeviceKernels installs the table for its scope and removes it again; one at a time per
// process (the table is a process-wide slot), so use it from one test thread.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/device_kernels.h"
#include "runtime/error.h"
#include "runtime/tensor.h"

namespace zs::testing {

struct FakeDeviceCalls {
  int download = 0, upload = 0, fill = 0, zero = 0, accumulate = 0, index_mod = 0;
  std::vector<std::string> index_mod_tensors;  // the names fill_index_mod wrote
};

class FakeDeviceKernels {
 public:
  FakeDeviceKernels() {
    calls() = FakeDeviceCalls{};
    install_device_kernels(Device::Kind::kCUDA, &table());
  }
  ~FakeDeviceKernels() { install_device_kernels(Device::Kind::kCUDA, nullptr); }
  FakeDeviceKernels(const FakeDeviceKernels&) = delete;
  FakeDeviceKernels& operator=(const FakeDeviceKernels&) = delete;

  const FakeDeviceCalls& counts() const { return calls(); }
  void reset_counts() { calls() = FakeDeviceCalls{}; }

  // The table itself (installed by the constructor).
  static const DeviceKernels& table() {
    static const DeviceKernels instance = [] {
      DeviceKernels t;
      t.name = "fake cuda";
      t.download = &download;
      t.upload = &upload;
      t.fill = &fill;
      t.zero_bytes = &zero_bytes;
      t.accumulate = &accumulate;
      t.fill_index_mod = &fill_index_mod;
      return t;
    }();
    return instance;
  }

 private:
  static FakeDeviceCalls& calls() {
    static FakeDeviceCalls instance;
    return instance;
  }

  static void download(const Tensor& src, void* host) {
    ++calls().download;
    std::memcpy(host, src.raw_device_data(), src.nbytes());
  }
  static void upload(const Tensor& dst, const void* host) {
    ++calls().upload;
    std::memcpy(dst.raw_device_data(), host, dst.nbytes());
  }
  static void fill(const Tensor& dst, float value) {
    ++calls().fill;
    if (dst.dtype() == DType::kI32) {
      int32_t* p = dst.device_data<int32_t>();
      for (int64_t i = 0; i < dst.numel(); ++i) p[i] = static_cast<int32_t>(value);
      return;
    }
    float* p = dst.device_data<float>();
    for (int64_t i = 0; i < dst.numel(); ++i) p[i] = value;
  }
  static void zero_bytes(const Tensor& dst) {
    ++calls().zero;
    std::memset(dst.raw_device_data(), 0, dst.nbytes());
  }
  static void accumulate(const Tensor& dst, const Tensor& src) {
    ++calls().accumulate;
    float* d = dst.device_data<float>();
    const float* s = src.device_data<float>();
    for (int64_t i = 0; i < dst.numel(); ++i) d[i] += s[i];
  }
  static void fill_index_mod(const Tensor& dst, int64_t period) {
    ++calls().index_mod;
    calls().index_mod_tensors.push_back(dst.name());
    int32_t* p = dst.device_data<int32_t>();
    for (int64_t i = 0; i < dst.numel(); ++i) p[i] = static_cast<int32_t>(i % period);
  }
};

}  // namespace zs::testing
