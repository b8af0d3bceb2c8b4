// Check macros for CUDA runtime calls, and the question "is there a GPU here at all".
//
// Every CUDA runtime call in zeroshard goes through ZS_CUDA_CHECK (cuBLAS: ZS_CUBLAS_CHECK in
// runtime/cuda/cublas_check.h; NCCL: ZS_NCCL_CHECK in runtime/cuda/nccl_check.h), which turns a
// failing status into a zs error naming the call as written, file:line, the rank and CUDA's own
// error name and string: OutOfMemory for allocation failures, InvalidArgument for invalid
// values/devices, Error for the rest. A grep-level test (tests/cuda/check_macros_static.cc)
// fails the build's tests if any cuda*/cublas*/nccl* call in our CUDA sources is not wrapped.
// Destructors cannot throw: they use ZS_CUDA_CHECK_WARN, which logs the same message instead.
//
// A kernel launch has no status of its own: follow each <<<...>>> with
// ZS_CUDA_CHECK(cudaGetLastError()) (the static test checks that too).
//
// Thread-safety: everything here is safe from any thread.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace zs::cuda {

// The number of CUDA devices, or 0 — never an exception — when there is no driver, no device,
// or only the toolkit's stub driver (a build machine). Any other failure of the query is also
// reported as 0 devices; cuda_unavailable_reason() says which.
int cuda_device_count();
// Why cuda_device_count() is 0 ("cudaErrorInsufficientDriver: CUDA driver version is
// insufficient ..."), or "" when devices exist.
std::string cuda_unavailable_reason();
// cuda_device_count(), and where it is 0 and `why` is not null, cuda_unavailable_reason() in
// *why: the shape of the device-count entry in the backends' tables.
int cuda_device_count(std::string* why);

namespace detail {

// "cudaMalloc(&p, n) failed: cudaErrorMemoryAllocation (out of memory)".
std::string cuda_error_message(cudaError_t status, const char* call);
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                   int line);
void warn_cuda_error(cudaError_t status, const char* call, const char* file, int line);

inline cudaError_t cuda_check(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) throw_cuda_error(status, call, file, line);
  return status;
}
inline cudaError_t cuda_warn(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) warn_cuda_error(status, call, file, line);
  return status;
}

}  // namespace detail
}  // namespace zs::cuda

// ZS_CUDA_CHECK(cudaMemcpyAsync(...)): throws on failure; evaluates to the (success) status.
#define ZS_CUDA_CHECK(call) ::zs::cuda::detail::cuda_check((call), #call, __FILE__, __LINE__)
// For destructors and other no-throw paths: logs the error (with the same message) and goes on.
#define ZS_CUDA_CHECK_WARN(call) ::zs::cuda::detail::cuda_warn((call), #call, __FILE__, __LINE__)
