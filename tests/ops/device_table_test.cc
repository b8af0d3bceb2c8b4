// Tests of the ops' device table (ops/device_ops.h) without a backend: with the table's cuda slot
// empty (as in a build without CUDA; a CUDA build's slot is emptied for the test's scope and
// restored), every op refuses a tensor labelled cuda:0 (host memory under a cuda:0 label) with
// InvalidArgument naming the op, the tensor and its device, at its argument checks — before it
// allocates, reads or writes anything. Runs in every build; no GPU needed.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/device_ops.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gelu.h"
#include "ops/layernorm.h"
#include "ops/linear.h"
#include "ops/select.h"
#include "runtime/device_kernels.h"
#include "runtime/tensor.h"
#include "tests/support/error_text.h"
#include "tests/support/labelled_allocator.h"

namespace zs {
namespace {

using testing::contains;
using testing::invalid_argument_message;
using testing::LabelledAllocator;

// Empties the cuda slot of the ops' device table for a scope and restores what was there.
class NoCudaOps {
 public:
  NoCudaOps() : saved_(DeviceTables<ops::detail::DeviceOps>::find(Device::Kind::kCUDA)) {
    DeviceTables<ops::detail::DeviceOps>::install(Device::Kind::kCUDA, nullptr);
  }
  ~NoCudaOps() { DeviceTables<ops::detail::DeviceOps>::install(Device::Kind::kCUDA, saved_); }

 private:
  const ops::detail::DeviceOps* saved_;
};

TEST(OpsDeviceTable, EveryOpRefusesADeviceWithoutAnEntryByName) {
  NoCudaOps no_cuda;
  LabelledAllocator cuda0(Device::cuda(0));
  auto labelled = [&](const Shape& shape, DType dtype = DType::kF32) {
    return Tensor::empty(shape, dtype, cuda0, MemoryCategory::kOther, "on_cuda0");
  };
  Tensor x = labelled({2, 6});
  Tensor row = labelled({6});
  Tensor targets = labelled({2}, DType::kI32);
  Tensor qkv = labelled({1, 2, 6});
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"add", [&] { (void)ops::add(x, x); }},
      {"add_bias", [&] { (void)ops::add_bias(x, row); }},
      {"scale", [&] { (void)ops::scale(x, 2.0f); }},
      {"mul", [&] { (void)ops::mul(x, x); }},
      {"tanh", [&] { (void)ops::tanh(x); }},
      {"dropout",
       [&] {
         (void)ops::dropout(x, 0.5f, RngKey{1, 2}, true);
       }},
      {"cast", [&] { (void)ops::cast(x, DType::kBF16); }},
      {"sum", [&] { (void)ops::sum(x); }},
      {"mean", [&] { (void)ops::mean(x); }},
      {"sum_of_squares", [&] { (void)ops::sum_of_squares(x); }},
      {"scale_", [&] { ops::scale_(x, 2.0f); }},
      {"fill_", [&] { ops::fill_(x, 1.0f); }},
      {"copy_",
       [&] {
         ops::copy_(x, labelled({2, 6}));
       }},
      {"all_finite", [&] { (void)ops::all_finite(x); }},
      {"gelu", [&] { (void)ops::gelu(x); }},
      {"select", [&] { (void)ops::select(x, 0, 1); }},
      {"layernorm", [&] { (void)ops::layernorm(x, row, row); }},
      {"linear", [&] { (void)ops::linear(x, x); }},
      {"matmul", [&] { (void)ops::matmul(x, x, false, true); }},
      {"embedding", [&] { (void)ops::embedding(x, targets); }},
      {"cross_entropy", [&] { (void)ops::cross_entropy(x, targets); }},
      {"attention", [&] { (void)ops::attention(qkv, 1, true); }},
  };
  for (const auto& [op, call] : calls) {
    const std::string message = invalid_argument_message(call);
    EXPECT_TRUE(contains(message, op + ": tensor 'on_cuda0'")) << op << ": " << message;
    EXPECT_TRUE(contains(message, "is on cuda:0, but this build has no cuda:0 backend for the ops"))
        << op << ": " << message;
  }
}

}  // namespace
}  // namespace zs
