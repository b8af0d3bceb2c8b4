// The CPU row loops of softmax cross-entropy, shared by ops::cross_entropy (ops/cross_entropy.cc)
// and the fused head ops::linear_cross_entropy (ops/linear_cross_entropy.cc), so that both check
// the targets with one message, compute each row's statistics and gradient with one loop around
// the row math (ops/math/cross_entropy.h) and form the mean in one order.
//
// Internal to ops/ (namespace zs::ops::detail). CPU tensors only. The functions keep no state;
// results do not depend on the OpenMP thread count (rows are independent; the mean is summed in
// row order in double).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/tensor.h"

namespace zs::ops::detail {

// Throws InvalidArgument naming `op`, the row and the value unless targets[row] = `target` is in
// [0, vocab) or equals ignore_index; `logits` describes the logits the targets index.
void check_cross_entropy_target(const char* op, const std::string& logits, int64_t vocab,
                                int64_t row, int32_t target, int32_t ignore_index);

// Checks the `rows` targets in order (the first bad one is reported) and returns how many are not
// ignore_index: the mean's divisor.
int64_t count_checked_targets(const char* op, const std::string& logits, int64_t vocab,
                              const int32_t* targets, int64_t rows, int32_t ignore_index);

// For each row r of the CPU logits [rows, vocab] (any floating dtype): row_max[r], log_sum[r] and
// row_loss[r] = −log softmax(row)[targets[r]]; all three 0 for an ignored row. Targets checked.
void cross_entropy_rows_forward(const Tensor& logits, const int32_t* targets, int32_t ignore_index,
                                float* row_max, float* log_sum, float* row_loss);

// The mean of row_loss[0, rows) over `count` valid rows, summed in row order in double; 0 when
// count is 0.
float cross_entropy_mean(const float* row_loss, int64_t rows, int64_t count);

// dst (+)= the gradient of the rows of the CPU logits [rows, vocab] scaled by `scale` (dloss /
// count), in dst's dtype; ignored rows get zeros (left as they are when accumulating).
void cross_entropy_rows_backward(const Tensor& logits, const int32_t* targets, int32_t ignore_index,
                                 const float* row_max, const float* log_sum, float scale,
                                 const Tensor& dst, bool accumulate);

}  // namespace zs::ops::detail
