// GPU-free checks of the device dispatch (label unit, in zs_cuda_unit_tests): the runtime's device
// hook table (runtime/device_kernels.h) and the ops' device checks, on tensors from an allocator
// that labels host memory cuda:0 — so they run on a machine without a GPU.
//
// - Without an installed CUDA table, the runtime's host helpers refuse such a tensor by name
//   (never touch it as host memory). No CudaAllocator is ever constructed in this program, so
//   the table is empty unless a test here installs one (and every such test removes it again).
// - With a table installed (a fake one working on the host memory), Tensor::to_vector /
//   copy_from / fill / zeros, accumulate_into and the autograd tape's seed and gradient sums go
//   through it.
// - The ops refuse mixed devices and a cuda:N tensor whose allocator is not a CudaAllocator (it has
//   no stream) — cross_entropy / embedding / attention included, which take their CUDA path like
//   the others — and count_valid_targets reads device targets through the table.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gelu.h"
#include "ops/linear.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/device_kernels.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#include "tests/support/fake_device_kernels.h"
#include "tests/support/labelled_allocator.h"

namespace zs {
namespace {

using testing::FakeDeviceKernels;
using testing::LabelledAllocator;

std::string invalid_argument_text(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "<no InvalidArgument thrown>";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class DeviceDispatchUnit : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(has_device_kernels(Device::Kind::kCUDA))
        << "a CUDA hook table is installed in a program that constructs no CudaAllocator";
  }
  void TearDown() override { current_tape().clear(); }

  Tensor labelled(const Shape& shape, DType dtype = DType::kF32) {
    return Tensor::empty(shape, dtype, cuda0_, MemoryCategory::kOther, "on_cuda0");
  }

  LabelledAllocator cuda0_{Device::cuda(0)};
  CpuAllocator host_{nullptr};
};

TEST_F(DeviceDispatchUnit, HostHelpersRefuseADeviceWithoutKernels) {
  Tensor t = labelled({4});
  for (const auto& [what, call] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"to_vector", [&] { (void)t.to_vector(); }},
           {"copy_from",
            [&] {
              t.copy_from({1, 2, 3, 4});
            }},
           {"fill", [&] { t.fill(1.0f); }},
           {"zero_bytes", [&] { (void)Tensor::zeros({4}, DType::kF32, cuda0_); }},
           {"accumulate_into", [&] { accumulate_into(t, labelled({4})); }},
       }) {
    const std::string message = invalid_argument_text(call);
    EXPECT_TRUE(contains(message, what + " on cuda:0: no cuda:0 kernels are installed")) << message;
    EXPECT_TRUE(contains(message, "zs::cuda::CudaAllocator")) << message;
  }
}

TEST_F(DeviceDispatchUnit, TheCpuKindCannotBeOverridden) {
  const DeviceKernels& table = FakeDeviceKernels::table();
  EXPECT_TRUE(
      contains(invalid_argument_text([&] { install_device_kernels(Device::Kind::kCPU, &table); }),
               "CPU tensors use the runtime's own loops"));
}

TEST_F(DeviceDispatchUnit, HostHelpersAndTheTapeGoThroughTheInstalledTable) {
  FakeDeviceKernels fake;
  Tensor t = Tensor::zeros({3}, DType::kF32, cuda0_, "t");
  EXPECT_EQ(fake.counts().zero, 1);
  t.copy_from({1.0f, 2.0f, 3.0f});
  EXPECT_EQ(fake.counts().upload, 1);
  EXPECT_EQ(t.to_vector(), (std::vector<float>{1.0f, 2.0f, 3.0f}));
  EXPECT_EQ(fake.counts().download, 1);
  Tensor u = labelled({3});
  u.fill(0.5f);
  EXPECT_EQ(fake.counts().fill, 1);
  accumulate_into(t, u);
  EXPECT_EQ(fake.counts().accumulate, 1);
  EXPECT_EQ(t.to_vector(), (std::vector<float>{1.5f, 2.5f, 3.5f}));
  // The tape: the loss seed is filled and a second gradient is summed through the table.
  Tensor leaf = Tensor::zeros({1}, DType::kF32, cuda0_, "leaf").set_requires_grad(true);
  Tensor loss = leaf.view({1});
  Tensor again = leaf.view({1});
  Tensor total = Tensor::zeros({1}, DType::kF32, cuda0_, "total");
  record_op("sum of two views", {&loss, &again}, {&total}, [](BackwardContext& ctx) {
    Tensor g = ctx.grad_output(0);
    ctx.alias_or_accumulate_input_grad(0, g);
    ctx.alias_or_accumulate_input_grad(1, g);
  });
  fake.reset_counts();
  backward(total, 3.0f);
  EXPECT_EQ(fake.counts().fill, 1);  // the seed
  EXPECT_GE(fake.counts().accumulate, 1);
  EXPECT_EQ(leaf.grad().to_vector(), (std::vector<float>{6.0f}));
}

