// Registers the nccl backend with the communicator factory (comm/gpu_backend.h): a static
// initializer installs its GpuCommBackend entry under Device::Kind::kCUDA. zs_comm_nccl's CMake
// target makes every program that links it pull this file in (its INTERFACE link option
// --undefined=zs_comm_nccl_anchor names the anchor below), so linking the library is what
// registers the backend; zs_comm itself never links it (no cycle).
//
// Thread-safety: the entry is immutable; installing it happens once, before main.
#include <cuda_runtime_api.h>

#include <cstring>
#include <utility>
#include <vector>

#include "comm/gpu_backend.h"
#include "comm/nccl/nccl_backend.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/nccl_check.h"
#include "runtime/device_kernels.h"
#include "runtime/error.h"

// The symbol the linker is told to resolve (comm/nccl/CMakeLists.txt).
extern "C" const char zs_comm_nccl_anchor = 0;

namespace zs::comm {
namespace {

void nccl_make_current(int device) { ZS_CUDA_CHECK(cudaSetDevice(device)); }

std::unique_ptr<Backend> nccl_create(std::unique_ptr<Backend> bootstrap, int device,
                                     std::chrono::milliseconds timeout,
                                     MemoryTracker* scratch_tracker) {
  NcclBackendOptions options;
  options.tracker = scratch_tracker;
  return NcclBackend::create(std::move(bootstrap), device, timeout, options);
}

std::vector<uint8_t> nccl_make_unique_id() {
  ncclUniqueId id;
  ZS_NCCL_CHECK(ncclGetUniqueId(&id));
  const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
  return std::vector<uint8_t>(bytes, bytes + sizeof(id));
}

std::unique_ptr<Backend> nccl_create_from_id(const std::vector<uint8_t>& unique_id, int rank,
                                             int size, int device,
                                             std::chrono::milliseconds timeout,
                                             MemoryTracker* scratch_tracker) {
  ncclUniqueId id;
  ZS_CHECK_AS(CommError, unique_id.size() == sizeof(id), "rank ", rank, " of ", size,
              ": NCCL's unique id from rank 0 has ", unique_id.size(), " bytes, expected ",
              sizeof(id), "; every rank must run the same zeroshard build (same NCCL)");
  std::memcpy(&id, unique_id.data(), sizeof(id));
  NcclBackendOptions options;
  options.tracker = scratch_tracker;
  return NcclBackend::create_from_id(id, rank, size, device, timeout, options);
}

const GpuCommBackend kNcclBackend{"nccl",      zs::cuda::cuda_device_count, nccl_make_current,
                                  nccl_create, nccl_make_unique_id,         nccl_create_from_id};

const bool kRegistered = [] {
  DeviceTables<GpuCommBackend>::install(Device::Kind::kCUDA, &kNcclBackend);
  return true;
}();

}  // namespace
}  // namespace zs::comm
