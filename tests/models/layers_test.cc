// models::SelfAttention and models::Block with a shared PaddingState: without one, or with one
// that holds no lengths, the output equals the unpadded layer bit for bit; with lengths, tokens
// after a sequence's length change none of its valid positions; and the lengths are read at each
// forward, so the model that owns the state can change them between calls.
#include "models/layers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/error.h"
#include "runtime/rng.h"

namespace zs::models {
namespace {

Tensor uniform(const Shape& shape, uint64_t seed, Allocator& allocator) {
  Tensor t = Tensor::empty(shape, DType::kF32, allocator, "x");
  std::vector<float> values(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<float>(random_bits(rng_key(seed, "x"), i) % 2001) / 1000.0f - 1.0f;
  }
  t.copy_from(values);
  return t;
}

Tensor int_tensor(const std::vector<int32_t>& values, Allocator& allocator) {
  Tensor t =
      Tensor::empty({static_cast<int64_t>(values.size())}, DType::kI32, allocator, "lengths");
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

constexpr int64_t kBatch = 3, kSeq = 5, kWidth = 8, kHeads = 2;

TEST(Layers, WithoutLengthsAPaddedBlockEqualsThePlainOneBitForBit) {
  CpuAllocator allocator(nullptr);
  NoGradScope no_grad;
  Tensor x = uniform({kBatch, kSeq, kWidth}, 1, allocator);
  for (bool causal : {true, false}) {
    Block plain(kWidth, kHeads, causal, 0.02f);
    auto padding = std::make_shared<PaddingState>();  // lengths undefined: no padding
    Block padded(kWidth, kHeads, causal, 0.02f, padding);
    materialize(plain, allocator, 7);
    materialize(padded, allocator, 7);  // same names and seed: same parameters
    EXPECT_EQ(padded(x).to_vector(), plain(x).to_vector()) << "causal " << causal;
    // Full lengths mask nothing either.
    padding->lengths = int_tensor({kSeq, kSeq, kSeq}, allocator);
    EXPECT_EQ(padded(x).to_vector(), plain(x).to_vector()) << "causal " << causal;
  }
}

TEST(Layers, PaddedPositionsDoNotReachValidOnesAndLengthsAreReadAtEachForward) {
  CpuAllocator allocator(nullptr);
  NoGradScope no_grad;
  auto padding = std::make_shared<PaddingState>();
  SelfAttention attn(kWidth, kHeads, /*causal=*/false, 0.02f, padding);
  materialize(attn, allocator, 3);
  const std::vector<int32_t> lens = {5, 2, 1};
  padding->lengths = int_tensor(lens, allocator);
  Tensor x = uniform({kBatch, kSeq, kWidth}, 2, allocator);
  const std::vector<float> reference = attn(x).to_vector();
  // Change everything after each sequence's length: its valid positions stay bit for bit.
  std::vector<float> changed = x.to_vector();
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t t = lens[b]; t < kSeq; ++t) {
      for (int64_t c = 0; c < kWidth; ++c) changed[(b * kSeq + t) * kWidth + c] += 0.5f;
    }
  }
  Tensor x_changed = Tensor::empty({kBatch, kSeq, kWidth}, DType::kF32, allocator, "x");
  x_changed.copy_from(changed);
  const std::vector<float> got = attn(x_changed).to_vector();
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t t = 0; t < lens[b]; ++t) {
      for (int64_t c = 0; c < kWidth; ++c) {
        const size_t i = static_cast<size_t>((b * kSeq + t) * kWidth + c);
        EXPECT_EQ(got[i], reference[i]) << "b " << b << " t " << t << " c " << c;
      }
    }
  }
  // The state is read at forward time: dropping the lengths makes the padded keys count again.
  padding->lengths = Tensor();
  EXPECT_NE(attn(x_changed).to_vector(), got);
  // Bad lengths in the state fail in ops::attention with its message.
  padding->lengths = int_tensor({5, 6, 1}, allocator);
  EXPECT_THROW(attn(x), InvalidArgument);
}

}  // namespace
}  // namespace zs::models
