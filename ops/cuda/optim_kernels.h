// CUDA launchers of the optimizer-side loops of optim/: SGD, the loss scaler's fused unscale +
// overflow mark, and the gradient-norm sum of squares. Each is a thin launcher around the same
// ZS_HOST_DEVICE math the CPU loops run (ops/math/sgd.h, elementwise.h, norm.h), over fp32 master
// shards in device memory. AdamW's launcher is ops/cuda/kernels.h's adamw_step.
//
// Results are bitwise equal to the CPU loops: each element's update is the same sequence of
// IEEE operations (multiply-adds are explicit fused operations), and the sum of squares adds
// the same double terms in the same order (ops/math/norm.h: blocks of 4096, eight lanes, blocks
// in order), so a view's sum is the same double on both devices.
//
// Conventions as ops/cuda/kernels.h: device pointers, enqueue on `stream`, no host
// synchronization, n == 0 launches nothing, launch errors thrown as zs errors. The caller keeps
// buffers alive until the stream has run the kernels.
// Plain C++ header (no CUDA syntax). Thread-safety: stateless; callable from any thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ops/math/sgd.h"

namespace zs::ops::cuda {

// SGD over [0, n) of a flat fp32 segment (ops/math/sgd.h): plain when momentum_buffer is null,
// else heavy-ball or Nesterov momentum with the buffer updated in place. `decay` applies the
// coupled weight decay (one launch per decay segment, as optim/sgd.cc loops per segment).
void sgd_step(float* param, const float* grad, float* momentum_buffer, int64_t n,
              const math::SgdStep& step, bool decay, bool nesterov, cudaStream_t stream);

// g ← inv_scale · g over [0, n) in place; sets *found_nonfinite (device int32) to 1 if any result
// is NaN or ±inf, never clears it (zero it first, as for kernels.h's mark_nonfinite).
void unscale_and_mark(float* grad, int64_t n, float inv_scale, int32_t* found_nonfinite,
                      cudaStream_t stream);

// Bytes of device workspace sum_of_squares needs for a view of `numel` elements (8-byte aligned).
size_t sum_of_squares_workspace_bytes(int64_t numel);

// *result (a device double) ← Σ g[i]² over the covered ranges [begins[k], ends[k]) of a view of
// `numel` fp32 elements, in ops/math/norm.h's order. `begins`/`ends` are HOST arrays of `count`
// sorted, disjoint ranges within [0, numel) (optim's normalized segments); they travel by value
// in kernel arguments, so nothing is copied from pageable memory. `workspace` holds
// sum_of_squares_workspace_bytes(numel) bytes of device memory.
void sum_of_squares(const float* grad, int64_t numel, const int64_t* begins, const int64_t* ends,
                    int64_t count, void* workspace, double* result, cudaStream_t stream);

}  // namespace zs::ops::cuda
