// The SGD update of one element (plain, heavy-ball momentum, Nesterov momentum; dampening 0),
// shared by the CPU optimizer loops (optim/sgd.cc) and the CUDA kernel that will include this
// header. PyTorch's torch.optim.SGD semantics with dampening 0:
//   g ← g + wd·w                 (coupled L2 weight decay, only where the decay mask is set)
//   b ← μ·b + g                  (momentum buffer; it starts at 0, so the first step gives b = g)
//   d ← g + μ·b if nesterov, else b
//   w ← w − lr·d
// Without momentum there is no buffer and d = g.
//
// Multiply-adds go through fused_mul_add (ops/math/adamw.h) for the reason given there: the
// update of an element rounds the same way in a vector body, a scalar epilogue, a plain loop
// and a CUDA kernel, so it never depends on where a shard boundary falls. Everything here is
// ZS_HOST_DEVICE inline and pure.
#pragma once

#include "ops/math/adamw.h"
#include "runtime/macros.h"

namespace zs::ops::math {

// The scalars of one SGD step, the same for every element.
struct SgdStep {
  float lr;
  float momentum;      // μ; 0 means plain SGD
  float weight_decay;  // applied only where the decay mask is set
};

// Plain SGD: w ← w − lr·(g + wd·w).
ZS_HOST_DEVICE ZS_FORCE_INLINE void sgd_update(float& param, float grad, const SgdStep& s,
                                               bool decay) {
  const float g = decay ? fused_mul_add(s.weight_decay, param, grad) : grad;
  param = fused_mul_add(-s.lr, g, param);
}

// SGD with momentum (heavy ball, or Nesterov when `nesterov`); `buffer` is updated in place.
ZS_HOST_DEVICE ZS_FORCE_INLINE void sgd_momentum_update(float& param, float grad, float& buffer,
                                                        const SgdStep& s, bool decay,
                                                        bool nesterov) {
  const float g = decay ? fused_mul_add(s.weight_decay, param, grad) : grad;
  buffer = fused_mul_add(s.momentum, buffer, g);
  const float direction = nesterov ? fused_mul_add(s.momentum, buffer, g) : buffer;
  param = fused_mul_add(-s.lr, direction, param);
}

}  // namespace zs::ops::math
