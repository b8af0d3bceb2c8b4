// Fused scaled-dot-product attention, FORWARD and BACKWARD, through cuDNN's graph (backend) API,
// for the attention op (ops/attention.cc) where the installed cuDNN and the GPU support it; the
// plain kernels of ops/cuda/nn_kernels.h (attention_forward, attention_backward) are the fallback
// and the reference.
//
// Forward contract: exactly attention_forward's without valid_lengths (nn_kernels.h): qkv
// [B, T, 3C] of fp16/bf16 = [q | k | v], head h at columns h·D .. (h+1)·D of each, D = C / H; out
// [B, T, C] of the same dtype; lse fp32 [B, H, T] = each row's natural-log Σ exp of the visible
// scaled scores (scale 1/√D), which is what both backwards recompute probabilities from — so a
// cuDNN forward and a plain backward form one consistent op, and so do a plain forward and a cuDNN
// backward. Causal: row i sees keys 0..i. Padding (valid_lengths) is not handled here: the op
// keeps it on the plain kernels.
//
// Backward contract: attention_backward's without valid_lengths, for dqkv of qkv's dtype only:
// from qkv, out, lse and dout (out's gradient, [B, T, C], qkv's dtype) it writes dqkv [B, T, 3C]
// = [dq | dk | dv], overwriting it, or adding to it when `accumulate` (cuDNN writes a staging copy
// of qkv's dtype in the workspace, then kernels.h add runs on the same stream: the sum is rounded
// once more than the plain kernel's). A sink of another dtype is the caller's business (the op
// takes the plain backward then).
//
// The cuDNN graphs (uids and the frontend sources they follow in cudnn_attention.cc):
//   forward: Q·Kᵀ (fp32) → × scale → [causal: GEN_INDEX row and column, row >= column, else the
//     lowest float] → softmax with stats (MAX, SUB, EXP, ADD reduction, LOG, max + log = the lse
//     written straight into `lse`, DIV) → P·V = out.
//   backward: dot = Σ_d dO ⊙ O (× 1, into an fp32 workspace [B, H, T, 1]); S = Q·Kᵀ × scale − lse
//     [causal mask as above]; P = exp(S); dV = Pᵀ·dO (P rounded to the i/o dtype); dP = dO·Vᵀ;
//     dS = (dP − dot) ⊙ P × scale; dK = dSᵀ·Q (dS rounded to the i/o dtype); dQ = dS·K, accumulated
//     in an fp32 workspace [B, H, T, D] (zeroed here) and copied out by an IDENTITY.
// Q, K, V, O, dO, dQ, dK and dV are strided views of the packed buffers (nothing is copied): Q at
// qkv, K at qkv + C elements, V at qkv + 2C, each [B, H, T, D] with strides [T·3C, D, 3C, 1] (dQ,
// dK, dV likewise in dqkv); O and dO [B, H, T, D] with strides [T·C, D, C, 1]; Stats [B, H, T, 1]
// with strides [H·T, T, 1, 1].
//
// When cuDNN is not used, the function returns false (nothing enqueued) and says why:
//   ZS_CUDNN_ATTENTION=0 in the environment (read at every call); built without cuDNN
//   (ZS_HAVE_CUDNN=0); fp32 (the fused engines take fp16/bf16 only); D not a multiple of 8 or
//   above 128; a GPU below compute capability 8.0; cuDNN below 8.9 (or below 9.0 with T not a
//   multiple of 64, a known backend limitation there); a pointer not 16-byte aligned; an empty
//   problem; or cuDNN refusing the graph (NOT_SUPPORTED from a finalize, or no engine config the
//   heuristics offer — modes A then B — finalizing into an execution plan). The backward also
//   declines what cudnn-frontend's SDPA backward declines or works around for this graph: T = 1,
//   cuDNN 9.10.0 and 9.10.1 (known bugs), cuDNN up to 9.15.0 with T not a multiple of 128 (there
//   the frontend adds a padding mask; without it the backward can produce NaNs), cuDNN below 8.9.6
//   with D not a multiple of 64. Every answer but the per-call ones (environment, alignment) is
//   cached per (pass, shape, dtype, causal) key in the handle, and a refusal is logged once per key
//   at debug level. Unexpected cuDNN errors throw (runtime/cuda/cudnn_check.h).
//
// Ownership and streams: CudnnHandle owns a cudnnHandle_t bound to its stream's device and set to
// that stream — created on the first call that passes the cheap checks, so fp32 models never
// create one — and the execution plans built for it (destroyed before the handle). A call
// enqueues on the handle's stream and returns without synchronizing; the caller keeps the buffers
// and the workspace alive until the stream has run it. The workspace comes from the caller's
// `workspace` callback (called at most once per call, never for 0 bytes; the backward always asks,
// for its fp32 dQ accumulator and dot rows at least); with a stream-ordered allocator the returned
// memory may be freed right after this returns (the free is ordered after the work).
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

// Returns `bytes` (> 0) of device memory usable on the handle's stream, 16-byte aligned (the
// backward places its regions at multiples of 256 bytes from the start, so each stays aligned).
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

// Enqueues the fused backward on handle.stream() and returns true, or returns false having
// enqueued nothing; `why_not` (optional) then receives the reason. dqkv is of `dtype` (qkv's),
// overwritten or, when `accumulate`, added to. See the file comment.
bool cudnn_attention_backward(CudnnHandle& handle, const void* qkv, const void* out,
                              const float* lse, const void* dout, void* dqkv, int64_t batch,
                              int64_t seq, int64_t channels, int64_t n_head, bool causal,
                              DType dtype, bool accumulate, const CudnnWorkspaceFn& workspace,
                              std::string* why_not = nullptr);

}  // namespace zs::ops::cuda
