// Selecting one index along a dimension, with autograd: the [CLS] pooling of an encoder
// (x[:, 0, :] of [B, T, C] hidden states), or any other x[..., index, ...].
//
// The output is a new contiguous tensor (a copy, not a view: the selected elements are strided
// in x unless every dimension before `dim` is 1), in x's dtype, on x's allocator, in the current
// memory category (activations outside any scope); the caller owns it. Elements are copied bit
// for bit. The tape saves nothing but the sizes.
//
// Thread-safety: a pure function of its input that records on the calling thread's tape;
// concurrent calls on different tensors are safe. Results do not depend on the thread count
// (no arithmetic in forward; backward adds each gradient element once).
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace zs::ops {

// y = x[i_0, …, i_{dim−1}, index, i_{dim+1}, …]: x's shape without dimension `dim`. x is a
// floating (fp32, fp16, bf16) CPU tensor with at least 2 dimensions; dim counts from the end
// when negative (dim in [−x.dim(), x.dim())), and index must be in [0, x.size(dim)).
// Backward: dx is dy at `index` along `dim` and zero everywhere else (added to an existing
// gradient: only the selected positions change). Throws InvalidArgument naming the argument.
Tensor select(const Tensor& x, int64_t dim, int64_t index);

}  // namespace zs::ops
