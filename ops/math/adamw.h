// The AdamW update of one element, shared by the CPU optimizer loop and the CUDA kernel.
//
// Decoupled weight decay (Loshchilov & Hutter): w ← w − lr·(m̂ / (√v̂ + eps) + wd·w), with
// m̂ = m / (1 − β1^t), v̂ = v / (1 − β2^t). The bias corrections are computed once per step by
// the caller and passed in.
#pragma once

#include <math.h>

#include "runtime/macros.h"

namespace zs::math {

struct AdamWStep {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;      // applied only where the parameter's decay mask is set
  float bias_correction1;  // 1 − β1^t
  float bias_correction2;  // 1 − β2^t
};

ZS_HOST_DEVICE inline void adamw_update(float& param, float grad, float& m, float& v,
                                        const AdamWStep& s, bool decay) {
  m = s.beta1 * m + (1.0f - s.beta1) * grad;
  v = s.beta2 * v + (1.0f - s.beta2) * grad * grad;
  const float m_hat = m / s.bias_correction1;
  const float v_hat = v / s.bias_correction2;
  const float wd = decay ? s.weight_decay : 0.0f;
  param -= s.lr * (m_hat / (sqrtf(v_hat) + s.eps) + wd * param);
}

}  // namespace zs::math
