// Fused multi-head scaled dot-product self-attention with autograd: causal (GPT-2) or
// bidirectional (BERT-style encoders), optionally with per-sequence key padding.
//
// Input is the fused QKV projection, output is ready for the output projection:
//   qkv [B, T, 3C] = [q (C) | k (C) | v (C)] along the last dim; head h uses columns
//   h·D .. (h+1)·D of each of q, k and v (D = C / n_head);
//   out [B, T, C], head h at columns h·D:  out_h = softmax(q_h · k_h^T / sqrt(D) + mask) · v_h.
//
// "Fused": the B·H·T·T attention matrix is never stored. The forward saves only qkv, the output
// and the per-row log-sum-exp (fp32 [B, H, T], category activations); backward recomputes the
// probabilities one (batch, head) pair at a time. Temporary scores live in a per-thread workspace
// (category workspace) of O(T) rows per thread; the exact peak is stated in attention.cc.
//
// Dtypes: qkv may be fp32, fp16 or bf16; compute is fp32 and the output (and qkv's gradient) has
// qkv's dtype. Output and saved tensors are allocated on qkv's allocator in the current memory
// category (activations outside any scope). Results do not depend on the thread count.
//
// Thread-safety: the functions may run concurrently on distinct tensors (each rank thread has its
// own tape); they use up to cpu::intra_op_threads() OpenMP threads of the caller.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace zs::ops {

// Self-attention over qkv [B, T, 3C] with n_head heads; causal: position t attends to positions
// <= t. Returns [B, T, C] in qkv's dtype. Throws InvalidArgument unless qkv is a 3-D floating CPU
// tensor whose last dim is a positive multiple of 3·n_head, and n_head >= 1.
Tensor attention(const Tensor& qkv, int64_t n_head, bool causal);

// The same with key padding for padded batches: valid_lengths is int32 [B]; in sequence b only
// keys t < valid_lengths[b] get weight (queries at padded positions still attend to the valid
// keys). A query row that sees no key (valid_lengths[b] == 0) outputs zeros and passes no
// gradient. Each length must be in [0, T]. An undefined valid_lengths means no padding.
Tensor attention(const Tensor& qkv, int64_t n_head, bool causal, const Tensor& valid_lengths);

}  // namespace zs::ops
