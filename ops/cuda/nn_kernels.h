// CUDA kernel launchers of the model ops that are more than element-wise: softmax cross-entropy,
// embedding and fused self-attention. Each mirrors the exact contract of its CPU op
// (ops/cross_entropy.cc, ops/embedding.cc, ops/attention.cc) and computes with the same
// ZS_HOST_DEVICE math (ops/math/cross_entropy.h, ops/math/softmax.h, runtime/half.h), so the CPU
// tests cover the formulas and tests/cuda/nn_kernels_test.cc compares each launcher with the CPU op
// wherever a GPU is present.
//
// Conventions (as ops/cuda/kernels.h):
// - Pointers are device memory; fp32/fp16/bf16 `DType`s say how floating storage is read and
//   written; compute is fp32 (and double where the CPU sums in double).
// - Each launcher enqueues on `stream` and returns at once; nothing synchronizes the host. The
//   caller keeps every buffer alive until the stream has run the work. Empty problems launch no
//   kernel (where the CPU op still defines an output — a zero loss, a zeroed gradient — it is
//   written with cudaMemsetAsync on `stream`).
// - Argument errors (dtypes, sizes, head_dim) throw InvalidArgument before anything is enqueued;
//   launch errors are thrown through ZS_CUDA_CHECK; errors while a kernel runs surface at the next
//   synchronizing call.
// - Data errors the CPU op throws for (a target or id out of range, a bad valid length) cannot be
//   thrown here without a host sync. Instead the launcher records the first offending index in a
//   caller-provided device int32 `first_bad_*` with atomicMin, skips that entry without reading
//   out of bounds, and the tensor-level op reads the flag back with its result and throws the CPU
//   op's message. The caller sets the flag to INT32_MAX (or any value >= the count of entries)
//   beforehand, on the same stream; several launches may share one flag.
//
// What equals the CPU bit for bit, and what only within tolerance (and why):
// - embedding forward (bit copies) and backward (same stable grouping by id, same fp32 sums in
//   position order, one write per element): bitwise.
// - cross-entropy: the row max is exact (max is order-free). log Σ exp differs by a few fp32 ulps
//   (the block sums in another order than the CPU's sequential loop; CUDA's expf/logf differ from
//   glibc's by <= 2 ulp), and so does the row loss. The mean is the CPU's exact procedure (row
//   losses summed in row order in double, divided by the count in double, rounded to fp32), so the
//   device loss equals what the CPU would compute from the same row losses, bit for bit. The
//   gradient is within a few ulps (expf; nvcc contracts the accumulate add into an FMA).
// - attention: within tolerance. Scores are warp dot products (a different summation order from the
//   CPU's GEMMs), the softmax is accumulated online over tiles of 32 keys (the CPU normalizes a
//   whole row at once), and dK/dV sum over queries in one sequential loop where the CPU sums per
//   query block. exp is the shared exp_approx polynomial, so it is not a source of difference.
//   Masking is exact: masked keys get probability 0 and rows that see no key output exact zeros.
//
// This header is plain C++ (no CUDA syntax): host code includes it without nvcc.
// Thread-safety: the launchers keep no state; they may be called from any thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "runtime/dtype.h"

