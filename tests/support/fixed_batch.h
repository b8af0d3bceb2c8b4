// The loss of a GPT on a fixed batch, for tests that compare models (loaded, sharded, imported)
// by the loss they give.
#pragma once

#include <cstdint>

#include "models/gpt.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/tensor.h"

namespace zs::testing {

// The loss of `model` on a fixed batch of 2 sequences of `seq` tokens (ids and targets below 37,
// the vocab of the tests' small GPTs), computed without recording.
inline float fixed_batch_loss(models::Gpt& model, Allocator& allocator, int64_t seq) {
  NoGradScope no_grad;
  Tensor ids = Tensor::empty({2, seq}, DType::kI32, allocator, "ids");
  Tensor targets = Tensor::empty({2, seq}, DType::kI32, allocator, "targets");
  for (int64_t i = 0; i < 2 * seq; ++i) {
    ids.data<int32_t>()[i] = static_cast<int32_t>((i * 5 + 1) % 37);
    targets.data<int32_t>()[i] = static_cast<int32_t>((i * 7 + 3) % 37);
  }
  return model.loss(ids, targets).item();
}

}  // namespace zs::testing
