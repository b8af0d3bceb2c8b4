// GPU-free checks of the CUDA path (ctest label `unit`, program zs_cuda_unit_tests):
//
// 1. A grep-level static check: every call of a CUDA runtime (cuda*), cuBLAS (cublas*), NCCL
//    (nccl*) or cuDNN (cudnn*) function in our CUDA sources (runtime/cuda, ops/cuda, comm/nccl,
//    optim/cuda, train/cuda, tests/cuda, and the shared files of runtime, ops, comm, optim,
//    sharding, train and apps, which should reach CUDA only through the backends' tables) is the
//    argument of a check macro (ZS_CUDA_CHECK, ZS_CUBLAS_CHECK, ZS_NCCL_CHECK, ZS_CUDNN_CHECK or
//    their _WARN forms), and every kernel launch (<<<…>>>) is followed by
//    ZS_CUDA_CHECK(cudaGetLastError()). Exceptions: the functions that only describe an error or
//    return no status (cudaGetErrorName, cudnnGetVersion, …), and lines marked
//    "zs-unchecked: <reason>" (a status that is an answer, e.g. cudaErrorNotReady, or cuDNN's
//    NOT_SUPPORTED from a finalize).
//    The scan strips comments and string literals first, and a self-test feeds it a bad snippet
//    so that a broken scanner cannot pass vacuously.
// 2. The macros' behaviour, which needs no GPU: the error types and messages for failing
//    statuses (cuDNN's where the build has it: ZS_HAVE_CUDNN, from zs_ops_cuda), and
//    cuda_device_count() returning 0 without throwing on a machine without one.
//
// The source root comes from the compile definition ZS_SOURCE_ROOT (tests/cuda/CMakeLists.txt).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/cuda/check.h"
#include "runtime/cuda/cublas_check.h"
#include "runtime/cuda/nccl_check.h"
#include "runtime/error.h"

#if ZS_HAVE_CUDNN
#include "runtime/cuda/cudnn_check.h"
#endif

namespace zs {
namespace {

// Blanks comments and string/char literals (keeping newlines, so offsets map to lines).
std::string strip_comments_and_strings(const std::string& text) {
  std::string out = text;
  enum { kCode, kLine, kBlock, kString, kChar } state = kCode;
  for (size_t i = 0; i < out.size(); ++i) {
    const char c = text[i];
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    switch (state) {
      case kCode:
        if (c == '/' && next == '/') {
          state = kLine;
          out[i] = ' ';
        } else if (c == '/' && next == '*') {
          state = kBlock;
          out[i] = ' ';
        } else if (c == '"') {
          state = kString;
        } else if (c == '\'') {
          state = kChar;
        }
        break;
      case kLine:
        if (c == '\n') {
          state = kCode;
        } else {
          out[i] = ' ';
        }
        break;
      case kBlock:
        if (c == '*' && next == '/') {
          out[i] = ' ';
          out[i + 1] = ' ';
          ++i;
          state = kCode;
        } else if (c != '\n') {
          out[i] = ' ';
        }
        break;
      case kString:
      case kChar:
        if (c == '\\') {
          out[i] = ' ';
          if (i + 1 < out.size() && text[i + 1] != '\n') out[++i] = ' ';
        } else if ((state == kString && c == '"') || (state == kChar && c == '\'')) {
          state = kCode;
        } else if (c != '\n') {
          out[i] = ' ';
        }
        break;
    }
  }
  return out;
}

struct ScanResult {
  int calls = 0;     // API calls seen (wrapped or allowed)
  int launches = 0;  // kernel launches seen
  std::vector<std::string> violations;
};

size_t line_of(const std::string& text, size_t pos) {
  return 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + pos, '\n'));
}

std::string line_text(const std::string& text, size_t line) {
  std::istringstream in(text);
  std::string current;
  for (size_t i = 0; i < line && std::getline(in, current); ++i) {
  }
  return current;
}

// True if, in `code` before `pos`, a check macro's argument list is open (the call at `pos` is
// inside ZS_*_CHECK( … )) within the current statement.
bool inside_check_macro(const std::string& code, size_t pos) {
  size_t start = code.find_last_of(";{}", pos == 0 ? 0 : pos - 1);
  start = start == std::string::npos ? 0 : start + 1;
  const std::string statement = code.substr(start, pos - start);
  static const std::regex kMacro(R"(\bZS_(CUDA|CUBLAS|NCCL|CUDNN)_CHECK(_WARN)?\s*\()");
  for (std::sregex_iterator it(statement.begin(), statement.end(), kMacro), end; it != end; ++it) {
    int depth = 1;
    for (size_t i = static_cast<size_t>(it->position() + it->length()); i < statement.size(); ++i) {
      if (statement[i] == '(') ++depth;
      if (statement[i] == ')' && --depth == 0) break;
    }
    if (depth > 0) return true;
  }
  return false;
}

