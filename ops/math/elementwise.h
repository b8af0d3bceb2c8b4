// Per-element math of the element-wise and reduction ops (ops/elementwise.h): the forward and
// backward formulas, the dropout scaling, and the finiteness tests that the loss scaler uses to
// detect fp16 overflow.
//
// Written once for the CPU loops in ops/elementwise.cc and the CUDA kernels that will include
// this header (STYLE.md, "One source of math"): every function is ZS_HOST_DEVICE inline, pure,
// and calls no host-only library function. Values are fp32 (storage types are converted on load
// and store with runtime/half.h); the finiteness tests work on the stored bits of each dtype so
// that they need no conversion and stay correct under -ffast-math, where the compiler may assume
// that isfinite() is always true.
#pragma once

#include <cstdint>

#include "runtime/half.h"
#include "runtime/macros.h"

namespace zs::ops::math {

// ---- add, add_bias: y = a + b; both gradients are dy (the CPU op hands dy over, no math).
ZS_HOST_DEVICE inline float add(float a, float b) { return a + b; }

// ---- scale: y = alpha * x, dx = alpha * dy (the same function).
ZS_HOST_DEVICE inline float scale(float x, float alpha) { return alpha * x; }

// ---- mul: y = a * b; da = b * dy, db = a * dy.
ZS_HOST_DEVICE inline float mul(float a, float b) { return a * b; }
ZS_HOST_DEVICE inline float mul_backward(float other, float dy) { return other * dy; }

// ---- dropout (inverted): a kept element is scaled by 1 / keep_prob, a dropped one is 0. The
// keep decision is runtime/rng.h dropout_keep(key, index, keep_prob); forward applies this to x
// and backward to dy with the same decision, so the mask is never stored.
ZS_HOST_DEVICE inline float dropout_keep_prob(float p) { return 1.0f - p; }
ZS_HOST_DEVICE inline float dropout_scale(float keep_prob) { return 1.0f / keep_prob; }
ZS_HOST_DEVICE inline float dropout(float value, bool kept, float scale) {
  return kept ? value * scale : 0.0f;
}

// ---- reductions: the block layout of the blocked sums (ops/elementwise.cc reduce_sum, and the
// CUDA reductions, which reproduce it to match bit for bit): chunks of kReduceChunk elements,
// element i of a chunk added into lane i % kReduceLanes.
inline constexpr int64_t kReduceChunk = 2048;
inline constexpr int64_t kReduceLanes = 8;
// Terms are formed in double so that the blocked sums of ops/elementwise.cc
// lose nothing on the way (a float square is exact in double).
ZS_HOST_DEVICE inline double sum_term(float x) { return static_cast<double>(x); }
ZS_HOST_DEVICE inline double sum_of_squares_term(float x) {
  const double value = static_cast<double>(x);
  return value * value;
}
// d(Σ x²)/dx = 2x; d(Σ x)/dx = 1; d(mean x)/dx = 1/n (the op passes dy/n as `dy`).
ZS_HOST_DEVICE inline float sum_of_squares_backward(float x, float dy) { return 2.0f * x * dy; }

// ---- finiteness (NaN and ±inf have an all-ones exponent in every format). The dynamic loss
// scaler calls these on the scaled gradients: any non-finite element means the step overflowed.
ZS_HOST_DEVICE inline bool is_finite_f32_bits(uint32_t bits) {
  return (bits & 0x7F800000u) != 0x7F800000u;
}
ZS_HOST_DEVICE inline bool is_finite_f16_bits(uint16_t bits) { return (bits & 0x7C00u) != 0x7C00u; }
ZS_HOST_DEVICE inline bool is_finite_bf16_bits(uint16_t bits) {
  return (bits & 0x7F80u) != 0x7F80u;
}
ZS_HOST_DEVICE inline bool is_finite(float value) {
  return is_finite_f32_bits(::zs::detail::float_to_bits(value));
}

}  // namespace zs::ops::math
