// The models never dereference device memory on the host, checked without a GPU: ids, lengths,
// labels and parameters live in memory labelled cuda:0 (tests/support/labelled_allocator.h: not
// host-visible, so any host accessor on it throws "host access ... not host-visible"), and a fake
// device table (tests/support/fake_device_kernels.h) stands in for the CUDA kernels. The GPT and
// BERT forwards must build their position ids (and BERT its lengths) on the device or through
// host copies; they then stop at the first op, which refuses memory that is only labelled cuda:0
// (it has no CUDA stream) — never at a host access. BERT's lengths_from_padding and
// count_correct run to the end through the table.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/bert.h"
#include "models/gpt.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#include "tests/support/error_text.h"
#include "tests/support/fake_device_kernels.h"
#include "tests/support/labelled_allocator.h"

namespace zs::models {
namespace {

using testing::FakeDeviceKernels;
using testing::LabelledAllocator;

Tensor device_ints(const std::vector<int32_t>& values, const Shape& shape, Allocator& allocator,
                   const char* name) {
  Tensor t = Tensor::empty(shape, DType::kI32, allocator, MemoryCategory::kOther, name);
  t.copy_from_host(values.data());
  return t;
}

class ModelDeviceInputs : public ::testing::Test {
 protected:
  FakeDeviceKernels fake_;
  LabelledAllocator device_{Device::cuda(0)};
};

TEST_F(ModelDeviceInputs, GptBuildsPositionsOnTheDevice) {
  GptConfig config;
  config.vocab_size = 16;
  config.context = 8;
  config.width = 8;
  config.n_head = 2;
  config.n_layer = 1;
  Gpt model(config);
  materialize(model, device_, 1);
  const Tensor ids = device_ints({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {2, 5}, device_, "ids");
  const std::string message = testing::error_message<Error>([&] { (void)model(ids); });
  EXPECT_EQ(message.find("host access"), std::string::npos) << message;
  EXPECT_NE(message.find("embedding"), std::string::npos) << message;
  EXPECT_EQ(fake_.counts().index_mod_tensors, std::vector<std::string>{"positions"});
}

BertConfig tiny_bert() {
  BertConfig config;
  config.vocab_size = 11;
  config.context = 6;
  config.width = 8;
  config.n_head = 2;
  config.n_layer = 1;
  config.num_classes = 3;
  return config;
}

TEST_F(ModelDeviceInputs, BertReadsLengthsThroughCopiesAndBuildsPositionsOnTheDevice) {
  BertClassifier model(tiny_bert());
  materialize(model, device_, 1);
  const Tensor ids = device_ints({1, 2, 3, 0, 4, 5, 0, 0}, {2, 4}, device_, "ids");
  const Tensor lengths = device_ints({3, 2}, {2}, device_, "lengths");
  for (const Tensor& given : {lengths, Tensor()}) {  // given, and from the padding
    const int before = fake_.counts().index_mod;
    const std::string message =
        testing::error_message<Error>([&] { (void)model.logits(ids, given); });
    EXPECT_EQ(message.find("host access"), std::string::npos) << message;
    EXPECT_NE(message.find("embedding"), std::string::npos) << message;
    EXPECT_EQ(fake_.counts().index_mod, before + 1);
    EXPECT_EQ(fake_.counts().index_mod_tensors.back(), "positions");
  }
  // Out-of-range lengths are still refused with the model's own message.
  const Tensor bad = device_ints({0, 2}, {2}, device_, "lengths");
  const std::string message = testing::error_message<Error>([&] { (void)model.logits(ids, bad); });
  EXPECT_NE(message.find("bert: lengths[0] = 0"), std::string::npos) << message;
}

TEST_F(ModelDeviceInputs, BertLengthsAndAccuracyOnDeviceTensors) {
  const Tensor ids = device_ints({1, 2, 3, 0, 4, 0, 0, 0, 0, 0, 0, 0}, {3, 4}, device_, "ids");
  const Tensor lengths = lengths_from_padding(ids, /*pad_id=*/0);
  EXPECT_EQ(lengths.device(), Device::cuda(0));
  std::vector<int32_t> values(3);
  lengths.copy_to_host(values.data());
  EXPECT_EQ(values, (std::vector<int32_t>{3, 1, 1}));

  Tensor logits = Tensor::empty({3, 2}, DType::kF32, device_, MemoryCategory::kOther, "logits");
  logits.copy_from({0.1f, 0.9f, 0.8f, 0.2f, 0.3f, 0.7f});  // arg-max 1, 0, 1
  EXPECT_EQ(count_correct(logits, device_ints({1, 1, 1}, {3}, device_, "labels")), 2);
}

}  // namespace
}  // namespace zs::models
