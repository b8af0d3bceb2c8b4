// Softmax cross-entropy math for one row of V logits, written once for the CPU loops
// (ops/cross_entropy.cc) and the CUDA kernels (ops/cuda/cross_entropy.cu); see
// ../../shared/STYLE.md, "One source of math".
//
//   max = max_i logit_i,  log_sum = log Σ_i exp(logit_i − max)   (so lse = max + log_sum)
//   loss = (max − logit[target]) + log_sum                          (= −log softmax[target])
//   dlogit_i = (exp((logit_i − max) − log_sum) − [i == target]) · scale,  scale = dloss / count
//
// max and log_sum are kept apart rather than folded into one lse: with logits near 1000 an fp32
// lse carries an absolute rounding error of ~3e-5, which exp() would turn into a 3e-5 relative
// error of every softmax value; logit − max is exact for nearby values and log_sum is small.
// The softmax itself is never stored: backward recomputes it from the saved max and log_sum.
// Row functions are templated on the storage type T of the logits (float, Half, BFloat16) and
// compute in fp32 in index order. Pure functions: safe from any thread, no host-only calls.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/macros.h"

namespace zs::ops::math {

// One term of the row's Σ exp: exp(logit − max). The CPU sums the terms sequentially
// (cross_entropy_row_stats); the CUDA kernel sums the same terms in strided partial sums.
ZS_HOST_DEVICE inline float cross_entropy_exp_term(float logit, float row_max) {
  return expf(logit - row_max);
}

// max and log Σ_i exp(logits[i] − max) of one row of `vocab` (>= 1) logits.
template <typename T>
ZS_HOST_DEVICE inline void cross_entropy_row_stats(const T* logits, int64_t vocab, float* row_max,
                                                   float* log_sum) {
  float max_logit = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) max_logit = fmaxf(max_logit, static_cast<float>(logits[i]));
  float sum = 0.0f;
  for (int64_t i = 0; i < vocab; ++i) {
    sum += cross_entropy_exp_term(static_cast<float>(logits[i]), max_logit);
  }
  *row_max = max_logit;
  *log_sum = logf(sum);
}

// −log softmax(row)[target] from the row's stats and its target logit.
ZS_HOST_DEVICE inline float cross_entropy_loss(float row_max, float log_sum, float target_logit) {
  return (row_max - target_logit) + log_sum;
}

// d loss / d logit for one element.
ZS_HOST_DEVICE inline float cross_entropy_grad(float logit, float row_max, float log_sum,
                                               bool is_target, float scale) {
  return (expf((logit - row_max) - log_sum) - (is_target ? 1.0f : 0.0f)) * scale;
}

// Writes (or adds, when `accumulate`) the gradient of one non-ignored row. Ignored rows get no
// call: their gradient is zero, and recomputing exp() there could turn a −inf logit into NaN·0.
template <typename T, typename S>
ZS_HOST_DEVICE inline void cross_entropy_row_backward(const T* logits, int64_t vocab, float row_max,
                                                      float log_sum, int64_t target, float scale,
                                                      S* dlogits, bool accumulate) {
  for (int64_t i = 0; i < vocab; ++i) {
    const float value =
        cross_entropy_grad(static_cast<float>(logits[i]), row_max, log_sum, i == target, scale);
    dlogits[i] = accumulate ? S(static_cast<float>(dlogits[i]) + value) : S(value);
  }
}

}  // namespace zs::ops::math
