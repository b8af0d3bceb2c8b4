// The CUDA device hooks (see device_kernels.h): synchronous copies on the tensor's allocator
// stream, and grid-stride kernels for fill, fill_index_mod and accumulate around runtime/half.h's
// conversions.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/cuda/allocator.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device_kernels.h"
#include "runtime/cuda/stream.h"
#include "runtime/device_kernels.h"
#include "runtime/error.h"
#include "runtime/half.h"
#include "runtime/tensor.h"

namespace zs::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;  // grid-stride loops cover the rest

unsigned int blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned int>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

__device__ __forceinline__ int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

template <typename T>
__global__ void fill_kernel(T* dst, T value, int64_t n) {
  for (int64_t i = first_index(); i < n; i += stride()) dst[i] = value;
}

__global__ void index_mod_kernel(int32_t* dst, int64_t period, int64_t n) {
  for (int64_t i = first_index(); i < n; i += stride()) dst[i] = static_cast<int32_t>(i % period);
}

template <typename D, typename S>
__global__ void accumulate_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = first_index(); i < n; i += stride()) {
    dst[i] = D(static_cast<float>(dst[i]) + static_cast<float>(src[i]));
  }
}

// The stream a hook on `t` runs on (its allocator's), with `t`'s device made current.
struct HookContext {
  HookContext(const Tensor& t, const char* what)
      : allocator(cuda_allocator_of(t, what)), guard(allocator.stream().device()) {}
  cudaStream_t stream() const { return allocator.stream().get(); }
  const CudaAllocator& allocator;
  DeviceGuard guard;
};

void download(const Tensor& src, void* host) {
  HookContext ctx(src, "to_vector");
  ZS_CUDA_CHECK(cudaMemcpyAsync(host, src.raw_device_data(), src.nbytes(), cudaMemcpyDeviceToHost,
                                ctx.stream()));
  // Synchronous by contract: the caller reads `host` on return.
  ZS_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
}

void upload(const Tensor& dst, const void* host) {
  HookContext ctx(dst, "copy_from");
  ZS_CUDA_CHECK(cudaMemcpyAsync(dst.raw_device_data(), host, dst.nbytes(), cudaMemcpyHostToDevice,
                                ctx.stream()));
  // Synchronous by contract: the caller frees `host` on return.
  ZS_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
}

template <typename T>
void launch_fill(const Tensor& dst, T value, cudaStream_t stream) {
  const int64_t n = dst.numel();
  fill_kernel<T>
      <<<blocks_for(n), kThreads, 0, stream>>>(static_cast<T*>(dst.raw_device_data()), value, n);
  ZS_CUDA_CHECK(cudaGetLastError());
}

void fill(const Tensor& dst, float value) {
  HookContext ctx(dst, "fill");
  if (dst.numel() == 0) return;
  // The value is converted once on the host with the same runtime/half.h functions.
  switch (dst.dtype()) {
    case DType::kF32:
      launch_fill<float>(dst, value, ctx.stream());
      break;
    case DType::kF16:
      launch_fill<Half>(dst, Half(value), ctx.stream());
      break;
    case DType::kBF16:
      launch_fill<BFloat16>(dst, BFloat16(value), ctx.stream());
      break;
    case DType::kI32:
      launch_fill<int32_t>(dst, static_cast<int32_t>(value), ctx.stream());
      break;
    case DType::kI64:
      launch_fill<int64_t>(dst, static_cast<int64_t>(value), ctx.stream());
      break;
  }
}

void zero_bytes(const Tensor& dst) {
  HookContext ctx(dst, "zero_bytes");
  ZS_CUDA_CHECK(cudaMemsetAsync(dst.raw_device_data(), 0, dst.nbytes(), ctx.stream()));
}

void fill_index_mod(const Tensor& dst, int64_t period) {
  HookContext ctx(dst, "fill_index_mod");
  const int64_t n = dst.numel();
  if (n == 0) return;
  index_mod_kernel<<<blocks_for(n), kThreads, 0, ctx.stream()>>>(dst.device_data<int32_t>(), period,
                                                                 n);
  ZS_CUDA_CHECK(cudaGetLastError());
}

template <typename D>
void launch_accumulate(const Tensor& dst, const Tensor& src, cudaStream_t stream) {
  const int64_t n = dst.numel();
  D* d = static_cast<D*>(dst.raw_device_data());
  const void* s = src.raw_device_data();
  switch (src.dtype()) {
    case DType::kF32:
      accumulate_kernel<D, float>
          <<<blocks_for(n), kThreads, 0, stream>>>(d, static_cast<const float*>(s), n);
      ZS_CUDA_CHECK(cudaGetLastError());
      return;
    case DType::kF16:
      accumulate_kernel<D, Half>
          <<<blocks_for(n), kThreads, 0, stream>>>(d, static_cast<const Half*>(s), n);
      ZS_CUDA_CHECK(cudaGetLastError());
      return;
    case DType::kBF16:
      accumulate_kernel<D, BFloat16>
          <<<blocks_for(n), kThreads, 0, stream>>>(d, static_cast<const BFloat16*>(s), n);
      ZS_CUDA_CHECK(cudaGetLastError());
      return;
    case DType::kI32:
    case DType::kI64:
      break;
  }
  ZS_THROW(InvalidArgument, "accumulate_into needs floating tensors, got ", src.describe());
}

void accumulate(const Tensor& dst, const Tensor& src) {
  HookContext ctx(dst, "accumulate_into");
  const CudaAllocator& src_allocator = cuda_allocator_of(src, "accumulate_into");
  ZS_CHECK(src_allocator.stream().get() == ctx.stream(), "accumulate_into: ", src.describe(),
           " and ", dst.describe(),
           " come from allocators on different CUDA streams; nothing orders the two streams "
           "here, so allocate both on one stream (or copy one over after ordering the streams)");
  if (dst.numel() == 0) return;
  switch (dst.dtype()) {
    case DType::kF32:
      launch_accumulate<float>(dst, src, ctx.stream());
      return;
    case DType::kF16:
      launch_accumulate<Half>(dst, src, ctx.stream());
      return;
    case DType::kBF16:
      launch_accumulate<BFloat16>(dst, src, ctx.stream());
      return;
    case DType::kI32:
    case DType::kI64:
      break;
  }
  ZS_THROW(InvalidArgument, "accumulate_into needs floating tensors, got ", dst.describe());
}

DeviceKernels make_table() {
  DeviceKernels table;
  table.name = "cuda";
  table.download = &download;
  table.upload = &upload;
  table.fill = &fill;
  table.zero_bytes = &zero_bytes;
  table.accumulate = &accumulate;
  table.fill_index_mod = &fill_index_mod;
  return table;
}

}  // namespace

void install_cuda_device_kernels() {
  static const DeviceKernels kTable = make_table();  // thread-safe static initialization
  install_device_kernels(Device::Kind::kCUDA, &kTable);
}

}  // namespace zs::cuda
