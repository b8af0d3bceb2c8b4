// The AdamW update of one element, shared by the CPU optimizer loops (optim/adamw.cc) and the
// CUDA kernel that will include this header, plus fused_mul_add, the rounding helper that every
// optimizer's per-element math (ops/math/sgd.h too) is written with.
//
// Decoupled weight decay (Loshchilov & Hutter), in PyTorch's order of operations:
//   m ← β1·m + (1 − β1)·g
//   v ← β2·v + (1 − β2)·g²
//   w ← w·(1 − lr·wd) − (lr / (1 − β1^t)) · m / (√v / √(1 − β2^t) + eps)
// The per-step scalars (bias corrections, step size, decay factor) are computed once per step on
// the host by the caller (optim/adamw.cc) and passed in an AdamWStep, so every element of every
// shard on every rank sees the same scalars.
//
// Bitwise reproducibility. The update of element i depends only on element i's values and the
// step's scalars. Every multiply-add is an explicit fused_mul_add, never a bare a·b + c: where
// the target has a fused multiply-add instruction the compiler may otherwise contract a·b + c
// differently in a vectorized loop body, its scalar epilogue and a plain reference loop (GCC
// contracts across C++ expressions by default), so an element's result would depend on where a
// shard boundary puts it. With explicit fused operations, or none at all on targets without the
// instruction (where nothing can be contracted), the vector body, the epilogue and a plain loop
// in another translation unit round identically. Builds with and without FMA (ZS_NATIVE=OFF on
// an x86-64 baseline) differ from each other, as any two instruction sets may.
//
// The CUDA kernels round as the host code of the same build does, so the GPU's optimizer state
// is bitwise the CPU's: nvcc preprocesses device code with the host compiler and its flags, so
// the device pass sees the same __FMA__ / __FP_FAST_FMAF as the host's .cc files. Where the host
// fuses, the device calls fmaf too; where it does not, the device rounds the product and the sum
// separately with __fmul_rn and __fadd_rn, which nvcc never contracts (a bare a·b + c would be,
// nvcc's -fmad=true is the default). Division and sqrtf are IEEE in nvcc by default
// (-prec-div=true, -prec-sqrt=true), as on the CPU.
//
// Everything here is ZS_HOST_DEVICE inline, pure, and calls no host-only library function.
#pragma once

#include <math.h>

#include "runtime/macros.h"

namespace zs::ops::math {

// a·b + c rounded once where the host target has a fused multiply-add instruction, else rounded
// twice — the same way in every loop of the build, on the CPU and in the CUDA kernels (see the
// file comment).
ZS_HOST_DEVICE ZS_FORCE_INLINE float fused_mul_add(float a, float b, float c) {
#if defined(__FP_FAST_FMAF) || defined(__FMA__) || defined(__ARM_FEATURE_FMA)
  return fmaf(a, b, c);
#elif defined(__CUDA_ARCH__)
  return __fadd_rn(__fmul_rn(a, b), c);  // the host's two roundings; never contracted by nvcc
#else
  return a * b + c;  // no FMA instruction: the compiler cannot contract this either
#endif
}

// The scalars of one AdamW step (t ≥ 1), computed by the host once per step.
struct AdamWStep {
  float beta1;
  float beta2;
  float one_minus_beta1;
  float one_minus_beta2;
  float eps;
  float step_size;                  // lr / (1 − β1^t)
  float inv_sqrt_bias_correction2;  // 1 / √(1 − β2^t)
  float decay_factor;               // 1 − lr·wd, applied only where the decay mask is set
};

// One element: param, m (exp_avg) and v (exp_avg_sq) are updated in place. `decay` says whether
// the element belongs to a parameter segment with weight decay; without it the parameter is
// multiplied by nothing at all (not by 1.0f), so it keeps its exact bits on a zero update.
ZS_HOST_DEVICE ZS_FORCE_INLINE void adamw_update(float& param, float grad, float& m, float& v,
                                                 const AdamWStep& s, bool decay) {
  m = fused_mul_add(s.beta1, m, s.one_minus_beta1 * grad);
  v = fused_mul_add(s.beta2, v, (s.one_minus_beta2 * grad) * grad);
  const float denom = fused_mul_add(sqrtf(v), s.inv_sqrt_bias_correction2, s.eps);
  const float decayed = decay ? param * s.decay_factor : param;
  param = fused_mul_add(-s.step_size, m / denom, decayed);
}

}  // namespace zs::ops::math
