// Softmax cross-entropy kernels (see nn_kernels.h): one block per row for the row statistics and
// the gradient, built from ops/math/cross_entropy.h's per-element functions; a one-block kernel for
// the count of valid targets and the mean loss, which adds the row losses in row order in double on
// one thread exactly as ops/cross_entropy.cc does, so the loss is reproducible bit for bit.
#include <climits>

#include "ops/cuda/launch.cuh"
#include "ops/cuda/nn_kernels.h"
#include "ops/math/cross_entropy.h"
#include "runtime/cuda/check.h"

namespace zs::ops::cuda {
namespace {

using detail::load;
using detail::store;
using detail::warp_sum;

constexpr int kWarp = 32;
constexpr int kRowThreads = 256;  // one block per row: vocabularies are 10..10^5 wide
constexpr int kRowWarps = kRowThreads / kWarp;

__device__ __forceinline__ float warp_max(float value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

// Block-wide max and sum (every thread gets the result): each warp's result (`warp_value`, the
// same in all its lanes) goes to `scratch`, one value per warp, and the warps' values are combined
// in warp order. The __syncthreads before reading scratch back and after the last read make
// back-to-back calls safe.
template <typename Combine>
__device__ __forceinline__ float block_combine(float warp_value, float* scratch, Combine combine) {
  if (threadIdx.x % kWarp == 0) scratch[threadIdx.x / kWarp] = warp_value;
  __syncthreads();
  float result = scratch[0];
  for (int w = 1; w < kRowWarps; ++w) result = combine(result, scratch[w]);
  __syncthreads();
  return result;
}
__device__ float block_max(float value, float* scratch) {
  return block_combine(warp_max(value), scratch, [](float a, float b) { return fmaxf(a, b); });
}
__device__ float block_sum(float value, float* scratch) {
  return block_combine(warp_sum(value), scratch, [](float a, float b) { return a + b; });
}

__device__ __forceinline__ bool target_in_range(int32_t target, int64_t vocab) {
  return target >= 0 && static_cast<int64_t>(target) < vocab;
}

template <typename T>
__global__ void cross_entropy_rows_kernel(const T* logits, const int32_t* targets, int64_t vocab,
                                          int32_t ignore_index, float* row_max, float* log_sum,
                                          float* row_loss, int32_t* first_bad_row) {
  __shared__ float scratch[kRowWarps];
  const int64_t row = blockIdx.x;
  const int32_t target = targets[row];
  // Ignored first (ignore_index may lie inside [0, vocab)), then the range check, as the CPU.
  if (target == ignore_index || !target_in_range(target, vocab)) {
    if (threadIdx.x == 0) {
      row_max[row] = 0.0f;
      log_sum[row] = 0.0f;
      row_loss[row] = 0.0f;
      if (target != ignore_index) atomicMin(first_bad_row, static_cast<int32_t>(row));
    }
    return;  // the whole block leaves: no barrier below is reached by part of it
  }
  const T* row_logits = logits + row * vocab;
  float partial_max = -INFINITY;
  for (int64_t i = threadIdx.x; i < vocab; i += kRowThreads) {
    partial_max = fmaxf(partial_max, load(row_logits, i));
  }
  // The max is exact whatever the order, so it equals the CPU's sequential max bit for bit.
  const float max_logit = block_max(partial_max, scratch);
  float partial_sum = 0.0f;
  for (int64_t i = threadIdx.x; i < vocab; i += kRowThreads) {
    partial_sum += math::cross_entropy_exp_term(load(row_logits, i), max_logit);
  }
  const float sum = block_sum(partial_sum, scratch);
  if (threadIdx.x == 0) {
    const float row_log_sum = logf(sum);
    row_max[row] = max_logit;
    log_sum[row] = row_log_sum;
    row_loss[row] = math::cross_entropy_loss(max_logit, row_log_sum, load(row_logits, target));
  }
}

// One block: the count of valid targets (an integer sum, any order) and the mean loss. Thread 0
// adds the row losses in row order in double — the CPU's loop — loading a batch of rows ahead so
// the loads overlap the chain of dependent adds.
constexpr int kFinalizeThreads = 256;
constexpr int kFinalizeBatch = 8;

__global__ void cross_entropy_loss_kernel(const int32_t* targets, const float* row_loss,
                                          int64_t rows, int64_t vocab, int32_t ignore_index,
                                          float* loss, int64_t* valid_count) {
  __shared__ long long warp_counts[kFinalizeThreads / kWarp];
  long long count = 0;
  for (int64_t r = threadIdx.x; r < rows; r += kFinalizeThreads) {
    const int32_t target = targets[r];
    count += target != ignore_index && target_in_range(target, vocab) ? 1 : 0;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    count += __shfl_xor_sync(0xffffffffu, count, offset);
  }
  if (threadIdx.x % kWarp == 0) warp_counts[threadIdx.x / kWarp] = count;
  __syncthreads();
  if (threadIdx.x != 0) return;
  long long total_count = 0;
  for (int w = 0; w < kFinalizeThreads / kWarp; ++w) total_count += warp_counts[w];
  double total = 0.0;
  int64_t r = 0;
  for (; r + kFinalizeBatch <= rows; r += kFinalizeBatch) {
    float batch[kFinalizeBatch];
#pragma unroll
    for (int k = 0; k < kFinalizeBatch; ++k) batch[k] = row_loss[r + k];
#pragma unroll
    for (int k = 0; k < kFinalizeBatch; ++k) total += static_cast<double>(batch[k]);
  }
  for (; r < rows; ++r) total += static_cast<double>(row_loss[r]);
  *valid_count = total_count;
  *loss = total_count > 0 ? static_cast<float>(total / static_cast<double>(total_count)) : 0.0f;
}

template <typename T, typename S>
__global__ void cross_entropy_backward_kernel(const T* logits, const int32_t* targets,
                                              const float* row_max, const float* log_sum,
                                              const float* dloss, const int64_t* valid_count,
                                              int64_t vocab, int32_t ignore_index, S* dlogits,
                                              bool accumulate) {
  const int64_t row = blockIdx.x;
  const int32_t target = targets[row];
  S* row_grad = dlogits + row * vocab;
  if (target == ignore_index || !target_in_range(target, vocab)) {
    if (!accumulate) {
      for (int64_t i = threadIdx.x; i < vocab; i += kRowThreads) store(row_grad, i, 0.0f);
    }
    return;
  }
  // The CPU's scale: dloss / count in fp32 (count converted with rounding to nearest), 0 when no
  // row counts — then no row reaches this point anyway.
  const int64_t count = *valid_count;
  const float scale = count > 0 ? *dloss / static_cast<float>(count) : 0.0f;
  const T* row_logits = logits + row * vocab;
  const float mx = row_max[row];
  const float ls = log_sum[row];
  for (int64_t i = threadIdx.x; i < vocab; i += kRowThreads) {
    const float value = math::cross_entropy_grad(load(row_logits, i), mx, ls, i == target, scale);
    store(row_grad, i, accumulate ? load(row_grad, i) + value : value);
  }
}

void check_float_dtype(const char* op, const char* what, DType dtype) {
  ZS_CHECK(dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16, op, ": ", what,
           " dtype ", dtype_name(dtype), " is not supported (expected fp32, fp16 or bf16)");
}

void check_rows(const char* op, int64_t rows, int64_t vocab) {
  ZS_CHECK(rows >= 0 && rows <= INT32_MAX, op, ": ", rows,
           " rows; expected 0..2^31-1 (one block per row, int32 row flag)");
  ZS_CHECK(vocab >= 1, op, ": vocab = ", vocab, "; the logits need at least one class");
}

}  // namespace

void cross_entropy_forward(const void* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                           int32_t ignore_index, DType dtype, float* row_max, float* log_sum,
                           float* row_loss, float* loss, int64_t* valid_count,
                           int32_t* first_bad_row, cudaStream_t stream) {
  constexpr const char* kOp = "cuda cross_entropy_forward";
  check_rows(kOp, rows, vocab);
  check_float_dtype(kOp, "the logits'", dtype);
  ZS_CHECK(loss != nullptr && valid_count != nullptr, kOp,
           ": the loss and valid_count outputs must be device pointers, got null");
  if (rows == 0) {
    // The CPU op's N == 0 result: loss 0, count 0 (all-zero bits are 0.0f and 0).
    ZS_CUDA_CHECK(cudaMemsetAsync(loss, 0, sizeof(float), stream));
    ZS_CUDA_CHECK(cudaMemsetAsync(valid_count, 0, sizeof(int64_t), stream));
    return;
  }
  ZS_CHECK(first_bad_row != nullptr, kOp,
           ": first_bad_row must be a device int32 (set to INT32_MAX before the call)");
  ZS_CHECK(logits != nullptr && targets != nullptr && row_max != nullptr && log_sum != nullptr &&
               row_loss != nullptr,
           kOp, ": logits, targets, row_max, log_sum and row_loss must be device pointers");
  ZS_DISPATCH_FLOAT(dtype, kOp, T, {
    cross_entropy_rows_kernel<T><<<static_cast<unsigned int>(rows), kRowThreads, 0, stream>>>(
        static_cast<const T*>(logits), targets, vocab, ignore_index, row_max, log_sum, row_loss,
        first_bad_row);
    ZS_CUDA_CHECK(cudaGetLastError());
  });
  cross_entropy_loss_kernel<<<1, kFinalizeThreads, 0, stream>>>(targets, row_loss, rows, vocab,
                                                                ignore_index, loss, valid_count);
  ZS_CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_backward(const void* logits, const int32_t* targets, const float* row_max,
                            const float* log_sum, const float* dloss, const int64_t* valid_count,
                            int64_t rows, int64_t vocab, int32_t ignore_index, DType dtype,
                            void* dlogits, DType dlogits_dtype, bool accumulate,
                            cudaStream_t stream) {
  constexpr const char* kOp = "cuda cross_entropy_backward";
  check_rows(kOp, rows, vocab);
  check_float_dtype(kOp, "the logits'", dtype);
  check_float_dtype(kOp, "the gradient sink's", dlogits_dtype);
  if (rows == 0) return;
  ZS_CHECK(dloss != nullptr && valid_count != nullptr, kOp,
           ": dloss and valid_count must be device pointers (the upstream gradient and the "
           "forward's count), got null");
  ZS_DISPATCH_FLOAT(dtype, kOp, T, {
    ZS_DISPATCH_FLOAT(dlogits_dtype, "cuda cross_entropy_backward (gradient sink)", S, {
      cross_entropy_backward_kernel<T, S>
          <<<static_cast<unsigned int>(rows), kRowThreads, 0, stream>>>(
              static_cast<const T*>(logits), targets, row_max, log_sum, dloss, valid_count, vocab,
              ignore_index, static_cast<S*>(dlogits), accumulate);
      ZS_CUDA_CHECK(cudaGetLastError());
    });
  });
}

}  // namespace zs::ops::cuda