TEST_F(DeviceDispatchUnit, MixedDevicesAreRefusedForHelpersAndOps) {
  FakeDeviceKernels fake;
  Tensor on_device = labelled({2, 3});
  Tensor on_host = Tensor::zeros({2, 3}, DType::kF32, host_, "on_host");
  EXPECT_TRUE(contains(invalid_argument_text([&] { accumulate_into(on_device, on_host); }),
                       "both must be on one device"));
  Tensor weight = Tensor::zeros({4, 3}, DType::kF32, host_, "weight");
  const std::string message = invalid_argument_text([&] { (void)ops::linear(on_device, weight); });
  EXPECT_TRUE(contains(message, "linear: 'on_cuda0' [2, 3] fp32 is on cuda:0 but 'weight'"))
      << message;
  EXPECT_TRUE(contains(message, "every tensor of an op must be on one device")) << message;
  EXPECT_TRUE(contains(invalid_argument_text([&] { (void)ops::add(on_host, on_device); }),
                       "every tensor of an op must be on one device"));
}

TEST_F(DeviceDispatchUnit, OpsNeedACudaAllocatorForTheirStream) {
  Tensor x = labelled({8});
  const std::string message = invalid_argument_text([&] { (void)ops::gelu(x); });
  EXPECT_TRUE(contains(message,
                       "gelu: tensor 'on_cuda0' [8] fp32 is labelled cuda:0 but its "
                       "allocator is not a zs::cuda::CudaAllocator"))
      << message;
  EXPECT_TRUE(contains(invalid_argument_text([&] { (void)ops::sum(x); }),
                       "is not a zs::cuda::CudaAllocator"));
}

TEST_F(DeviceDispatchUnit, NnOpsTakeTheCudaPathAndNeedACudaAllocator) {
  // cross_entropy, embedding and attention pass the dispatch on cuda:0 and fail only where their
  // CUDA path starts: the tensors' allocator must be a CudaAllocator (for its stream).
  const std::string not_cuda_allocator =
      "is labelled cuda:0 but its allocator is not a "
      "zs::cuda::CudaAllocator";
  Tensor logits = labelled({2, 5});
  Tensor targets = labelled({2}, DType::kI32);
  std::string message = invalid_argument_text([&] { (void)ops::cross_entropy(logits, targets); });
  EXPECT_TRUE(
      contains(message, "cross_entropy: tensor 'on_cuda0' [2, 5] fp32 " + not_cuda_allocator))
      << message;
  Tensor table = labelled({5, 4});
  Tensor ids = labelled({3}, DType::kI32);
  message = invalid_argument_text([&] { (void)ops::embedding(table, ids); });
  EXPECT_TRUE(contains(message, "embedding: tensor 'on_cuda0' [5, 4] fp32 " + not_cuda_allocator))
      << message;
  Tensor qkv = labelled({1, 4, 24});
  Tensor lengths = labelled({1}, DType::kI32);
  for (const auto& call : std::vector<std::function<void()>>{
           [&] { (void)ops::attention(qkv, 2, true); },
           [&] { (void)ops::attention(qkv, 2, false, lengths); },
       }) {
    message = invalid_argument_text(call);
    EXPECT_TRUE(
        contains(message, "attention: tensor 'on_cuda0' [1, 4, 24] fp32 " + not_cuda_allocator))
        << message;
  }
  // Their integer arguments must be on the floats' device: a CPU one is refused by name.
  Tensor host_targets = Tensor::zeros({2}, DType::kI32, host_, "host_targets");
  message = invalid_argument_text([&] { (void)ops::cross_entropy(logits, host_targets); });
  EXPECT_TRUE(contains(message, "every tensor of an op must be on one device")) << message;
}

TEST_F(DeviceDispatchUnit, CountValidTargetsReadsDeviceTargetsThroughTheTable) {
  Tensor targets = labelled({6}, DType::kI32);
  const int32_t values[6] = {3, -100, 0, -100, 7, 2};
  std::memcpy(targets.raw_device_data(), values, sizeof(values));  // host memory under the label
  // No table: refused by name, never read as host memory.
  const std::string message =
      invalid_argument_text([&] { (void)ops::count_valid_targets(targets); });
  EXPECT_TRUE(contains(message, "on cuda:0: no cuda:0 kernels are installed")) << message;
  // With the (fake) table: one download of the int32 values, counted exactly as on the CPU.
  FakeDeviceKernels fake;
  EXPECT_EQ(ops::count_valid_targets(targets), 4);
  EXPECT_EQ(fake.counts().download, 1);
  EXPECT_EQ(ops::count_valid_targets(targets, 7), 5);
}

}  // namespace
}  // namespace zs
