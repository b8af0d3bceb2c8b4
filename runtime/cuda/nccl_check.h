// ZS_NCCL_CHECK: turns a failing NCCL result into a zs error naming the call, file:line, the
// rank, NCCL's error string and NCCL's last-error text: InvalidArgument for ncclInvalidArgument /
// ncclInvalidUsage (zeroshard's bug or the caller's, as flashlight maps them), CommError for the
// rest (system, remote, internal, CUDA errors). ncclInProgress is not an error: communicators
// created non-blocking (comm/nccl) return it while an operation is still being set up, and the
// caller polls ncclCommGetAsyncError; the macro evaluates to the result so that it can tell.
// Header-only so that only comm/nccl links NCCL. Thread-safe.
#pragma once

#include <nccl.h>

#include "runtime/error.h"
#include "runtime/logging.h"

namespace zs::cuda::detail {

inline std::string nccl_error_message(ncclResult_t result, const char* call) {
  // ncclGetLastError: the library's own detail ("NET/Socket : Connection closed by ..."),
  // possibly from an earlier asynchronous operation; it is not cleared by reading it.
  const char* last = ncclGetLastError(nullptr);
  return ::zs::detail::concat(call, " failed: ", ncclGetErrorString(result),
                              (last != nullptr && last[0] != '\0') ? " — NCCL says: " : "",
                              last != nullptr ? last : "");
}

inline ncclResult_t nccl_check(ncclResult_t result, const char* call, const char* file, int line) {
  if (result == ncclSuccess || result == ncclInProgress) return result;
  const std::string message = nccl_error_message(result, call);
  if (result == ncclInvalidArgument || result == ncclInvalidUsage) {
    ::zs::detail::throw_error<InvalidArgument>(file, line, message);
  }
  ::zs::detail::throw_error<CommError>(file, line, message);
}

inline ncclResult_t nccl_warn(ncclResult_t result, const char* call, const char* file, int line) {
  if (result != ncclSuccess && result != ncclInProgress) {
    ZS_LOG_ERROR("{}{}", ::zs::detail::error_prefix(file, line), nccl_error_message(result, call));
  }
  return result;
}

}  // namespace zs::cuda::detail

#define ZS_NCCL_CHECK(call) ::zs::cuda::detail::nccl_check((call), #call, __FILE__, __LINE__)
#define ZS_NCCL_CHECK_WARN(call) ::zs::cuda::detail::nccl_warn((call), #call, __FILE__, __LINE__)
