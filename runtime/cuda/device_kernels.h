// The CUDA entry of the runtime's device hook table (runtime/device_kernels.h): downloads and
// uploads for Tensor::to_vector / copy_from / item, and small kernels for Tensor::fill,
// zero_bytes and accumulate_into (the autograd tape's gradient sums).
//
// Stream order: every hook runs on the stream of the tensor's CudaAllocator — the stream the
// tensor was allocated on and the stream the ops on it use (ops/cuda/context.h) — so it is
// ordered after the work that produced the tensor without events. download/upload then block
// the host until the copy is complete (cudaStreamSynchronize on that stream): these are host
// helpers for tests, the tape's seed and setup, not a step's inner loop. fill/zero/accumulate
// are enqueued and return at once. accumulate_into's two tensors must share that stream (they
// do when they come from one allocator, or from allocators on one stream); otherwise it refuses
// with InvalidArgument rather than race.
//
// Math: conversions are runtime/half.h's (round to nearest even), the sum is the CPU's
// T(float(dst) + float(src)) — bitwise the CPU's accumulate_into.
//
// Thread-safety: install_cuda_device_kernels() may run concurrently (an atomic store of the same
// static table); the hooks keep no state.
#pragma once

namespace zs::cuda {

// Installs the CUDA table (idempotent). Called by CudaAllocator's constructor.
void install_cuda_device_kernels();

}  // namespace zs::cuda
