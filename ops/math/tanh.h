// tanh and its derivative, written once for the CPU loop (ops::tanh in ops/elementwise.cc) and a
// future CUDA kernel (see ../../shared/STYLE.md, "One source of math").
//
//   y = tanh(x),  dx = dy · (1 − y²)
//
// The derivative is written in terms of the output y, so backward needs only the saved output
// (no second tanh). tanhf is the C library's on the host and CUDA's on the device: accurate to a
// couple of ulp, saturating to ±1 for |x| beyond ~9 and passing NaN through.
//
// Pure functions of their arguments: safe from any thread.
#pragma once

#include <math.h>

#include "runtime/macros.h"

namespace zs::ops::math {

ZS_HOST_DEVICE inline float tanh_forward(float x) { return tanhf(x); }

// d tanh / dx at the point whose output is y.
ZS_HOST_DEVICE inline float tanh_derivative_from_output(float y) { return 1.0f - y * y; }

// dL/dx given the forward output y and dL/dy.
ZS_HOST_DEVICE inline float tanh_backward(float y, float dy) {
  return dy * tanh_derivative_from_output(y);
}

}  // namespace zs::ops::math
