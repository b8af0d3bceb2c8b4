// ZS_CUBLAS_CHECK: turns a failing cuBLAS / cuBLASLt status into a zs error naming the call,
// file:line, the rank and cuBLAS's status name and string (see runtime/cuda/check.h for the
// scheme). Header-only so that zs_runtime_cuda does not link cuBLAS; only ops/cuda includes it.
// Thread-safe.
#pragma once

#include <cublas_api.h>

#include "runtime/error.h"
#include "runtime/logging.h"

namespace zs::cuda::detail {

inline std::string cublas_error_message(cublasStatus_t status, const char* call) {
  return ::zs::detail::concat(call, " failed: ", cublasGetStatusName(status), " (",
                              cublasGetStatusString(status), ")");
}

inline cublasStatus_t cublas_check(cublasStatus_t status, const char* call, const char* file,
                                   int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return status;
  const std::string message = cublas_error_message(status, call);
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      ::zs::detail::throw_error<OutOfMemory>(
          file, line, message, "; the GPU is out of memory: lower the batch size or shard more");
    case CUBLAS_STATUS_INVALID_VALUE:
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      ::zs::detail::throw_error<InvalidArgument>(file, line, message);
    default:
      ::zs::detail::throw_error<Error>(file, line, message);
  }
}

inline cublasStatus_t cublas_warn(cublasStatus_t status, const char* call, const char* file,
                                  int line) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    ZS_LOG_ERROR("{}{}", ::zs::detail::error_prefix(file, line),
                 cublas_error_message(status, call));
  }
  return status;
}

}  // namespace zs::cuda::detail

#define ZS_CUBLAS_CHECK(call) ::zs::cuda::detail::cublas_check((call), #call, __FILE__, __LINE__)
#define ZS_CUBLAS_CHECK_WARN(call) \
  ::zs::cuda::detail::cublas_warn((call), #call, __FILE__, __LINE__)
