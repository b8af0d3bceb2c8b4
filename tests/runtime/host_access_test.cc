// Host/device discipline of Tensor, without a GPU: memory an allocator labels cuda:0
// (tests/support/labelled_allocator.h) is not host-visible, so the host accessors refuse it by
// the tensor's name and device and say what to do, while the device accessors and the host
// helpers (through a fake device table, tests/support/fake_device_kernels.h) still work on it.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/device_kernels.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#include "tests/support/error_text.h"
#include "tests/support/fake_device_kernels.h"
#include "tests/support/labelled_allocator.h"

namespace zs {
namespace {

using testing::FakeDeviceKernels;
using testing::LabelledAllocator;

TEST(HostAccess, AllocatorsSayWhetherTheHostSeesTheirMemory) {
  CpuAllocator cpu(nullptr);
  LabelledAllocator device(Device::cuda(0));
  EXPECT_TRUE(cpu.host_visible());
  EXPECT_FALSE(device.host_visible());
  EXPECT_TRUE(Tensor::empty({2}, DType::kF32, cpu).is_host_visible());
  EXPECT_FALSE(Tensor::empty({2}, DType::kF32, device).is_host_visible());
  EXPECT_FALSE(Tensor().is_host_visible());
}

TEST(HostAccess, HostAccessorsRefuseDeviceMemoryByName) {
  LabelledAllocator device(Device::cuda(0));
  const Tensor t = Tensor::empty({2, 3}, DType::kF32, device, MemoryCategory::kOther, "positions");
  for (const std::string& message :
       {testing::invalid_argument_message([&] { (void)t.data<float>(); }),
        testing::invalid_argument_message([&] { (void)t.raw_data(); }),
        testing::invalid_argument_message([&] { (void)t.view({6}).data<float>(); })}) {
    EXPECT_NE(message.find("host access to tensor 'positions' ["), std::string::npos) << message;
    EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
    EXPECT_NE(message.find("not host-visible"), std::string::npos) << message;
    EXPECT_NE(message.find("Copy it to the host first"), std::string::npos) << message;
  }
  // The device address is what device kernels take: not refused.
  EXPECT_NE(t.raw_device_data(), nullptr);
  EXPECT_EQ(t.device_data<float>(), t.raw_device_data());
}

TEST(HostAccess, ReleasedStillReportsTheRelease) {
  LabelledAllocator device(Device::cuda(0));
  const Tensor t = Tensor::empty({4}, DType::kF32, device, MemoryCategory::kOther, "w");
  t.storage()->release();
  EXPECT_THROW((void)t.raw_data(), ReleasedTensor);
  EXPECT_THROW((void)t.raw_device_data(), ReleasedTensor);
}

TEST(HostAccess, RawHostCopiesRoundTripOnTheCpu) {
  CpuAllocator cpu(nullptr);
  const Tensor t = Tensor::empty({3}, DType::kI32, cpu);
  const std::vector<int32_t> in = {7, -1, 1 << 30};  // beyond float's exact integers
  t.copy_from_host(in.data());
  std::vector<int32_t> out(3);
  t.copy_to_host(out.data());
  EXPECT_EQ(out, in);
}

TEST(HostAccess, HostHelpersGoThroughTheDeviceTable) {
  LabelledAllocator device(Device::cuda(0));
  const Tensor t = Tensor::empty({2, 3}, DType::kI32, device, MemoryCategory::kOther, "ids");
  // No table: refused by name, never touched as host memory.
  EXPECT_THROW(fill_index_mod(t, 3), InvalidArgument);
  EXPECT_THROW(t.copy_to_host(std::vector<int32_t>(6).data()), InvalidArgument);

  FakeDeviceKernels fake;
  fill_index_mod(t, 3);
  std::vector<int32_t> out(6);
  t.copy_to_host(out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
  const std::vector<int32_t> in = {5, 4, 3, 2, 1, 0};
  t.copy_from_host(in.data());
  EXPECT_EQ(t.to_vector(), (std::vector<float>{5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(fake.counts().index_mod, 1);
  EXPECT_EQ(fake.counts().upload, 1);
  EXPECT_EQ(fake.counts().download, 2);
}

TEST(HostAccess, FillIndexModOnTheCpu) {
  CpuAllocator cpu(nullptr);
  const Tensor t = Tensor::empty({2, 4}, DType::kI32, cpu);
  fill_index_mod(t, 4);
  EXPECT_EQ(t.to_vector(), (std::vector<float>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_THROW(fill_index_mod(Tensor::empty({2}, DType::kF32, cpu), 2), InvalidArgument);
  EXPECT_THROW(fill_index_mod(t, 0), InvalidArgument);
  fill_index_mod(Tensor::empty({0}, DType::kI32, cpu), 0);  // nothing to write
}

}  // namespace
}  // namespace zs
