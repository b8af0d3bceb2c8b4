// ZS_CUDNN_CHECK: turns a failing cuDNN status into a zs error naming the call, file:line, the
// rank, cuDNN's status string and, when cuDNN left one on this thread, its last error message
// (cudnnGetLastErrorString, which says which attribute or engine refused). The scheme is
// runtime/cuda/check.h's. Header-only so that zs_runtime_cuda does not link cuDNN; only
// ops/cuda (built with ZS_HAVE_CUDNN=1) and the check-macro test include it.
//
// cuDNN 9 groups its status codes by category (CUDNN_STATUS_CATEGORY: the thousands): every
// CUDNN_STATUS_NOT_SUPPORTED_* and CUDNN_STATUS_BAD_PARAM_* sub-code (and the deprecated
// CUDNN_STATUS_INVALID_VALUE = 2001) maps to InvalidArgument; the host and device allocation
// failures (CUDNN_STATUS_INTERNAL_ERROR_{HOST,DEVICE}_ALLOCATION_FAILED; the deprecated
// CUDNN_STATUS_ALLOC_FAILED is an alias of the host one) to OutOfMemory; the rest to Error.
// Callers for whom NOT_SUPPORTED is an answer rather than an error (ops/cuda/cudnn_attention.cc)
// test the status themselves before handing the others to cudnn_check.
//
// Thread-safe (cudnnGetLastErrorString reads the calling thread's last error).
#pragma once

#include <cudnn_graph.h>

#include <string>

#include "runtime/error.h"
#include "runtime/logging.h"

namespace zs::cuda::detail {

inline bool cudnn_not_supported(cudnnStatus_t status) {
  return CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED;
}

inline std::string cudnn_error_message(cudnnStatus_t status, const char* call) {
  char last[512] = {};
  cudnnGetLastErrorString(last, sizeof(last));
  std::string message = ::zs::detail::concat(call, " failed: ", cudnnGetErrorString(status),
                                             " (status ", static_cast<int>(status), ")");
  if (last[0] != '\0') message += ::zs::detail::concat(": ", last);
  return message;
}

inline cudnnStatus_t cudnn_check(cudnnStatus_t status, const char* call, const char* file,
                                 int line) {
  if (status == CUDNN_STATUS_SUCCESS) return status;
  const std::string message = cudnn_error_message(status, call);
  if (status == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
      status == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED) {
    ::zs::detail::throw_error<OutOfMemory>(file, line, message,
                                           "; out of memory: lower the batch size or shard more");
  }
  const int category = CUDNN_STATUS_CATEGORY(status);
  if (category == CUDNN_STATUS_NOT_SUPPORTED || category == CUDNN_STATUS_BAD_PARAM) {
    ::zs::detail::throw_error<InvalidArgument>(file, line, message);
  }
  ::zs::detail::throw_error<Error>(file, line, message);
}

inline cudnnStatus_t cudnn_warn(cudnnStatus_t status, const char* call, const char* file,
                                int line) {
  if (status != CUDNN_STATUS_SUCCESS) {
    ZS_LOG_ERROR("{}{}", ::zs::detail::error_prefix(file, line), cudnn_error_message(status, call));
  }
  return status;
}

}  // namespace zs::cuda::detail

// ZS_CUDNN_CHECK(cudnnSetStream(...)): throws on failure; evaluates to the (success) status.
#define ZS_CUDNN_CHECK(call) ::zs::cuda::detail::cudnn_check((call), #call, __FILE__, __LINE__)
// For destructors and other no-throw paths: logs the error (with the same message) and goes on.
#define ZS_CUDNN_CHECK_WARN(call) ::zs::cuda::detail::cudnn_warn((call), #call, __FILE__, __LINE__)
