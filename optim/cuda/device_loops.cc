// The CUDA entry of optim's device loops (optim/device_loops.h): AdamW, SGD, the gradient-norm
// sum of squares, gradient scaling and the loss scaler's unscale + check on a view whose buffers
// live on a GPU, launched with ops/cuda's kernels on the stream of the view's CudaAllocator; and
// the allocator of a GPU communicator's scalars. Built only with ZS_CUDA as zs_optim_cuda, which
// installs the entry from a static initializer; its INTERFACE link option
// --undefined=zs_optim_cuda_anchor pulls this file into every program that links it (zs_train
// does), see runtime/device_kernels.h, "Registration".
//
// Thread-safety: as optim/device_loops.h; the entry is immutable.
#include <cuda_runtime_api.h>

#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ops/cuda/kernels.h"
#include "ops/cuda/optim_kernels.h"
#include "optim/device_loops.h"
#include "runtime/allocator.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/stream.h"
#include "runtime/device_kernels.h"
#include "runtime/error.h"

// The symbol the linker is told to resolve (optim/cuda/CMakeLists.txt).
extern "C" const char zs_optim_cuda_anchor = 0;

namespace zs::optim::detail {
namespace {

Allocator& cuda_scalar_allocator(Device device) {
  ZS_CHECK(device.is_cuda(), "all_reduce_scalar: ", device.str(), " is not a CUDA device");
  struct DeviceScalars {
    explicit DeviceScalars(int index) : stream(index), allocator(stream, nullptr) {}
    zs::cuda::Stream stream;
    zs::cuda::CudaAllocator allocator;
  };
  static std::mutex mutex;
  // Leaked on purpose: destroying them at exit would call CUDA after its runtime shut down.
  static auto* by_device = new std::map<int, DeviceScalars*>();
  std::lock_guard<std::mutex> lock(mutex);
  DeviceScalars*& entry = (*by_device)[device.index];
  if (entry == nullptr) entry = new DeviceScalars(device.index);
  return entry->allocator;
}

// The stream every buffer of the view was allocated on. The master's allocator decides; the
// gradient and the state must be device memory on the same GPU.
const zs::cuda::Stream& view_stream(const ShardView& view, const char* who,
                                    std::initializer_list<const Tensor*> others) {
  const zs::cuda::CudaAllocator& allocator = zs::cuda::cuda_allocator_of(view.master, who);
  for (const Tensor* t : others) {
    if (t == nullptr || !t->defined()) continue;
    ZS_CHECK(t->device() == view.master.device(), who, " view '", view.name, "': ", t->describe(),
             " is on ", t->device().str(), " but the master shard is on ",
             view.master.device().str(), "; keep a view's gradient and state on its device");
  }
  return allocator.stream();
}

void cuda_adamw(const ShardView& view, const std::vector<Segment>& segments, const Tensor& exp_avg,
                const Tensor& exp_avg_sq, const ops::math::AdamWStep& step) {
  const cudaStream_t stream = view_stream(view, "AdamW", {&view.grad, &exp_avg, &exp_avg_sq}).get();
  // Kernels launch on the current device: it must be the stream's (the thread's may differ).
  const zs::cuda::DeviceGuard guard(view.master.device().index);
  float* param = view.master.device_data<float>();
  const float* grad = view.grad.device_data<float>();
  float* m = exp_avg.device_data<float>();
  float* v = exp_avg_sq.device_data<float>();
  for (const Segment& s : segments) {
    ops::cuda::adamw_step(param + s.begin, grad + s.begin, m + s.begin, v + s.begin,
                          s.end - s.begin, step, s.decay, stream);
  }
}

void cuda_sgd(const ShardView& view, const std::vector<Segment>& segments,
              const Tensor& momentum_buffer, const ops::math::SgdStep& step, bool nesterov) {
  const cudaStream_t stream = view_stream(view, "SGD", {&view.grad, &momentum_buffer}).get();
  // Kernels launch on the current device: it must be the stream's (the thread's may differ).
  const zs::cuda::DeviceGuard guard(view.master.device().index);
  float* param = view.master.device_data<float>();
  const float* grad = view.grad.device_data<float>();
  float* buffer = momentum_buffer.defined() ? momentum_buffer.device_data<float>() : nullptr;
  for (const Segment& s : segments) {
    ops::cuda::sgd_step(param + s.begin, grad + s.begin, buffer ? buffer + s.begin : nullptr,
                        s.end - s.begin, step, s.decay, nesterov, stream);
  }
}

double cuda_sum_of_squares(const ShardView& view, const std::vector<Segment>& segments) {
  const zs::cuda::Stream& stream = view_stream(view, "grad_sum_of_squares", {&view.grad});
  // Kernels launch on the current device: it must be the stream's (the thread's may differ).
  const zs::cuda::DeviceGuard guard(view.master.device().index);
  const int64_t numel = view.master.numel();
  std::vector<int64_t> begins, ends;
  for (const Segment& s : segments) {
    begins.push_back(s.begin);
    ends.push_back(s.end);
  }
  // Workspace and result on the view's allocator (stream-ordered: usable on `stream` at once).
  const size_t ws_bytes = ops::cuda::sum_of_squares_workspace_bytes(numel);
  Tensor workspace = Tensor::empty(
      {static_cast<int64_t>((ws_bytes + sizeof(float) - 1) / sizeof(float)) + 2}, DType::kF32,
      view.master.allocator(), MemoryCategory::kWorkspace, "gradient norm workspace");
  // The result double sits after the lanes (ws_bytes is a multiple of 8: still aligned).
  char* base = static_cast<char*>(workspace.raw_device_data());
  double* result = reinterpret_cast<double*>(base + ws_bytes);
  ops::cuda::sum_of_squares(view.grad.device_data<float>(), numel, begins.data(), ends.data(),
                            static_cast<int64_t>(begins.size()), base, result, stream.get());
  double host = 0.0;
  ZS_CUDA_CHECK(
      cudaMemcpyAsync(&host, result, sizeof(double), cudaMemcpyDeviceToHost, stream.get()));
  stream.synchronize();
  return host;
}

void cuda_scale(const ShardView& view, const std::vector<Segment>& segments, float coefficient) {
  const cudaStream_t stream = view_stream(view, "scale_grads", {&view.grad}).get();
  // Kernels launch on the current device: it must be the stream's (the thread's may differ).
  const zs::cuda::DeviceGuard guard(view.master.device().index);
  float* grad = view.grad.device_data<float>();
  for (const Segment& s : segments) {
    ops::cuda::scale_inplace(grad + s.begin, coefficient, s.end - s.begin, DType::kF32, stream);
  }
}

bool cuda_unscale_and_check(const ShardView& view, const std::vector<Segment>& segments,
                            float inv_scale) {
  const zs::cuda::Stream& stream = view_stream(view, "unscale_and_check", {&view.grad});
  // Kernels launch on the current device: it must be the stream's (the thread's may differ).
  const zs::cuda::DeviceGuard guard(view.master.device().index);
  Tensor flag = Tensor::empty({1}, DType::kI32, view.master.allocator(), MemoryCategory::kWorkspace,
                              "loss scaler overflow mark");
  int32_t* mark = flag.device_data<int32_t>();
  ZS_CUDA_CHECK(cudaMemsetAsync(mark, 0, sizeof(int32_t), stream.get()));
  float* grad = view.grad.device_data<float>();
  for (const Segment& s : segments) {
    ops::cuda::unscale_and_mark(grad + s.begin, s.end - s.begin, inv_scale, mark, stream.get());
  }
  int32_t host = 0;
  ZS_CUDA_CHECK(
      cudaMemcpyAsync(&host, mark, sizeof(int32_t), cudaMemcpyDeviceToHost, stream.get()));
  stream.synchronize();
  return host != 0;
}

const DeviceLoops kCudaLoops{"cuda",
                             cuda_adamw,
                             cuda_sgd,
                             cuda_sum_of_squares,
                             cuda_scale,
                             cuda_unscale_and_check,
                             cuda_scalar_allocator};

const bool kRegistered = [] {
  DeviceTables<DeviceLoops>::install(Device::Kind::kCUDA, &kCudaLoops);
  return true;
}();

}  // namespace
}  // namespace zs::optim::detail
