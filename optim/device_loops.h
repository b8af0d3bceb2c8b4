// Internal: the optimizer-side loops of optim/ on a view whose buffers live on a device (not the
// CPU) — AdamW, SGD, the gradient-norm sum of squares, gradient scaling and the loss scaler's
// unscale + check. The CPU loops are the plain code of adamw.cc, sgd.cc, clip.cc and
// loss_scaler.cc; a device's loops are reached through its DeviceLoops entry, which the device's
// library installs when a program links it (DeviceTables, runtime/device_kernels.h): on CUDA,
// optim/cuda/device_loops.cc (zs_optim_cuda; zs_train links it), which launches ops/cuda's
// kernels on the stream of the view's CudaAllocator (the stream its buffers were allocated on,
// so no further ordering is needed). The CPU loops and these share their math (ops/math) and
// give the same bits. Each loop runs once per normalized segment, as the CPU's
// parallel_for_segments does.
//
// Where the caller needs a host value (the sum of squares, whether a gradient overflowed), the
// function copies one scalar back and waits for the stream: one host synchronization per call,
// at the optimizer step, never inside forward or backward.
//
// Without an entry for the view's device (a build without CUDA) these throw InvalidArgument
// naming the view, its device and the missing backend.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "ops/math/adamw.h"
#include "ops/math/sgd.h"
#include "optim/shard_view.h"
#include "runtime/allocator.h"

namespace zs::optim::detail {

// True when the view's master lives on a device other than the CPU (then its grad and state
// must be on that device too): the loop goes through the device's entry.
bool on_device(const ShardView& view);

// One device kind's loops (static storage, immutable), installed by its library.
struct DeviceLoops {
  const char* name = "";  // "cuda"
  void (*adamw)(const ShardView& view, const std::vector<Segment>& segments, const Tensor& exp_avg,
                const Tensor& exp_avg_sq, const ops::math::AdamWStep& step) = nullptr;
  void (*sgd)(const ShardView& view, const std::vector<Segment>& segments,
              const Tensor& momentum_buffer, const ops::math::SgdStep& step,
              bool nesterov) = nullptr;
  double (*sum_of_squares)(const ShardView& view, const std::vector<Segment>& segments) = nullptr;
  void (*scale)(const ShardView& view, const std::vector<Segment>& segments,
                float coefficient) = nullptr;
  bool (*unscale_and_check)(const ShardView& view, const std::vector<Segment>& segments,
                            float inv_scale) = nullptr;
  // The allocator of a GPU communicator's scalars on `device` (see all_reduce_scalar).
  Allocator& (*scalar_allocator)(Device device) = nullptr;
};

// The entry of `device`'s kind; throws InvalidArgument naming `what` and the device when this
// program has none (a build without that backend).
const DeviceLoops& device_loops(Device device, const std::string& what);

// The loops of the view's device (on_device(view) must hold), through device_loops.
void device_adamw(const ShardView& view, const std::vector<Segment>& segments,
                  const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const ops::math::AdamWStep& step);
void device_sgd(const ShardView& view, const std::vector<Segment>& segments,
                const Tensor& momentum_buffer, const ops::math::SgdStep& step, bool nesterov);
double device_sum_of_squares(const ShardView& view, const std::vector<Segment>& segments);
void device_scale(const ShardView& view, const std::vector<Segment>& segments, float coefficient);
bool device_unscale_and_check(const ShardView& view, const std::vector<Segment>& segments,
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
