// Embedding lookup (token and position embeddings), with autograd into the table.
//
// The output is stored in the table's dtype (fp32, fp16 or bf16: rows are copied bit for bit) on
// the table's allocator, in the current memory category (activations outside any scope). When
// recorded for backward the op saves the ids (a handle, no copy: do not overwrite them before
// backward). Backward scatter-adds the upstream gradient into the table's gradient: ids are
// bucketed by row with a stable counting sort, then each hit row sums its positions' gradients
// in position order in fp32 and is written once (added when the sink accumulates); rows no id
// hits get zeros in a fresh sink and are left alone in an accumulating one. Every row is written
// by one thread, so the result is race-free and independent of the OpenMP thread count.
//
// Thread-safety: the function keeps no state; concurrent calls are safe.
#pragma once

#include "runtime/tensor.h"

namespace zs::ops {

// out[s..., :] = table[ids[s...], :]. table: [V, C], floating; ids: int32 of any shape S (ids
// 0..T-1 for position embeddings). Returns [S..., C] in the table's dtype.
// Throws InvalidArgument on other shapes or dtypes, and for an id outside [0, V), naming its
// position, its value and V.
Tensor embedding(const Tensor& table, const Tensor& ids);

}  // namespace zs::ops
