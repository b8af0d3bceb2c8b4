// train/device.h: the engine's devices through the rank-device registry. The CPU needs no
// RankDevice; a GPU's comes from the entry that train/cuda installs when linked.
#include "train/device.h"

#include "runtime/device_kernels.h"
#include "runtime/error.h"

namespace zs::train {
namespace {

constexpr const char* kNoCudaBackend =
    "this build has no CUDA backend (configure zeroshard with -DZS_CUDA=ON on a machine with "
    "the CUDA toolkit, and link the program with zs_train, which brings zs_train_cuda)";

const RankDeviceBackend* cuda_backend() {
  return DeviceTables<RankDeviceBackend>::find(Device::Kind::kCUDA);
}

}  // namespace

int cuda_devices(std::string* why) {
  const RankDeviceBackend* backend = cuda_backend();
  if (backend == nullptr) {
    if (why != nullptr) *why = kNoCudaBackend;
    return 0;
  }
  return backend->device_count(why);
}

std::unique_ptr<RankDevice> make_cuda_device(int index, MemoryTracker* tracker) {
  const RankDeviceBackend* backend = cuda_backend();
  if (backend == nullptr) ZS_THROW(InvalidArgument, "cuda:", index, ": ", kNoCudaBackend);
  return backend->make(index, tracker);
}

}  // namespace zs::train