void scan_source(const std::string& name, const std::string& text, ScanResult& result) {
  static const std::set<std::string> kDescribeOnly = {
      "cudaGetErrorName",      "cudaGetErrorString",      "cublasGetStatusName",
      "cublasGetStatusString", "ncclGetErrorString",      "ncclGetLastError",
      "cudnnGetErrorString",   "cudnnGetLastErrorString", "cudnnGetVersion"};
  static const std::regex kCall(R"(\b((cuda|cublas|nccl|cudnn)[A-Z]\w*)\s*\()");
  const std::string code = strip_comments_and_strings(text);
  for (std::sregex_iterator it(code.begin(), code.end(), kCall), end; it != end; ++it) {
    const std::string function = (*it)[1];
    const size_t pos = static_cast<size_t>(it->position());
    ++result.calls;
    if (kDescribeOnly.count(function)) continue;
    const size_t line = line_of(code, pos);
    if (line_text(text, line).find("zs-unchecked:") != std::string::npos) continue;
    if (inside_check_macro(code, pos)) continue;
    result.violations.push_back(name + ":" + std::to_string(line) + ": " + function +
                                "(…) is not wrapped in ZS_CUDA_CHECK / ZS_CUBLAS_CHECK / "
                                "ZS_NCCL_CHECK / ZS_CUDNN_CHECK (or marked "
                                "'zs-unchecked: <reason>')");
  }
  // Kernel launches: the statement after the launch must check cudaGetLastError().
  static const std::regex kLaunchCheck(
      R"(^\s*ZS_CUDA_CHECK\s*\(\s*cudaGetLastError\s*\(\s*\)\s*\))");
  for (size_t pos = code.find("<<<"); pos != std::string::npos; pos = code.find("<<<", pos + 3)) {
    ++result.launches;
    const size_t launch_end = code.find(';', pos);
    const std::string after = launch_end == std::string::npos ? "" : code.substr(launch_end + 1);
    if (!std::regex_search(after, kLaunchCheck)) {
      result.violations.push_back(name + ":" + std::to_string(line_of(code, pos)) +
                                  ": kernel launch not followed by "
                                  "ZS_CUDA_CHECK(cudaGetLastError())");
    }
  }
}

TEST(CudaStaticCheck, ScannerFlagsUnwrappedCallsAndLaunches) {
  const std::string bad =
      "void f(cudaStream_t s) {\n"
      "  cudaMemsetAsync(p, 0, 4, s);\n"                 // line 2: unwrapped
      "  ZS_CUDA_CHECK(cudaMemsetAsync(p, 0, 4, s));\n"  // fine
      "  // cudaFree(p); in a comment is not a call\n"
      "  const char* t = \"ncclAllReduce(\";\n"  // in a string: not a call
      "  kernel<<<1, 32, 0, s>>>(p);\n"          // line 6: launch without check
      "  ZS_NCCL_CHECK(ncclGroupStart());\n"
      "  x = cublasCreate(&h);\n"  // line 8: unwrapped
      "  (void)cudaGetLastError();  // zs-unchecked: test\n"
      "  cudnnBackendFinalize(d);\n"               // line 10: unwrapped
      "  ZS_CUDNN_CHECK(cudnnSetStream(h, s));\n"  // fine
      "  ZS_CUDNN_CHECK_WARN(cudnnDestroy(h));\n"  // fine
      "  const size_t v = cudnnGetVersion();\n"    // no status: fine
      "  s = cudnnBackendExecute(h, p, v);  // zs-unchecked: test\n"
      "}\n";
  ScanResult result;
  scan_source("bad.cu", bad, result);
  ASSERT_EQ(result.violations.size(), 4u) << ::testing::PrintToString(result.violations);
  EXPECT_NE(result.violations[0].find("bad.cu:2: cudaMemsetAsync"), std::string::npos);
  EXPECT_NE(result.violations[1].find("bad.cu:8: cublasCreate"), std::string::npos);
  EXPECT_NE(result.violations[2].find("bad.cu:10: cudnnBackendFinalize"), std::string::npos);
  EXPECT_NE(result.violations[3].find("bad.cu:6: kernel launch"), std::string::npos);
}

TEST(CudaStaticCheck, EveryCudaCublasNcclCudnnCallIsWrappedInACheckMacro) {
  namespace fs = std::filesystem;
  const fs::path root = ZS_SOURCE_ROOT;
  ScanResult result;
  int files = 0;
  // The CUDA folders, and the shared folders (which should reach CUDA only through the backends'
  // tables). Each folder's own files, not its subfolders.
  for (const char* dir :
       {"runtime/cuda", "ops/cuda", "comm/nccl", "optim/cuda", "train/cuda", "tests/cuda",
        "runtime", "ops", "comm", "optim", "sharding", "train", "apps"}) {
    ASSERT_TRUE(fs::is_directory(root / dir)) << (root / dir) << " is missing";
    for (const auto& entry : fs::directory_iterator(root / dir)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".h" && ext != ".cc" && ext != ".cu" && ext != ".cuh") continue;
      if (entry.path().filename() == "check_macros_static.cc") continue;  // quotes bad snippets
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      scan_source(fs::relative(entry.path(), root).string(), text.str(), result);
      ++files;
    }
  }
  std::printf("scanned %d files: %d CUDA/cuBLAS/NCCL/cuDNN calls, %d kernel launches\n", files,
              result.calls, result.launches);
  // Not vacuous: the sources are there and do call the APIs.
  EXPECT_GE(files, 15);
  EXPECT_GE(result.calls, 50);
  EXPECT_GE(result.launches, 10);
  EXPECT_TRUE(result.violations.empty()) << result.violations.size() << " unchecked call(s):\n"
                                         << ::testing::PrintToString(result.violations);
}

