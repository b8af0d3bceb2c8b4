// Internal: the optimizer-side loops of optim/ on a CUDA view — AdamW, SGD, the gradient-norm
// sum of squares, gradient scaling and the loss scaler's unscale + check — launched on the
// stream of the view's CudaAllocator (the stream its buffers were allocated on, so no further
// ordering is needed). The CPU loops and these share their math (ops/math) and give the same
// bits. Each loop runs once per normalized segment, as the CPU's parallel_for_segments does.
//
// Where the caller needs a host value (the sum of squares, whether a gradient overflowed), the
// function copies one scalar back and waits for the stream: one host synchronization per call,
// at the optimizer step, never inside forward or backward.
//
// In a build without CUDA (ZS_HAVE_CUDA == 0) these throw InvalidArgument: no CUDA tensor can
// exist there.
#pragma once

#include <vector>

#include "ops/math/adamw.h"
#include "ops/math/sgd.h"
#include "optim/shard_view.h"

namespace zs::optim::detail {

// True when the view's master lives on a CUDA device (then its grad and state must too).
bool on_cuda(const ShardView& view);

void cuda_adamw(const ShardView& view, const std::vector<Segment>& segments, const Tensor& exp_avg,
                const Tensor& exp_avg_sq, const ops::math::AdamWStep& step);
void cuda_sgd(const ShardView& view, const std::vector<Segment>& segments,
              const Tensor& momentum_buffer, const ops::math::SgdStep& step, bool nesterov);
double cuda_sum_of_squares(const ShardView& view, const std::vector<Segment>& segments);
void cuda_scale(const ShardView& view, const std::vector<Segment>& segments, float coefficient);
bool cuda_unscale_and_check(const ShardView& view, const std::vector<Segment>& segments,
                            float inv_scale);

}  // namespace zs::optim::detail
