// Matrix products with autograd: linear layers and plain 2-D matmul.
//
// Compute is fp32 through ops/cpu/gemm.h (Eigen or OpenBLAS, chosen at configure time);
// fp16/bf16 inputs are converted to fp32 for the product and the result stored in the input
// dtype. Outputs are allocated on the inputs' allocator in the current memory category
// (activations outside any scope).
#pragma once

#include "runtime/tensor.h"

namespace zs::ops {

// y[..., N] = x[..., K] · weight[N, K]^T (+ bias[N]). `bias` may be undefined.
// weight uses the [out_features, in_features] layout. x, weight and bias share a dtype.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// c[M, N] = op(a) · op(b), with op = transpose when the flag is set; a and b are 2-D.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

}  // namespace zs::ops