// ---- the macros, without a GPU

TEST(CudaCheckMacros, DeviceCountIsZeroWithoutThrowingWhenThereIsNoGpu) {
  int count = -1;
  ASSERT_NO_THROW(count = cuda::cuda_device_count());
  EXPECT_GE(count, 0);
  if (count == 0) {
    const std::string reason = cuda::cuda_unavailable_reason();
    EXPECT_FALSE(reason.empty());
    std::printf("no CUDA device here: %s\n", reason.c_str());
  }
}

TEST(CudaCheckMacros, CudaErrorsBecomeTypedErrorsNamingTheCallAndPlace) {
  try {
    ZS_CUDA_CHECK(cudaErrorMemoryAllocation);
    FAIL() << "no exception";
  } catch (const OutOfMemory& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaErrorMemoryAllocation"), std::string::npos) << what;
    EXPECT_NE(what.find("check_macros_static.cc:"), std::string::npos) << what;
    EXPECT_NE(what.find("out of memory"), std::string::npos) << what;
  }
  EXPECT_THROW(ZS_CUDA_CHECK(cudaErrorInvalidValue), InvalidArgument);
  EXPECT_THROW(ZS_CUDA_CHECK(cudaErrorLaunchFailure), Error);
  EXPECT_NO_THROW(ZS_CUDA_CHECK(cudaSuccess));
  EXPECT_NO_THROW(ZS_CUDA_CHECK_WARN(cudaErrorLaunchFailure));  // logs only
}

TEST(CudaCheckMacros, CublasAndNcclStatusesMapToTheErrorHierarchy) {
  try {
    ZS_CUBLAS_CHECK(CUBLAS_STATUS_INVALID_VALUE);
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("CUBLAS_STATUS_INVALID_VALUE"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ZS_CUBLAS_CHECK(CUBLAS_STATUS_ALLOC_FAILED), OutOfMemory);
  EXPECT_THROW(ZS_CUBLAS_CHECK(CUBLAS_STATUS_EXECUTION_FAILED), Error);
  EXPECT_NO_THROW(ZS_CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS));

  EXPECT_THROW(ZS_NCCL_CHECK(ncclInvalidArgument), InvalidArgument);
  EXPECT_THROW(ZS_NCCL_CHECK(ncclInvalidUsage), InvalidArgument);
  try {
    ZS_NCCL_CHECK(ncclRemoteError);
    FAIL() << "no exception";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("ncclRemoteError"), std::string::npos) << e.what();
  }
  // Not errors: a non-blocking communicator's "still setting up".
  EXPECT_EQ(ZS_NCCL_CHECK(ncclInProgress), ncclInProgress);
  EXPECT_EQ(ZS_NCCL_CHECK(ncclSuccess), ncclSuccess);
}

#if ZS_HAVE_CUDNN
TEST(CudaCheckMacros, CudnnStatusesMapByCategory) {
  try {
    ZS_CUDNN_CHECK(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN);
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN"), std::string::npos) << what;
    EXPECT_NE(what.find("check_macros_static.cc:"), std::string::npos) << what;
  }
  EXPECT_TRUE(cuda::detail::cudnn_not_supported(CUDNN_STATUS_NOT_SUPPORTED_SHAPE));
  EXPECT_FALSE(cuda::detail::cudnn_not_supported(CUDNN_STATUS_BAD_PARAM));
  EXPECT_THROW(ZS_CUDNN_CHECK(CUDNN_STATUS_NOT_SUPPORTED), InvalidArgument);
  EXPECT_THROW(ZS_CUDNN_CHECK(CUDNN_STATUS_BAD_PARAM), InvalidArgument);
  EXPECT_THROW(ZS_CUDNN_CHECK(CUDNN_STATUS_BAD_PARAM_NULL_POINTER), InvalidArgument);
  EXPECT_THROW(ZS_CUDNN_CHECK(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED), OutOfMemory);
  EXPECT_THROW(ZS_CUDNN_CHECK(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED), OutOfMemory);
  try {
    ZS_CUDNN_CHECK(CUDNN_STATUS_EXECUTION_FAILED);
    FAIL() << "no exception";
  } catch (const InvalidArgument&) {
    FAIL() << "an execution failure is not an argument error";
  } catch (const OutOfMemory&) {
    FAIL() << "an execution failure is not out of memory";
  } catch (const Error&) {
  }
  EXPECT_NO_THROW(ZS_CUDNN_CHECK(CUDNN_STATUS_SUCCESS));
  EXPECT_NO_THROW(ZS_CUDNN_CHECK_WARN(CUDNN_STATUS_INTERNAL_ERROR));  // logs only
}
#endif

}  // namespace
}  // namespace zs
