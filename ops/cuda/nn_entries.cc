// The CUDA entries of gelu, select, layernorm, embedding and cross_entropy (ops/device_ops.h),
// plus the table's shared check and byte copy: the ops/cuda/kernels.h, tensor_kernels.h and
// nn_kernels.h launchers on the stream of the tensors' allocator (ops/cuda/context.h), given the
// tensors' device pointers, sizes and dtypes as the shared op (ops/*.cc) computed them.
//
// Thread-safety: no state; each call runs on its tensors' stream.
#include <cuda_runtime_api.h>

#include "ops/cuda/context.h"
#include "ops/cuda/device_entries.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/nn_kernels.h"
#include "ops/cuda/tensor_kernels.h"
#include "runtime/cuda/check.h"

namespace zs::ops::cuda {
namespace {

// A tensor's data as the launchers take it, null for an undefined (optional) tensor.
void* data_or_null(const Tensor& t) { return t.defined() ? t.raw_device_data() : nullptr; }
float* floats_or_null(const Tensor& t) { return t.defined() ? t.device_data<float>() : nullptr; }
int32_t* int32s_or_null(const Tensor& t) {
  return t.defined() ? t.device_data<int32_t>() : nullptr;
}

void check_tensors(const char* op, std::initializer_list<const Tensor*> tensors) {
  OpContext ctx(op, tensors);
}

void copy_bytes(const char* op, const Tensor& src, const Tensor& dst) {
  OpContext ctx(op, {&src, &dst});
  ZS_CHECK(src.nbytes() == dst.nbytes(), op, ": cannot copy ", src.describe(), " into ",
           dst.describe(), " (sizes differ)");
  if (src.nbytes() == 0) return;
  ZS_CUDA_CHECK(cudaMemcpyAsync(dst.raw_device_data(), src.raw_device_data(), src.nbytes(),
                                cudaMemcpyDeviceToDevice, ctx.stream()));
}

void gelu_forward_entry(const Tensor& x, const Tensor& y) {
  OpContext ctx("gelu", {&x, &y});
  gelu_forward(x.raw_device_data(), y.raw_device_data(), x.numel(), x.dtype(), ctx.stream());
}

void gelu_backward_entry(const Tensor& x, const Tensor& dy, const Tensor& dst, bool accumulate) {
  OpContext ctx("gelu", {&x, &dy, &dst});
  gelu_backward(x.raw_device_data(), dy.device_data<float>(), dst.raw_device_data(), x.numel(),
                x.dtype(), dst.dtype(), accumulate, ctx.stream());
}

void select_forward_entry(const Tensor& x, const Tensor& y, int64_t outer, int64_t size,
                          int64_t inner, int64_t index) {
  OpContext ctx("select", {&x, &y});
  select_forward(x.raw_device_data(), y.raw_device_data(), outer, size, inner, index,
                 dtype_size(x.dtype()), ctx.stream());
}

void select_backward_entry(const Tensor& dy, const Tensor& dst, int64_t outer, int64_t size,
                           int64_t inner, int64_t index, bool accumulate) {
  OpContext ctx("select", {&dy, &dst});
  if (!accumulate) zero_bytes(dst);  // +0 outside the selected slab
  select_backward(dy.raw_device_data(), dst.raw_device_data(), outer, size, inner, index,
                  accumulate, dy.dtype(), ctx.stream());
}

void layernorm_forward_entry(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                             const Tensor& y, const Tensor& mean, const Tensor& rstd, int64_t rows,
                             int64_t cols, float eps) {
  OpContext ctx("layernorm", {&x, &gamma, &beta, &y, &mean, &rstd});
  layernorm_forward(x.raw_device_data(), gamma.raw_device_data(), beta.raw_device_data(),
                    y.raw_device_data(), mean.device_data<float>(), rstd.device_data<float>(), rows,
                    cols, eps, x.dtype(), ctx.stream());
}

void layernorm_backward_entry(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                              const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                              bool dx_accumulate, const Tensor& dgamma, const Tensor& dbeta,
                              int64_t rows, int64_t cols) {
  OpContext ctx("layernorm", {&x, &gamma, &dy, &mean, &rstd, &dx, &dgamma, &dbeta});
  // The dgamma/dbeta partials, freed right after the enqueue (allocation is ordered on the
  // kernels' stream).
  Tensor partials;
  if ((dgamma.defined() || dbeta.defined()) && rows > 0) {
    partials = Tensor::empty({2 * column_sum_partials(rows, cols)}, DType::kF32, x.allocator(),
                             MemoryCategory::kWorkspace, "layernorm dgamma/dbeta partials");
  }
  layernorm_backward(x.raw_device_data(), dy.device_data<float>(), gamma.raw_device_data(),
                     mean.device_data<float>(), rstd.device_data<float>(), data_or_null(dx),
                     floats_or_null(dgamma), floats_or_null(dbeta), floats_or_null(partials), rows,
                     cols, x.dtype(), dx.defined() ? dx.dtype() : x.dtype(), dx_accumulate,
                     ctx.stream());
}

void embedding_forward_entry(const Tensor& table, const Tensor& ids, const Tensor& out,
                             const Tensor& flag) {
  OpContext ctx("embedding", {&table, &ids, &out, &flag});
  embedding_forward(table.raw_device_data(), ids.device_data<int32_t>(), out.raw_device_data(),
                    table.size(0), table.size(1), ids.numel(), table.dtype(),
                    flag.device_data<int32_t>(), ctx.stream());
}

size_t embedding_backward_workspace_bytes_entry(const Tensor& ids, int64_t vocab) {
  // With the op's device current (OpContext): CUB asks the current device.
  OpContext ctx("embedding", {&ids});
  return embedding_backward_workspace_bytes(ids.numel(), vocab);
}

void embedding_backward_entry(const Tensor& ids, const Tensor& dy, int64_t vocab, int64_t cols,
                              const Tensor& dst, bool accumulate, const Tensor& workspace,
                              size_t workspace_bytes, const Tensor& flag) {
  OpContext ctx("embedding", {&ids, &dy, &dst, &workspace, &flag});
  // dy is read as it is (fp32 exactly), dst written in its own dtype: no staging.
  embedding_backward(ids.device_data<int32_t>(), dy.raw_device_data(), dy.dtype(), ids.numel(),
                     vocab, cols, dst.raw_device_data(), dst.dtype(), accumulate,
                     data_or_null(workspace), workspace_bytes, int32s_or_null(flag), ctx.stream());
}

void cross_entropy_forward_entry(const Tensor& logits, const Tensor& targets, int32_t ignore_index,
                                 const Tensor& row_max, const Tensor& log_sum,
                                 const Tensor& row_loss, const Tensor& loss, const Tensor& counts) {
  OpContext ctx("cross_entropy",
                {&logits, &targets, &row_max, &log_sum, &row_loss, &loss, &counts});
  cross_entropy_forward(logits.raw_device_data(), targets.device_data<int32_t>(), logits.size(0),
                        logits.size(1), ignore_index, logits.dtype(), row_max.device_data<float>(),
                        log_sum.device_data<float>(), row_loss.device_data<float>(),
                        loss.device_data<float>(), static_cast<int64_t*>(counts.raw_device_data()),
                        counts.device_data<int32_t>() + 2, ctx.stream());
}

void cross_entropy_backward_entry(const Tensor& logits, const Tensor& targets,
                                  const Tensor& row_max, const Tensor& log_sum, const Tensor& dloss,
                                  const Tensor& counts, int32_t ignore_index, const Tensor& dst,
                                  bool accumulate) {
  OpContext ctx("cross_entropy", {&logits, &targets, &counts, &dloss, &dst});
  cross_entropy_backward(
      logits.raw_device_data(), targets.device_data<int32_t>(), row_max.device_data<float>(),
      log_sum.device_data<float>(), dloss.device_data<float>(),
      static_cast<const int64_t*>(counts.raw_device_data()), logits.size(0), logits.size(1),
      ignore_index, logits.dtype(), dst.raw_device_data(), dst.dtype(), accumulate, ctx.stream());
}

}  // namespace

void fill_nn_entries(detail::DeviceOps& table) {
  table.check_tensors = check_tensors;
  table.copy_bytes = copy_bytes;
  table.gelu_forward = gelu_forward_entry;
  table.gelu_backward = gelu_backward_entry;
  table.select_forward = select_forward_entry;
  table.select_backward = select_backward_entry;
  table.layernorm_forward = layernorm_forward_entry;
  table.layernorm_backward = layernorm_backward_entry;
  table.embedding_forward = embedding_forward_entry;
  table.embedding_backward_workspace_bytes = embedding_backward_workspace_bytes_entry;
  table.embedding_backward = embedding_backward_entry;
  table.cross_entropy_forward = cross_entropy_forward_entry;
  table.cross_entropy_backward = cross_entropy_backward_entry;
}

}  // namespace zs::ops::cuda
