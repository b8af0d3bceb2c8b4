// CUDA check macros and device discovery (see check.h).
#include "runtime/cuda/check.h"

#include "runtime/error.h"
#include "runtime/logging.h"

namespace zs::cuda {
namespace {

// The statuses that mean "no usable GPU on this machine" rather than a bug: no driver (or one
// too old), the toolkit's stub libcuda, no device, or devices hidden (CUDA_VISIBLE_DEVICES="").
bool means_no_gpu(cudaError_t status) {
  switch (status) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInitializationError:
      return true;
    default:
      return false;
  }
}

struct DeviceQuery {
  int count = 0;
  cudaError_t status = cudaSuccess;
};

DeviceQuery query_devices() {
  DeviceQuery query;
  // Not through ZS_CUDA_CHECK_*: a failure here is an answer (0 devices), not an error. The
  // static test accepts this one call by the marker on its line.
  query.status = cudaGetDeviceCount(&query.count);  // zs-unchecked: the status is the answer
  if (query.status != cudaSuccess) {
    query.count = 0;
    // Clear the (non-sticky) error so a later cudaGetLastError after a kernel does not see it.
    (void)cudaGetLastError();  // zs-unchecked: clears the error just read
  }
  return query;
}

}  // namespace

int cuda_device_count() { return query_devices().count; }

int cuda_device_count(std::string* why) {
  const int n = cuda_device_count();
  if (n == 0 && why != nullptr) *why = cuda_unavailable_reason();
  return n;
}

std::string cuda_unavailable_reason() {
  const DeviceQuery query = query_devices();
  if (query.count > 0) return "";
  if (query.status == cudaSuccess) return "the CUDA driver reports 0 devices";
  return ::zs::detail::concat(cudaGetErrorName(query.status), ": ",
                              cudaGetErrorString(query.status),
                              means_no_gpu(query.status) ? "" : " (unexpected: treated as no GPU)");
}

namespace detail {

std::string cuda_error_message(cudaError_t status, const char* call) {
  return ::zs::detail::concat(call, " failed: ", cudaGetErrorName(status), " (",
                              cudaGetErrorString(status), ")");
}

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  // Reset the thread's last error so that the next ZS_CUDA_CHECK(cudaGetLastError()) after a
  // launch reports that launch, not this call (sticky errors stay, as they must).
  (void)cudaGetLastError();  // zs-unchecked: clears the error being reported
  const std::string message = cuda_error_message(status, call);
  if (status == cudaErrorMemoryAllocation) {
    ::zs::detail::throw_error<OutOfMemory>(file, line, message,
                                           "; the GPU is out of memory: lower the batch size, "
                                           "shard more (a higher ZeRO stage or more ranks) or "
                                           "offload");
  }
  if (status == cudaErrorInvalidValue || status == cudaErrorInvalidDevice ||
      status == cudaErrorInvalidDevicePointer || status == cudaErrorInvalidMemcpyDirection) {
    ::zs::detail::throw_error<InvalidArgument>(file, line, message);
  }
  ::zs::detail::throw_error<Error>(file, line, message);
}

void warn_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // zs-unchecked: clears the error being reported
  ZS_LOG_ERROR("{}{}", ::zs::detail::error_prefix(file, line), cuda_error_message(status, call));
}

}  // namespace detail
}  // namespace zs::cuda
