// ZS_MPI_CHECK: the one place where MPI return codes become zs errors, for the files of the mpi
// backend (comm/mpi/). Internal to the backend: nothing outside comm/mpi/ includes it.
#pragma once

#include <string>

#include "runtime/error.h"

namespace zs::comm {

// Throws the zs error for an MPI return code: argument errors become InvalidArgument (they are
// zeroshard's bug or the caller's), everything else CommError. Defined in mpi_backend.cc.
[[noreturn]] void throw_mpi_error(const char* file, int line, const char* expression, int code,
                                  const std::string& context);

}  // namespace zs::comm

// ZS_MPI_CHECK(MPI_Foo(...), "what zeroshard was doing"): CommError, or InvalidArgument for
// argument errors, naming the MPI function, its error string and the context.
#define ZS_MPI_CHECK(expression, ...)                                            \
  do {                                                                           \
    const int zs_mpi_code_ = (expression);                                       \
    if (zs_mpi_code_ != MPI_SUCCESS)                                             \
      ::zs::comm::throw_mpi_error(__FILE__, __LINE__, #expression, zs_mpi_code_, \
                                  ::zs::detail::concat(__VA_ARGS__));            \
  } while (0)
