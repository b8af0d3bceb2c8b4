// The CUDA entries of ops/attention.cc (ops/device_ops.h): cuDNN's fused forward and backward
// (ops/cuda/cudnn_attention.h) where they apply, and the plain kernels of nn_kernels.h, on the
// stream of the tensors' allocator (ops/cuda/context.h).
//
// cuDNN's workspace, when it asks for one, is a workspace-category tensor on qkv's allocator held
// for the call: stream-ordered, so it is freed when the entry returns, after the enqueued work.
//
// Thread-safety: no state beyond the thread's cuDNN handle (thread_cudnn_handle).
#include "ops/cuda/context.h"
#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/device_entries.h"
#include "ops/cuda/nn_kernels.h"

namespace zs::ops::cuda {
namespace {

// cuDNN's workspace callback: a workspace tensor of at least `bytes` on `like`'s allocator, held by
// `holder` (stream-ordered: freed when `holder` dies, after the work enqueued with it).
CudnnWorkspaceFn cudnn_workspace_into(Tensor& holder, const Tensor& like, const char* what) {
  return [&holder, &like, what](size_t bytes) {
    const auto floats = static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float));
    holder =
        Tensor::empty({floats}, DType::kF32, like.allocator(), MemoryCategory::kWorkspace, what);
    return holder.raw_device_data();
  };
}

bool forward_fused(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                   const detail::AttentionShape& shape) {
  OpContext ctx("attention", {&qkv, &out, &lse});
  Tensor cudnn_workspace;
  const CudnnWorkspaceFn workspace =
      cudnn_workspace_into(cudnn_workspace, qkv, "attention cudnn workspace");
  return cudnn_attention_forward(thread_cudnn_handle(zs::cuda::cuda_allocator_of(qkv, "attention")),
                                 qkv.raw_device_data(), out.raw_device_data(),
                                 lse.device_data<float>(), shape.batch, shape.seq, shape.channels,
                                 shape.heads, shape.causal, qkv.dtype(), workspace);
}

void forward(const Tensor& qkv, const Tensor& out, const Tensor& lse,
             const detail::AttentionShape& shape, const Tensor& lengths, const Tensor& flag) {
  OpContext ctx("attention", {&qkv, &out, &lse, &lengths, &flag});
  attention_forward(qkv.raw_device_data(), out.raw_device_data(), lse.device_data<float>(),
                    shape.batch, shape.seq, shape.channels, shape.heads, shape.causal,
                    lengths.defined() ? lengths.device_data<int32_t>() : nullptr,
                    flag.defined() ? flag.device_data<int32_t>() : nullptr, qkv.dtype(),
                    ctx.stream());
}

bool backward_fused(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout,
                    const Tensor& dst, const detail::AttentionShape& shape, bool accumulate) {
  OpContext ctx("attention", {&qkv, &out, &lse, &dout, &dst});
  // Its workspace (plan, fp32 dQ accumulator, dot rows, staging copy): see the file comment.
  Tensor cudnn_workspace;
  const CudnnWorkspaceFn workspace =
      cudnn_workspace_into(cudnn_workspace, qkv, "attention backward cudnn workspace");
  return cudnn_attention_backward(
      thread_cudnn_handle(zs::cuda::cuda_allocator_of(qkv, "attention")), qkv.raw_device_data(),
      out.raw_device_data(), lse.device_data<float>(), dout.raw_device_data(),
      dst.raw_device_data(), shape.batch, shape.seq, shape.channels, shape.heads, shape.causal,
      qkv.dtype(), accumulate, workspace);
}

void backward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout,
              const Tensor& delta, const Tensor& dst, const detail::AttentionShape& shape,
              const Tensor& lengths, bool accumulate) {
  OpContext ctx("attention", {&qkv, &out, &lse, &lengths, &dout, &delta, &dst});
  attention_backward(qkv.raw_device_data(), out.raw_device_data(), lse.device_data<float>(),
                     dout.raw_device_data(), delta.defined() ? delta.device_data<float>() : nullptr,
                     dst.raw_device_data(), shape.batch, shape.seq, shape.channels, shape.heads,
                     shape.causal, lengths.defined() ? lengths.device_data<int32_t>() : nullptr,
                     qkv.dtype(), dst.dtype(), accumulate, ctx.stream());
}

}  // namespace

void fill_attention_entries(detail::DeviceOps& table) {
  table.attention_forward_fused = forward_fused;
  table.attention_forward = forward;
  table.attention_backward_fused = backward_fused;
  table.attention_backward = backward;
}

}  // namespace zs::ops::cuda
