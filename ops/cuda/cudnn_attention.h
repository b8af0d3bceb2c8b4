// Fused scaled-dot-product attention FORWARD through cuDNN's graph (backend) API, for the
// attention op (ops/attention.cc) where the installed cuDNN and the GPU support it; the plain
// kernel of ops/cuda/nn_kernels.h (attention_forward) is the fallback and the reference.
//
// Contract: exactly attention_forward's without valid_lengths (nn_kernels.h): qkv [B, T, 3C] of
// fp16/bf16 = [q | k | v], head h at columns h·D .. (h+1)·D of each, D = C / H; out [B, T, C] of
// the same dtype; lse fp32 [B, H, T] = each row's natural-log Σ exp of the visible scaled scores
// (scale 1/√D), which is what the plain backward (attention_backward) recomputes probabilities
// from — so a cuDNN forward and a plain backward form one consistent op. Causal: row i sees keys
// 0..i. Padding (valid_lengths) is not handled here: the op keeps it on the plain kernel.
//
// The cuDNN graph (uids in cudnn_attention.cc): Q·Kᵀ (fp32) → × scale → [causal: GEN_INDEX row
// and column, row >= column, else the lowest float] → softmax with stats (MAX, SUB, EXP, ADD
// reduction, LOG, max + log = the lse written straight into `lse`, DIV) → P·V = out. Q, K, V and
// O are strided views of the packed buffers (nothing is copied): Q at qkv, K at qkv + C
// elements, V at qkv + 2C, each [B, H, T, D] with strides [T·3C, D, 3C, 1]; O [B, H, T, D] with
// strides [T·C, D, C, 1]; Stats [B, H, T, 1] with strides [H·T, T, 1, 1].
//
// When cuDNN is not used, cudnn_attention_forward returns false (nothing enqueued) and says why:
//   ZS_CUDNN_ATTENTION=0 in the environment (read at every call); built without cuDNN
//   (ZS_HAVE_CUDNN=0); fp32 (the fused engine takes fp16/bf16 only); D not a multiple of 8 or
//   above 128; a GPU below compute capability 8.0; cuDNN below 8.9 (or below 9.0 with T not a
//   multiple of 64, a known backend limitation there); a pointer not 16-byte aligned; an empty
//   problem; or cuDNN refusing the graph (NOT_SUPPORTED from a finalize, or no engine config the
//   heuristics offer — modes A then B — finalizing into an execution plan). Every answer but the
//   per-call ones (environment, alignment) is cached per (shape, dtype, causal) key in the handle,
//   and a refusal is logged once per key at debug level. Unexpected cuDNN errors throw
//   (runtime/cuda/cudnn_check.h).
//
// Ownership and streams: CudnnHandle owns a cudnnHandle_t bound to its stream's device and set to
// that stream — created on the first forward that passes the cheap checks, so fp32 models never
// create one — and the execution plans built for it (destroyed before the handle). A forward
// enqueues on the handle's stream and returns without synchronizing; the caller keeps qkv, out,
// lse and the workspace alive until the stream has run it. The workspace comes from the caller's
// `workspace` callback (called at most once per forward with the plan's byte count, never for
// 0 bytes); with a stream-ordered allocator the returned memory may be freed right after this
// returns (the free is ordered after the work).
//
// Thread-safety: a CudnnHandle (and its plan cache) is used by one thread at a time — cuDNN's rule
// for handles; thread_cudnn_handle() gives each thread its own. This header is plain C++ (no
// cuDNN or CUDA syntax): ops/attention.cc includes it without the cuDNN headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "runtime/cuda/allocator.h"
#include "runtime/cuda/stream.h"
#include "runtime/dtype.h"
#include "runtime/macros.h"

namespace zs::ops::cuda {

// Returns `bytes` (> 0) of device memory usable on the handle's stream, 16-byte aligned.
using CudnnWorkspaceFn = std::function<void*(size_t bytes)>;

class CudnnHandle {
 public:
  // A handle for `stream` (which must outlive it); the cudnnHandle_t itself is created lazily.
  explicit CudnnHandle(const zs::cuda::Stream& stream);
  ~CudnnHandle();
  ZS_DISALLOW_COPY(CudnnHandle);

  const zs::cuda::Stream& stream() const { return stream_; }

  // The cuDNN side: the cudnnHandle_t, the device's compute capability and the plan cache
  // (defined in cudnn_attention.cc; empty when built without cuDNN).
  struct State;
  State& state() { return *state_; }

 private:
  const zs::cuda::Stream& stream_;
  std::unique_ptr<State> state_;
};

// The calling thread's CudnnHandle for `allocator`'s stream: created on first use and cached per
// (thread, allocator) like OpContext::cublas() (ops/cuda/context.h); the entry of an allocator
// that is gone is dropped at the thread's next lookup.
CudnnHandle& thread_cudnn_handle(const zs::cuda::CudaAllocator& allocator);

// False when ZS_CUDNN_ATTENTION is set to "0" (the plain kernel then always runs).
bool cudnn_attention_enabled();

// Enqueues the fused forward on handle.stream() and returns true, or returns false having
// enqueued nothing; `why_not` (optional) then receives the reason. See the file comment.
bool cudnn_attention_forward(CudnnHandle& handle, const void* qkv, void* out, float* lse,
                             int64_t batch, int64_t seq, int64_t channels, int64_t n_head,
                             bool causal, DType dtype, const CudnnWorkspaceFn& workspace,
                             std::string* why_not = nullptr);

}  // namespace zs::ops::cuda
