// The CUDA entries of ops/linear.cc (ops/device_ops.h): cuBLAS GEMMs (ops/cuda/gemm.h) with the
// calling thread's handle on the tensors' stream, and the bias launchers of tensor_kernels.h.
//
// Thread-safety: no state beyond the thread's cuBLAS handle cache (ops/cuda/context.h).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "ops/cuda/context.h"
#include "ops/cuda/device_entries.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/tensor_kernels.h"
#include "runtime/cuda/check.h"

namespace zs::ops::cuda {
namespace {

// A leading dimension for cuBLAS, which wants at least 1 even for an empty matrix (the CPU's
// sgemm takes the row length as is).
int64_t ld(int64_t row_length) { return std::max<int64_t>(row_length, 1); }

// cuBLAS runs its fast tensor-core kernels only on 16-byte aligned operands. Seen on an H100 and
// an H200 with GPT-2's vocabulary (50257) as a dimension: 95–150 TFLOP/s against ~750 for the
// block's shapes (docs/cuda.md, docs/gpu-runs/). Two things must be aligned:
//   - each matrix's base and row length (its leading dimension);
//   - for 16-bit operands, the dimensions that are a row length: C's n always, and k where A or B
//     is stored with k along its rows. An aligned leading dimension alone is not enough (on the
//     H200, with C's rows padded to 50264 and n = 50257, cuBLAS still chose `..._align1`); where
//     m or n is the row length of A or B only, the aligned leading dimension suffices (the LM
//     head's dW ran at ~500 TFLOP/s so).
// So an operand that is not aligned runs from a padded copy in a workspace (cudaMemcpy2DAsync, one
// pass), with its extra rows and columns zeroed: zeros along k add nothing to the sums, and the
// extra columns of C are never copied back. The products and sums are the same; only cuBLAS's
// choice of kernel (and so its summation order, already not the CPU's) changes.
bool aligned_rows(const void* base, int64_t ld, DType dtype) {
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 &&
         (ld * static_cast<int64_t>(dtype_size(dtype))) % 16 == 0;
}

int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// A matrix as cuBLAS gets it: its data and row length, and the padded copy that holds it if any.
struct Operand {
  void* data;
  int64_t ld;
  Tensor padded;
};

// The rows × cols matrix at `base` (row length `ld`) as a padded_rows × padded_cols matrix whose
// base and row length are 16-byte aligned: the matrix itself where it already is and no padding
// is asked, else a copy in a workspace on `like`'s allocator whose extra rows and columns are
// zero. With `copy_in` false (C of a β = 0 product) the workspace is left undefined.
Operand aligned_operand(void* base, int64_t rows, int64_t cols, int64_t ld, int64_t padded_rows,
                        int64_t padded_cols, DType dtype, const Tensor& like, bool copy_in,
                        cudaStream_t stream) {
  if (padded_rows == rows && padded_cols == cols &&
      (rows == 0 || cols == 0 || aligned_rows(base, ld, dtype))) {
    return {base, ld, Tensor()};
  }
  const size_t size = dtype_size(dtype);
  const int64_t padded_ld =
      round_up(std::max<int64_t>(padded_cols, 1), 16 / static_cast<int64_t>(size));
  Tensor padded = Tensor::empty({padded_rows, padded_ld}, dtype, like.allocator(),
                                MemoryCategory::kWorkspace, "gemm aligned copy");
  char* dst = static_cast<char*>(padded.raw_device_data());
  if (copy_in) {
    if (rows > 0 && cols > 0) {
      ZS_CUDA_CHECK(cudaMemcpy2DAsync(dst, padded_ld * size, base, ld * size, cols * size, rows,
                                      cudaMemcpyDeviceToDevice, stream));
    }
    if (padded_ld > cols && rows > 0) {
      ZS_CUDA_CHECK(cudaMemset2DAsync(dst + cols * size, padded_ld * size, 0,
                                      (padded_ld - cols) * size, rows, stream));
    }
    if (padded_rows > rows) {
      ZS_CUDA_CHECK(cudaMemsetAsync(dst + rows * padded_ld * size, 0,
                                    (padded_rows - rows) * padded_ld * size, stream));
    }
  }
  return {dst, padded_ld, std::move(padded)};
}

void gemm_entry(const char* op, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                const Tensor& a, int64_t lda, const Tensor& b, int64_t ldb, float beta,
                const Tensor& c, int64_t ldc) {
  OpContext ctx(op, {&a, &b, &c});
  const cudaStream_t stream = ctx.stream();
  // The dimensions cuBLAS sees: for 16-bit operands, n and (where it is a row length) k rounded up
  // to 16 bytes; fp32 products keep theirs (no tensor cores without TF32).
  const bool half = a.dtype() != DType::kF32;
  const int64_t per_16 = 16 / static_cast<int64_t>(dtype_size(a.dtype()));
  const int64_t n_gemm = half ? round_up(n, per_16) : n;
  const int64_t k_gemm = half && (!trans_a || trans_b) ? round_up(k, per_16) : k;
  // Stored shapes (row-major): A is [k, m] if trans_a else [m, k]; B is [n, k] if trans_b else
  // [k, n]; C is [m, n].
  Operand a_op = trans_a ? aligned_operand(a.raw_device_data(), k, m, ld(lda), k_gemm, m, a.dtype(),
                                           a, true, stream)
                         : aligned_operand(a.raw_device_data(), m, k, ld(lda), m, k_gemm, a.dtype(),
                                           a, true, stream);
  Operand b_op = trans_b ? aligned_operand(b.raw_device_data(), n, k, ld(ldb), n_gemm, k_gemm,
                                           b.dtype(), a, true, stream)
                         : aligned_operand(b.raw_device_data(), k, n, ld(ldb), k_gemm, n_gemm,
                                           b.dtype(), a, true, stream);
  Operand c_op = aligned_operand(c.raw_device_data(), m, n, ld(ldc), m, n_gemm, c.dtype(), a,
                                 beta != 0.0f, stream);
  gemm(ctx.cublas(), trans_a, trans_b, m, n_gemm, k_gemm, 1.0f, a_op.data, a_op.ld, b_op.data,
       b_op.ld, beta, c_op.data, c_op.ld, a.dtype(), c.dtype());
  if (c_op.padded.defined() && m > 0 && n > 0) {
    const size_t size = dtype_size(c.dtype());
    ZS_CUDA_CHECK(cudaMemcpy2DAsync(c.raw_device_data(), ld(ldc) * size, c_op.data, c_op.ld * size,
                                    n * size, m, cudaMemcpyDeviceToDevice, stream));
  }
}

void broadcast_rows_entry(const Tensor& bias, const Tensor& y, int64_t rows, int64_t cols) {
  OpContext ctx("linear", {&bias, &y});
  broadcast_rows(bias.raw_device_data(), y.raw_device_data(), rows, cols, bias.dtype(), y.dtype(),
                 ctx.stream());
}

void column_sums_entry(const Tensor& dy, const Tensor& db, int64_t rows, int64_t cols,
                       bool accumulate) {
  OpContext ctx("linear", {&dy, &db});
  // Freed right after the enqueue: allocation is ordered on the kernels' stream (OpContext).
  Tensor partials =
      Tensor::empty({std::max<int64_t>(column_sum_partials(rows, cols), 1)}, DType::kF32,
                    dy.allocator(), MemoryCategory::kWorkspace, "linear bias gradient partials");
  column_sums_f32(dy.raw_device_data(), db.device_data<float>(), partials.device_data<float>(),
                  rows, cols, accumulate, dy.dtype(), ctx.stream());
}

}  // namespace

void fill_linear_entries(detail::DeviceOps& table) {
  table.gemm = gemm_entry;
  table.broadcast_rows = broadcast_rows_entry;
  table.column_sums = column_sums_entry;
}

}  // namespace zs::ops::cuda
