// optim/device_loops.h: the optimizer loops of a view on a device, through the device-loops
// registry (no backend code here).
#include "optim/device_loops.h"

#include "runtime/allocator.h"
#include "runtime/device_kernels.h"
#include "runtime/error.h"

namespace zs::optim::detail {

bool on_device(const ShardView& view) {
  return view.master.defined() && !view.master.device().is_cpu();
}

const DeviceLoops& device_loops(Device device, const std::string& what) {
  const DeviceLoops* loops =
      device.is_cpu() ? nullptr : DeviceTables<DeviceLoops>::find(device.kind);
  ZS_CHECK(loops != nullptr, what, " is on ", device.str(), " but this build has no ", device.str(),
           " backend for the optimizer loops; rebuild zeroshard with -DZS_CUDA=ON "
           "and link the program with zs_train (or zs_optim_cuda)");
  return *loops;
}

namespace {
const DeviceLoops& view_loops(const ShardView& view) {
  return device_loops(view.master.device(), "optimizer view '" + view.name + "'");
}
}  // namespace

void device_adamw(const ShardView& view, const std::vector<Segment>& segments,
                  const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const ops::math::AdamWStep& step) {
  view_loops(view).adamw(view, segments, exp_avg, exp_avg_sq, step);
}

void device_sgd(const ShardView& view, const std::vector<Segment>& segments,
                const Tensor& momentum_buffer, const ops::math::SgdStep& step, bool nesterov) {
  view_loops(view).sgd(view, segments, momentum_buffer, step, nesterov);
}

double device_sum_of_squares(const ShardView& view, const std::vector<Segment>& segments) {
  return view_loops(view).sum_of_squares(view, segments);
}

void device_scale(const ShardView& view, const std::vector<Segment>& segments, float coefficient) {
  view_loops(view).scale(view, segments, coefficient);
}

bool device_unscale_and_check(const ShardView& view, const std::vector<Segment>& segments,
                              float inv_scale) {
  return view_loops(view).unscale_and_check(view, segments, inv_scale);
}

float all_reduce_scalar(comm::Communicator& comm, float value, comm::ReduceOp op,
                        const comm::CollectiveOptions& options) {
  const Device device = comm.buffer_device();
  if (device.is_cpu()) {
    // The allocator outlives the tensor: the Work drops its buffers before wait() returns.
    CpuAllocator allocator(nullptr);
    Tensor scalar =
        Tensor::empty({1}, DType::kF32, allocator, MemoryCategory::kCommBuffers, options.tag);
    scalar.data<float>()[0] = value;
    comm.all_reduce(scalar, op, options)->wait();
    return scalar.data<float>()[0];
  }
  Tensor scalar = Tensor::empty(
      {1}, DType::kF32, device_loops(device, "a scalar collective").scalar_allocator(device),
      MemoryCategory::kCommBuffers, options.tag);
  scalar.copy_from({value});  // synchronous: complete before the collective is issued
  comm.all_reduce(scalar, op, options)->wait();
  return scalar.item();
}

}  // namespace zs::optim::detail
