// Softmax cross-entropy loss over a vocabulary, fused, with autograd (GPT-2's language-model loss,
// the classifier's loss).
//
// The softmax is never materialized. Forward computes each row's max and log Σ exp(logit − max)
// in fp32 and saves both (fp32 [N] each, activations) together with the logits and targets
// handles (no copies: do not overwrite them before backward); backward recomputes
// softmax = exp((logit − max) − log_sum) and writes
//   dlogits = (softmax − onehot(target)) · dloss / count
// straight into the gradient sink in the sink's dtype (no fp32 staging of the [N, V] gradient),
// with zero rows for ignored targets.
//
// Thread-safety: the functions keep no state; concurrent calls are safe. Results do not depend
// on the OpenMP thread count (rows are independent; the mean is summed in row order in double).
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace zs::ops {

constexpr int32_t kDefaultIgnoreIndex = -100;

// Mean over the rows whose target is not `ignore_index` of −log softmax(logits[row])[target].
//   logits: [N, V], fp32, fp16 or bf16 (a [B, T, V] tensor: view it as [B·T, V] first).
//   targets: int32 [N]; each is in [0, V) or equals ignore_index.
// Returns a fp32 tensor of shape [1] on the logits' allocator. Compute is fp32.
// If every row is ignored (or N == 0) the loss is 0 and the gradient is 0, not NaN.
// Throws InvalidArgument on other shapes or dtypes, and for a target out of range, naming its row
// and value. The mean is over this call's rows: for a mean over ranks, multiply by
// count_valid_targets() and reduce the sums and the counts.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets,
                     int32_t ignore_index = kDefaultIgnoreIndex);

// The number of entries of `targets` (int32, any shape) that are not `ignore_index`: the divisor
// cross_entropy uses.
int64_t count_valid_targets(const Tensor& targets, int32_t ignore_index = kDefaultIgnoreIndex);

}  // namespace zs::ops
