// Row softmax math shared by the CPU ops and (later) the CUDA kernels: numerically stable softmax
// of one row in place, the log-sum-exp that lets a backward pass recompute the probabilities
// without storing them, online (streaming) max/sum statistics that can be merged across blocks,
// and the softmax backward formula. Used by attention (ops/attention.cc); written to be reused by
// any op that normalizes rows (cross-entropy, a standalone masked softmax).
//
// Masking convention: a masked row is a prefix. Row `row` of a causal and/or key-padded score
// matrix sees columns [0, masked_row_length(...)) and every later column has probability 0. A row
// that sees no column has log-sum-exp -inf and all-zero probabilities (never NaN).
//
// Every function is a pure ZS_HOST_DEVICE inline function of its arguments (no host-only library
// calls: logf/fmaxf exist on both sides, and exp is written out below), safe to call from any
// thread. Reductions over a row use a fixed blocked order, so a row's result does not depend on
// the compiler's vector width or on threads.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/half.h"  // zs::detail::float_to_bits / bits_to_float (host and device)
#include "runtime/macros.h"

namespace zs::ops::math {

// exp(x) in fp32 without a library call, written so that compilers vectorize loops over it (a
// glibc expf call per element keeps the softmax loops scalar and costs more than the GEMMs around
// them) and so that CPU and CUDA evaluate the same polynomial. Cody-Waite range reduction
// x = n·ln2 + r, |r| <= ln2/2, then the Cephes expf polynomial for e^r (relative error about
// 1 ulp, within 2 ulp of expf over the range), scaled by 2^n built from its bits. Below
// -87.33654 (where e^x < 2^-126 would be subnormal) it returns 0; above 88.37626 (a bit below the
// true overflow at 88.72284) +inf; NaN stays NaN.
ZS_HOST_DEVICE inline float exp_approx(float x) {
  constexpr float kMinArg = -87.33654475f;  // ln(2^-126)
  constexpr float kMaxArg = 88.37626266f;   // ln(2^127.5): n stays <= 127
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;      // ln 2 = kLn2Hi + kLn2Lo; kLn2Hi has 9 bits, so
  constexpr float kLn2Lo = -2.12194440e-4f;   // n·kLn2Hi is exact for |n| <= 127
  constexpr float kRoundMagic = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer kept
                                              // in the low mantissa bits (no float->int cast)
  float clamped = x < kMinArg ? kMinArg : x;
  clamped = clamped > kMaxArg ? kMaxArg : clamped;
  const float shifted = clamped * kLog2e + kRoundMagic;
  const float n = shifted - kRoundMagic;  // round(x / ln 2), in [-126, 127]
  float r = clamped - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float poly = 1.9875691500e-4f;
  poly = poly * r + 1.3981999507e-3f;
  poly = poly * r + 8.3334519073e-3f;
  poly = poly * r + 4.1665795894e-2f;
  poly = poly * r + 1.6666665459e-1f;
  poly = poly * r + 5.0000001201e-1f;
  poly = poly * r * r + r + 1.0f;
  // 2^n: n is the low bits of `shifted` (two's complement relative to the magic number).
  const uint32_t n_bits =
      zs::detail::float_to_bits(shifted) - zs::detail::float_to_bits(kRoundMagic);
  const float result = poly * zs::detail::bits_to_float((n_bits + 127u) << 23);
  if (x < kMinArg) return 0.0f;
  return x > kMaxArg ? INFINITY : result;
}

// Lanes of the blocked reductions below: the sum (or max) of a row is accumulated in kLanes
// partial results, element j into lane j % kLanes, then the lanes are combined in order. The
// order is fixed by this constant, not by the compiler or the vector width, so results are the
// same everywhere, and the compiler can keep the lanes in vector registers.
constexpr int kReductionLanes = 16;

// Σ_j x[j] in the fixed blocked order.
ZS_HOST_DEVICE inline float row_sum(const float* x, int64_t n) {
  float lanes[kReductionLanes] = {};
  int64_t j = 0;
  for (; j + kReductionLanes <= n; j += kReductionLanes) {
    for (int l = 0; l < kReductionLanes; ++l) lanes[l] += x[j + l];
  }
  for (int l = 0; j < n; ++j, ++l) lanes[l] += x[j];
  float sum = 0.0f;
  for (int l = 0; l < kReductionLanes; ++l) sum += lanes[l];
  return sum;
}

// max_j x[j]; -inf for n == 0. NaN in x may or may not propagate (the scores it is used on are
// finite unless the inputs are not, and then the exp of the row is NaN anyway).
ZS_HOST_DEVICE inline float row_max(const float* x, int64_t n) {
  float lanes[kReductionLanes];
  for (int l = 0; l < kReductionLanes; ++l) lanes[l] = -INFINITY;
  int64_t j = 0;
  for (; j + kReductionLanes <= n; j += kReductionLanes) {
    for (int l = 0; l < kReductionLanes; ++l) lanes[l] = x[j + l] > lanes[l] ? x[j + l] : lanes[l];
  }
  for (int l = 0; j < n; ++j, ++l) lanes[l] = x[j] > lanes[l] ? x[j] : lanes[l];
  float max = -INFINITY;
  for (int l = 0; l < kReductionLanes; ++l) max = lanes[l] > max ? lanes[l] : max;
  return max;
}

// How many leading columns of row `row` are visible: all `valid_cols` (the unpadded length,
// <= the row width) for a bidirectional row, and at most row + 1 of them for a causal one.
ZS_HOST_DEVICE inline int64_t masked_row_length(int64_t row, bool causal, int64_t valid_cols) {
  if (!causal) return valid_cols;
  return row + 1 < valid_cols ? row + 1 : valid_cols;
}

// Running statistics of a stream of logits: the maximum so far and the sum of exp(x - max).
// Empty: max = -inf, sum = 0.
struct SoftmaxStats {
  float max;
  float sum;
};

ZS_HOST_DEVICE inline SoftmaxStats softmax_stats_empty() { return SoftmaxStats{-INFINITY, 0.0f}; }

// Adds one logit. A -inf logit (a masked entry written as -inf) adds nothing.
ZS_HOST_DEVICE inline SoftmaxStats softmax_stats_add(SoftmaxStats stats, float x) {
  if (x == -INFINITY) return stats;
  if (x <= stats.max) return SoftmaxStats{stats.max, stats.sum + exp_approx(x - stats.max)};
  // New maximum: rescale the old sum (exp_approx(-inf) = 0 covers the empty case).
  return SoftmaxStats{x, stats.sum * exp_approx(stats.max - x) + 1.0f};
}

// The statistics of the concatenation of two streams (e.g. two blocks of a row, or two threads).
ZS_HOST_DEVICE inline SoftmaxStats softmax_stats_merge(SoftmaxStats a, SoftmaxStats b) {
  if (a.max == -INFINITY) return b;
  if (b.max == -INFINITY) return a;
  const float max = fmaxf(a.max, b.max);
  return SoftmaxStats{max, a.sum * exp_approx(a.max - max) + b.sum * exp_approx(b.max - max)};
}

// log Σ exp(x) of the stream: max + log(sum); -inf for an empty stream.
ZS_HOST_DEVICE inline float softmax_stats_lse(SoftmaxStats stats) {
  if (stats.max == -INFINITY) return -INFINITY;
  return stats.max + logf(stats.sum);
}

// The probability of logit x in a row whose log-sum-exp is lse (the recompute used in backward).
ZS_HOST_DEVICE inline float softmax_prob_from_lse(float x, float lse) {
  return exp_approx(x - lse);
}

// Replaces x[0, n) by softmax(x[0, n)) and returns its log-sum-exp; -inf (and nothing written)
// when n == 0. Stable: subtracts the row maximum before exponentiating, so large logits do not
// overflow; the sum is >= 1, so the division cannot blow up.
ZS_HOST_DEVICE inline float softmax_row_inplace(float* x, int64_t n) {
  if (n <= 0) return -INFINITY;
  const float max = row_max(x, n);
  for (int64_t j = 0; j < n; ++j) x[j] = exp_approx(x[j] - max);
  const float sum = row_sum(x, n);
  const float inv_sum = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) x[j] *= inv_sum;
  return max + logf(sum);
}

// Σ_j a[j] · b[j]: the per-row delta = rowsum(dY ⊙ Y) of the softmax backward, where Y is the
// softmax output (or, for attention, delta = rowsum(dO ⊙ O), which equals rowsum(dP ⊙ P)).
ZS_HOST_DEVICE inline float row_dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) sum += a[j] * b[j];
  return sum;
}

// Softmax backward for one element: dx = p · (dp − delta), with delta = Σ_k p_k · dp_k of the row.
// A masked element (p = 0) gets 0 whatever dp is.
ZS_HOST_DEVICE inline float softmax_backward(float p, float dp, float delta) {
  return p * (dp - delta);
}

}  // namespace zs::ops::math