namespace zs::ops::cuda {

// ---- Softmax cross-entropy over rows of `vocab` logits (ops/cross_entropy.h).
//
// Forward, per row r with target t = targets[r] (int32 [rows]):
//   ignored (t == ignore_index): row_max = log_sum = row_loss = 0, not counted;
//   out of range (t outside [0, vocab) and not ignore_index): treated as ignored, and
//     *first_bad_row = min(*first_bad_row, r) — the CPU op throws "targets[r] = t is out of range";
//   otherwise: row_max = max logit, log_sum = log Σ exp(logit − row_max) (fp32 [rows], saved for
//     backward as the CPU op saves them), row_loss = (row_max − logit[t]) + log_sum.
// Then *loss (device fp32 scalar) = Σ_r row_loss[r] summed in row order in double / count, or 0
// when count == 0; *valid_count (device int64) = count, the number of in-range, non-ignored
// targets (the divisor, = count_valid_targets() when every target is valid).
// logits [rows, vocab] of `dtype` (fp32/fp16/bf16), vocab >= 1. One block per row; the loss is a
// one-block kernel that adds the rows on one thread (O(rows) dependent double adds, as the CPU
// does: that order is what makes the loss bitwise reproducible). rows == 0: *loss = 0 and
// *valid_count = 0 by memset, no kernel. rows <= INT32_MAX.
void cross_entropy_forward(const void* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                           int32_t ignore_index, DType dtype, float* row_max, float* log_sum,
                           float* row_loss, float* loss, int64_t* valid_count,
                           int32_t* first_bad_row, cudaStream_t stream);

// Backward into dlogits [rows, vocab] of `dlogits_dtype` (any of fp32/fp16/bf16, the gradient
// sink's dtype): per element (softmax − onehot(t)) · scale with scale = *dloss / *valid_count (0
// when the count is 0), both read on the device (dloss: the upstream gradient of the loss, device
// fp32 scalar). Written (`accumulate` false) or added to the sink's value in fp32 and rounded once
// (`accumulate` true). Ignored and out-of-range rows: zeros, or untouched when accumulating.
// row_max/log_sum/valid_count are the forward's outputs. rows == 0 launches nothing.
void cross_entropy_backward(const void* logits, const int32_t* targets, const float* row_max,
                            const float* log_sum, const float* dloss, const int64_t* valid_count,
                            int64_t rows, int64_t vocab, int32_t ignore_index, DType dtype,
                            void* dlogits, DType dlogits_dtype, bool accumulate,
                            cudaStream_t stream);

// ---- Embedding (ops/embedding.h). table [vocab, cols] of `dtype`, ids int32 [positions] (any
// shape, flattened).
//
// Forward: out[p, :] = table[ids[p], :], bit copies. An id outside [0, vocab): out[p, :] = 0 and
// *first_bad_position = min(*first_bad_position, p) (the flat position; the CPU op throws naming
// it). positions == 0 or cols == 0 launches nothing. positions <= INT32_MAX.
void embedding_forward(const void* table, const int32_t* ids, void* out, int64_t vocab,
                       int64_t cols, int64_t positions, DType dtype, int32_t* first_bad_position,
                       cudaStream_t stream);

// Bytes of device workspace embedding_backward needs for `positions` ids into `vocab` rows: the
// sort's keys and values (in and out), the per-row run bounds, CUB's temporary storage and
// alignment slack. The caller allocates it (from its own allocator, stream-ordered on `stream`),
// and may reuse it after the stream has run the backward. Asks CUB for its temporary size, which
// queries the current device (call it with the device the backward will run on current); 0 when
// positions == 0.
size_t embedding_backward_workspace_bytes(int64_t positions, int64_t vocab);

// Backward: dtable[v, :] (sink of `dtable_dtype`, fp32/fp16/bf16) = Σ dout[p, :] over the positions
// p with ids[p] == v, in increasing p, in fp32 from 0 (dout [positions, cols] of `dout_dtype`, read
// exactly as fp32), written once — added to the sink's value in fp32 and rounded once when
// `accumulate`. Rows no id hits: zeros in a fresh sink, untouched when accumulating. Bitwise equal
// to the CPU op, deterministic. How: ids are paired with their positions and sorted by id with
// CUB's stable LSD radix sort (equal ids keep increasing positions), a kernel marks each id's run
// [begin, end) in the sorted order, and one thread per (row, column) sums its run in order. Ids
// outside [0, vocab) (overwritten since forward) are left out and flagged in *first_bad_position.
// positions == 0: the sink is zeroed (memset) unless accumulating. workspace_bytes must be at
// least embedding_backward_workspace_bytes(positions, vocab); any alignment is accepted.
void embedding_backward(const int32_t* ids, const void* dout, DType dout_dtype, int64_t positions,
                        int64_t vocab, int64_t cols, void* dtable, DType dtable_dtype,
                        bool accumulate, void* workspace, size_t workspace_bytes,
                        int32_t* first_bad_position, cudaStream_t stream);

// ---- Fused multi-head self-attention (ops/attention.h): qkv [batch, seq, 3·channels] of `dtype`
// = [q | k | v], head h at columns h·D .. (h+1)·D of each, D = channels / n_head.
inline constexpr int64_t kAttentionMaxHeadDim = 256;

// Forward: out [batch, seq, channels] of `dtype`, out_h = softmax(q_h·k_hᵀ/√D + mask)·v_h, and
// lse fp32 [batch, n_head, seq] = each row's log Σ exp of the visible scores (saved for backward,
// as the CPU op saves it); the batch·n_head·seq·seq matrix is never stored. Row i of sequence b
// sees keys [0, masked_row_length(i, causal, valid_b)) with valid_b = valid_lengths[b] (device
// int32 [batch]) or seq when valid_lengths is null; a row that sees no key outputs zeros with lse =
// −inf. A length outside [0, seq] is clamped into it (no out-of-bounds read) and recorded in
// *first_bad_length = min(.., b) (may be null when valid_lengths is). One warp per query row
// (each lane keeps ⌈D/32⌉ of q and of the output accumulator in registers), keys streamed from
// global memory (L1/L2-cached: the 4 warps of a block are consecutive rows, mostly of one head) in
// tiles of 32 with an online softmax. head_dim > kAttentionMaxHeadDim throws InvalidArgument. An
// empty problem (batch, seq or channels 0) launches nothing. The attention op first tries cuDNN's
// fused forward when there is no padding (ops/cuda/cudnn_attention.h: the same out and lse
// contract, fp16/bf16 only) and falls back to this launcher; this one is also its test reference.
void attention_forward(const void* qkv, void* out, float* lse, int64_t batch, int64_t seq,
                       int64_t channels, int64_t n_head, bool causal, const int32_t* valid_lengths,
                       int32_t* first_bad_length, DType dtype, cudaStream_t stream);

// Backward into dqkv [batch, seq, 3·channels] of `dqkv_dtype` (qkv's dtype or fp32), every element
// written once: overwritten, or added to in fp32 and rounded once when `accumulate`. dout is the
// gradient of out (`dtype`), out and lse the forward's outputs; delta is device fp32 workspace of
// batch·n_head·seq floats. Probabilities are recomputed from lse (softmax_prob_from_lse) with the
// forward's exact score function. Deterministic, no atomics: a kernel computes
// delta_i = Σ dO_i·O_i, one warp per query row loops over its keys in order for dQ, one warp per
// key row loops over the queries that see it in order for dK and dV. Keys no query sees (padding)
// get zero dK/dV; rows that see no key get zero dQ.
void attention_backward(const void* qkv, const void* out, const float* lse, const void* dout,
                        float* delta, void* dqkv, int64_t batch, int64_t seq, int64_t channels,
                        int64_t n_head, bool causal, const int32_t* valid_lengths, DType dtype,
                        DType dqkv_dtype, bool accumulate, cudaStream_t stream);

}  // namespace zs::ops::cuda
