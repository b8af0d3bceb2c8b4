// The CUDA entries of ops/linear.cc (ops/device_ops.h): cuBLAS GEMMs (ops/cuda/gemm.h) with the
// calling thread's handle on the tensors' stream, and the bias launchers of tensor_kernels.h.
//
// Thread-safety: no state beyond the thread's cuBLAS handle cache (ops/cuda/context.h).
#include <algorithm>

#include "ops/cuda/context.h"
#include "ops/cuda/device_entries.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/tensor_kernels.h"

namespace zs::ops::cuda {
namespace {

// A leading dimension for cuBLAS, which wants at least 1 even for an empty matrix (the CPU's
// sgemm takes the row length as is).
int64_t ld(int64_t row_length) { return std::max<int64_t>(row_length, 1); }

void gemm_entry(const char* op, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                const Tensor& a, int64_t lda, const Tensor& b, int64_t ldb, float beta,
                const Tensor& c, int64_t ldc) {
  OpContext ctx(op, {&a, &b, &c});
  gemm(ctx.cublas(), trans_a, trans_b, m, n, k, 1.0f, a.raw_device_data(), ld(lda),
       b.raw_device_data(), ld(ldb), beta, c.raw_device_data(), ld(ldc), a.dtype(), c.dtype());
}

void broadcast_rows_entry(const Tensor& bias, const Tensor& y, int64_t rows, int64_t cols) {
  OpContext ctx("linear", {&bias, &y});
  broadcast_rows(bias.raw_device_data(), y.device_data<float>(), rows, cols, bias.dtype(),
                 ctx.stream());
}

void column_sums_entry(const Tensor& dy, const Tensor& db, int64_t rows, int64_t cols,
                       bool accumulate) {
  OpContext ctx("linear", {&dy, &db});
  column_sums_f32(dy.raw_device_data(), db.device_data<float>(), rows, cols, accumulate, dy.dtype(),
                  ctx.stream());
}

}  // namespace

void fill_linear_entries(detail::DeviceOps& table) {
  table.gemm = gemm_entry;
  table.broadcast_rows = broadcast_rows_entry;
  table.column_sums = column_sums_entry;
}

}  // namespace zs::ops::cuda
