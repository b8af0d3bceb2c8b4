// The error hierarchy of zeroshard and the ZS_CHECK macro.
//
// Every failure a user can meet is one of these types, so callers can catch by kind
// (a CommTimeout is retried differently from a CorruptCheckpoint). A message says what was
// expected, what was found and what to do; ZS_CHECK prefixes it with the rank and file:line.
// All functions here are thread-safe.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace zs {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};
class InvalidArgument : public Error {
  using Error::Error;
};
class OutOfMemory : public Error {
  using Error::Error;
};
class CommError : public Error {
  using Error::Error;
};
class CommTimeout : public CommError {
  using CommError::CommError;
};
class IoError : public Error {
  using Error::Error;
};
class CorruptCheckpoint : public Error {
  using Error::Error;
};
class NotImplemented : public Error {
  using Error::Error;
};
// Touching a tensor whose storage was released (e.g. a sharded parameter outside its unit).
class ReleasedTensor : public Error {
  using Error::Error;
};
class NumericalError : public Error {
  using Error::Error;
};

namespace detail {

template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

// "[rank 3] file.cc:42: " (or "[rank -]" outside a rank).
std::string error_prefix(const char* file, int line);

template <typename E, typename... Args>
[[noreturn]] void throw_error(const char* file, int line, Args&&... args) {
  throw E(error_prefix(file, line) + concat(std::forward<Args>(args)...));
}

}  // namespace detail
}  // namespace zs

// ZS_CHECK(cond, "expected ", a, ", found ", b, "; do X") throws InvalidArgument.
#define ZS_CHECK(cond, ...)                                                              \
  do {                                                                                   \
    if (!(cond))                                                                         \
      ::zs::detail::throw_error<::zs::InvalidArgument>(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

// ZS_CHECK_AS(ErrorType, cond, ...) throws the named error type.
#define ZS_CHECK_AS(ErrorType, cond, ...)                                                     \
  do {                                                                                        \
    if (!(cond)) ::zs::detail::throw_error<::zs::ErrorType>(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

#define ZS_THROW(ErrorType, ...) \
  ::zs::detail::throw_error<::zs::ErrorType>(__FILE__, __LINE__, __VA_ARGS__)
