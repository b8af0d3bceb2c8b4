// GELU, tanh approximation (GPT-2's), and its exact derivative, written once for the CPU loop
// (ops/gelu.cc) and a future CUDA kernel (see ../../shared/STYLE.md, "One source of math").
//
//   gelu(x) = 0.5·x·(1 + tanh(u)),  u = sqrt(2/π)·(x + 0.044715·x³)
//
// Evaluated as x·σ(2u) with σ(z) = 1 / (1 + e^(−z)), which is the same function
// (0.5·(1 + tanh u) = σ(2u)) but has no cancellation for negative x, where 1 + tanh(u) would
// lose every significant digit; it also saturates cleanly (x·1 for large x, −0 for very
// negative x) without inf·0. The derivative in the same terms:
//
//   gelu'(x) = σ(2u) + 2·x·σ(2u)·(1 − σ(2u))·sqrt(2/π)·(1 + 3·0.044715·x²)
//
// Pure functions of their arguments: safe from any thread, no host-only library calls.
#pragma once

#include <cmath>

#include "runtime/macros.h"

namespace zs::ops::math {

constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;  // sqrt(2/π)
constexpr float kGeluCubicCoeff = 0.044715f;
// Beyond this |x| the derivative is 1 (x > 0) or below 1e-35 (x < 0) in fp32; returning the
// limit there also keeps x² from overflowing into inf·0 = NaN for absurdly large inputs.
constexpr float kGeluSaturation = 10.0f;

// σ(2u) for the x above: the weight x is multiplied by.
ZS_HOST_DEVICE inline float gelu_gate(float x) {
  const float u = kGeluSqrt2OverPi * (x + kGeluCubicCoeff * x * x * x);
  return 1.0f / (1.0f + expf(-2.0f * u));
}

ZS_HOST_DEVICE inline float gelu_forward(float x) { return x * gelu_gate(x); }

ZS_HOST_DEVICE inline float gelu_derivative(float x) {
  if (x > kGeluSaturation) return 1.0f;
  if (x < -kGeluSaturation) return 0.0f;
  const float gate = gelu_gate(x);
  const float du_dx = kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCubicCoeff * x * x);
  return gate + 2.0f * x * gate * (1.0f - gate) * du_dx;
}

// dL/dx given dL/dy.
ZS_HOST_DEVICE inline float gelu_backward(float x, float dy) { return dy * gelu_derivative(x); }

}  // namespace zs::ops::math
