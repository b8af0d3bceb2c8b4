// Element-wise and reduction ops with autograd (residual add, bias, scale, mul, tanh, dropout,
// dtype casts, sums), and in-place helpers without autograd for optimizers and loss scaling.
//
// Inputs may be fp32, fp16 or bf16; compute is fp32 and outputs keep the input dtype, except the
// reductions, which return a fp32 [1] tensor, and cast. Outputs are new tensors on the input's
// allocator, charged to the thread's current memory category (activations outside any scope);
// the caller owns them. Argument errors throw zs::InvalidArgument naming the op and argument.
//
// Determinism: every result is independent of the number of OpenMP threads. Element-wise loops
// have no cross-element arithmetic; reductions (sum, mean, sum_of_squares, the bias gradient)
// add in a fixed order set by the data layout, never by the thread schedule.
//
// Thread-safety: the ops are pure functions of their inputs and record on the calling thread's
// tape; different threads may run them on different tensors. The in-place helpers write their
// destination: the caller must ensure nobody else reads or writes it meanwhile.
#pragma once

#include "runtime/rng.h"
#include "runtime/tensor.h"

namespace zs::ops {

// y = a + b, a and b of the same shape and dtype (residual connections). Backward hands dy to
// both inputs: a receives dy itself (aliased, no copy, when a is an intermediate value without
// a gradient yet), b a copy of it (or an add into its existing gradient), so the two gradients
// are never one buffer. add(x, x) gives x the gradient 2·dy.
Tensor add(const Tensor& a, const Tensor& b);

// y[..., c] = x[..., c] + bias[c]: bias is [C] with C = x.size(-1), same dtype as x. Backward:
// dx = dy (aliased), dbias = Σ over rows of dy, summed row by row in order (in double), so the
// result does not depend on the thread count.
Tensor add_bias(const Tensor& x, const Tensor& bias);

// y = alpha · x; alpha must be finite.
Tensor scale(const Tensor& x, float alpha);

// y = a · b element-wise, same shape and dtype.
Tensor mul(const Tensor& a, const Tensor& b);

// y = tanh(x) element-wise, any shape (the BERT pooler's activation). Computed in fp32 by
// ops/math/tanh.h and stored in x's dtype. The tape saves y (a handle, no copy): backward is
// dx = dy · (1 − y²) from y's stored values, so for fp16/bf16 the derivative uses the rounded
// output, as any op that differentiates through its saved output does.
Tensor tanh(const Tensor& x);

// Inverted dropout: element i is kept when runtime/rng.h dropout_keep(key, i, 1 − p) (i is the
// flat index in x) and then scaled by 1 / (1 − p); dropped elements are 0. p must be in [0, 1).
// The mask is a pure function of (key, i): it is never stored. The tape saves only `key` and
// `p`, and backward regenerates the same mask to compute dx = mask · dy / (1 − p). The caller
// must pass a different key (e.g. substream = the step, stream = the dropout site) for every
// call, or the masks repeat. p == 0 or training == false return x itself: no copy, no tape node.
Tensor dropout(const Tensor& x, float p, const RngKey& key, bool training = true);

// x converted to `dtype` (fp32, fp16 or bf16) with round-to-nearest-even (runtime/half.h; fp16
// to bf16 goes exactly through fp32, so it rounds once). Backward converts dy back to x's dtype.
// Casting to x's own dtype returns x itself.
Tensor cast(const Tensor& x, DType dtype);

// Σ x² as a fp32 [1] tensor (gradient clipping). Backward: dx = 2·x·dy.
Tensor sum_of_squares(const Tensor& x);
// Σ x and Σ x / numel as fp32 [1] tensors. mean of an empty tensor throws InvalidArgument.
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);
// All three add the elements in fixed blocks in double, then the blocks in order, and round
// to fp32 once at the end.

// ---- In place, never recorded on the tape (optimizer and loss-scaler plumbing). Do not apply
// them to a tensor that a recorded op saved for backward: its gradient would be silently wrong.

// x *= alpha (alpha finite), computed in fp32 and rounded to x's dtype.
void scale_(const Tensor& x, float alpha);
// True if no element of x is NaN or ±inf (the fp16 loss scaler's overflow check).
bool all_finite(const Tensor& x);
// Every element of x = value rounded to x's dtype.
void fill_(const Tensor& x, float value);
// dst = src, converting the dtype (round-to-nearest-even); the shapes must be equal. A copy
// between equal dtypes is bitwise. dst and src must not partially overlap.
void copy_(const Tensor& dst, const Tensor& src);

}  // namespace zs::ops
