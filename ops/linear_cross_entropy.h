// The language-model head and its loss fused: cross_entropy(linear(h, weight), targets) without
// ever holding the [N, V] logits or their gradient.
//
// The rows are processed in chunks of head_chunk_rows(V). Forward computes a chunk's logits
// h_chunk · weightᵀ, its rows' max, log-sum-exp and losses, and drops the logits; it saves h and
// weight (handles, no copies: do not overwrite them before backward), the targets and the fp32
// [N] row max and log-sum-exp, as cross_entropy does. Backward recomputes each chunk's logits
// (the same GEMM, the same bits), forms the chunk's dlogits = (softmax − onehot) · dloss / count
// and runs linear's backward on the chunk: dh_chunk = dlogits · weight, dweight += dlogitsᵀ ·
// h_chunk. So the head holds one chunk's logits and gradient at a time (category activations, as
// the unfused logits and their gradient were), besides h's gradient.
//
// Semantics are cross_entropy's: the mean over the rows whose target is not ignore_index, the same
// checks and messages, the loss summed in row order in double: the loss value is bitwise
// cross_entropy(linear(h, weight), targets)'s wherever the GEMM rounds a row alike for any number
// of rows (the CPU GEMMs here do at GPT-2's shapes; tests/ops/linear_cross_entropy_test.cc).
// Gradients: with one chunk (N <= head_chunk_rows) the GEMMs are linear's, operand for operand, so
// the gradients are bitwise the unfused ones; with several, dweight is summed chunk by chunk (beta
// = 1 GEMMs), which rounds differently from one GEMM over all N rows — close, not the same bits.
//
// On a device (cuda:N) the op runs the unfused ops (linear, then cross_entropy) through their
// device kernels: the same results as the two ops, the logits held as before.
//
// Thread-safety: the functions keep no state; concurrent calls are safe. Results do not depend on
// the OpenMP thread count.
#pragma once

#include <cstdint>

#include "ops/cross_entropy.h"
#include "runtime/tensor.h"

namespace zs::ops {

// How many fp32 bytes one chunk's logits may take: head_chunk_rows() sizes chunks to it. 64 MiB
// is 333 rows of GPT-2's 50257-word vocabulary, 13 chunks at B·T = 4096. Every chunk adds its
// dweight into the whole [V, C] gradient (a read and write of 154 MiB at GPT-2) and runs GEMMs
// whose row count is the chunk's, so few large chunks are faster: zs-bench-head measured 64-row
// chunks at about 2× the unfused head and 166-row ones slower than 256 (noisy). The head's two
// chunk buffers (128 MiB at GPT-2) stay far below the 1.5 GiB of full logits and gradient, and
// below what a checkpointed GPT-2 124M holds in a block's backward.
constexpr int64_t kHeadChunkLogitBytes = int64_t{64} << 20;

// The rows per chunk for a vocabulary of `vocab` words: kHeadChunkLogitBytes / (4 · vocab), at
// least 1. A batch of at most this many rows is one chunk. The memory model sizes the head from it
// (train/memory_model.h).
int64_t head_chunk_rows(int64_t vocab);

// Mean over the rows whose target is not `ignore_index` of −log softmax(h · weightᵀ)[row][target].
//   h: [N, K], weight: [V, K] (linear's [out_features, in_features]), one floating dtype; the
//     logits, as linear's output, are in that dtype, their statistics in fp32.
//   targets: int32 [N], each in [0, V) or ignore_index.
//   chunk_rows: rows per chunk, 0 for head_chunk_rows(V) (tests pass small ones).
// Returns a fp32 tensor of shape [1]. Throws InvalidArgument as linear and cross_entropy do (a
// target out of range names its row and value), and for chunk_rows < 0.
Tensor linear_cross_entropy(const Tensor& h, const Tensor& weight, const Tensor& targets,
                            int32_t ignore_index = kDefaultIgnoreIndex, int64_t chunk_rows = 0);

}  // namespace zs::ops
