// Layer normalization over the last dimension, with autograd (GPT-2 and BERT blocks).
//
// Compute is fp32 whatever the storage dtype (fp32, fp16, bf16); outputs are stored in the input
// dtype and allocated on the input's allocator in the current memory category (activations
// outside any scope). When recorded for backward, the op saves x and gamma (handles, no copy)
// and the per-row mean and 1/sqrt(var + eps) as fp32 [rows] activations; the tape frees them
// after the node runs.
//
// Determinism: every result is independent of the OpenMP thread count. dx is per row; dgamma
// and dbeta are summed over fixed blocks of 64 rows and then over the blocks in order.
//
// Thread-safety: the function keeps no state; concurrent calls on distinct outputs are safe.
#pragma once

#include "runtime/tensor.h"

namespace zs::ops {

// y[..., C] = (x − mean) / sqrt(var + eps) · gamma + beta, mean and (biased) variance taken over
// the last dimension C of x (C >= 1). gamma and beta are [C]; x, gamma and beta share a dtype.
// Throws InvalidArgument on other shapes or dtypes, or an eps that is negative or not finite.
Tensor layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps = 1e-5f);

}  // namespace zs::ops
