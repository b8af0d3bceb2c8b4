// GELU activation (tanh approximation, as in GPT-2), with autograd.
//
// Compute is fp32 whatever the storage dtype (fp32, fp16, bf16); the output is stored in the
// input dtype on the input's allocator, in the current memory category (activations outside any
// scope). When recorded for backward the op saves x (a handle, no copy); the tape frees it after
// the node runs. The math lives in ops/math/gelu.h.
//
// Thread-safety: the function keeps no state; concurrent calls are safe. Results do not depend on
// the OpenMP thread count (every element is independent).
#pragma once

#include "runtime/tensor.h"

namespace zs::ops {

// y = 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))) element-wise, any shape.
// Backward: dx = dy · gelu'(x), the exact derivative of that formula.
Tensor gelu(const Tensor& x);

}  // namespace zs::ops
