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

#include "comm/communicator.h"
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

// `value` reduced with `op` over the ranks of `comm` (one fp32 all_reduce, waited for): the
// scalar collectives of the optimizer side (the global gradient norm, the loss scaler's overflow
// flag). The element lives where the communicator moves tensors: host memory for local/mpi; on a
// GPU communicator (nccl) a device scalar, uploaded and read back synchronously (a host sync, at
// the optimizer step), from a CudaAllocator on a private stream of that GPU, made once per
// device and kept for the process's life (never destroyed: no CUDA call after the runtime shuts
// down). Untracked: four bytes per call.
float all_reduce_scalar(comm::Communicator& comm, float value, comm::ReduceOp op,
                        const comm::CollectiveOptions& options);

}  // namespace zs::optim::detail
