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

// cuBLAS runs its tensor-core kernels only on rows that start on 16-byte boundaries: with a row
// length like GPT-2's vocabulary (50257) it falls back to kernels of a few percent of the chip's
// rate (seen on an H100: 100–150 TFLOP/s against ~750 for the same GEMM with aligned rows, see
// docs/cuda.md). So a matrix whose base or row length is not 16-byte aligned is copied into a
// padded workspace (cudaMemcpy2DAsync, one pass over it), the GEMM runs there, and C is copied
// back. The products and sums are the same; only cuBLAS's choice of kernel (and so its summation
// order, already not the CPU's) changes.
bool aligned_rows(const void* base, int64_t ld, DType dtype) {
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 &&
         (ld * static_cast<int64_t>(dtype_size(dtype))) % 16 == 0;
}

// A padded copy of the rows × cols matrix at `base` (row length `ld`) when it is not aligned:
// sets `padded` (a workspace on `like`'s allocator) and `ld` to its row length and returns its
// data; else returns `base` unchanged. With `copy_in` false the workspace is left undefined.
void* pad_rows(void* base, int64_t rows, int64_t cols, int64_t& ld, DType dtype, const Tensor& like,
               bool copy_in, Tensor& padded, cudaStream_t stream) {
  if (rows == 0 || cols == 0 || aligned_rows(base, ld, dtype)) return base;
  const int64_t per_16 = 16 / static_cast<int64_t>(dtype_size(dtype));
  const int64_t padded_ld = (cols + per_16 - 1) / per_16 * per_16;
  padded = Tensor::empty({rows, padded_ld}, dtype, like.allocator(), MemoryCategory::kWorkspace,
                         "gemm aligned copy");
  const size_t size = dtype_size(dtype);
  if (copy_in) {
    ZS_CUDA_CHECK(cudaMemcpy2DAsync(padded.raw_device_data(), padded_ld * size, base, ld * size,
                                    cols * size, rows, cudaMemcpyDeviceToDevice, stream));
  }
  ld = padded_ld;
  return padded.raw_device_data();
}

void gemm_entry(const char* op, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                const Tensor& a, int64_t lda, const Tensor& b, int64_t ldb, float beta,
                const Tensor& c, int64_t ldc) {
  OpContext ctx(op, {&a, &b, &c});
  const cudaStream_t stream = ctx.stream();
  int64_t a_ld = ld(lda);
  int64_t b_ld = ld(ldb);
  int64_t c_ld = ld(ldc);
  Tensor a_pad, b_pad, c_pad;
  void* a_data = pad_rows(a.raw_device_data(), trans_a ? k : m, trans_a ? m : k, a_ld, a.dtype(), a,
                          true, a_pad, stream);
  void* b_data = pad_rows(b.raw_device_data(), trans_b ? n : k, trans_b ? k : n, b_ld, b.dtype(), a,
                          true, b_pad, stream);
  void* c_data =
      pad_rows(c.raw_device_data(), m, n, c_ld, c.dtype(), a, beta != 0.0f, c_pad, stream);
  gemm(ctx.cublas(), trans_a, trans_b, m, n, k, 1.0f, a_data, a_ld, b_data, b_ld, beta, c_data,
       c_ld, a.dtype(), c.dtype());
  if (c_pad.defined()) {
    const size_t size = dtype_size(c.dtype());
    ZS_CUDA_CHECK(cudaMemcpy2DAsync(c.raw_device_data(), ld(ldc) * size, c_data, c_ld * size,
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
