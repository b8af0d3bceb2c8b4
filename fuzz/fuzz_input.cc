// The scratch files and input splitting of fuzz/fuzz_input.h.
#include "fuzz/fuzz_input.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "runtime/error.h"

namespace zs::fuzz {
namespace {

namespace fs = std::filesystem;

// Owns the scratch directory; removes it when the process exits normally (libFuzzer's
// -max_total_time ends with exit()).
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    path_ = (fs::path(tmp && *tmp ? tmp : "/tmp") /
             ("zs-fuzz-" + std::to_string(static_cast<long>(getpid()))))
                .string();
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

const std::string& scratch_dir() {
  static const ScratchDir dir;
  return dir.path();
}

std::string write_scratch_file(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = (fs::path(scratch_dir()) / name).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  ZS_CHECK_AS(IoError, out.good(), "fuzz: cannot write the scratch file '", path, "'");
  return path;
}

std::string fresh_scratch_dir(const std::string& name) {
  const fs::path dir = fs::path(scratch_dir()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::vector<std::string_view> split_input(const uint8_t* data, size_t size,
                                          std::string_view separator) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  size_t begin = 0;
  for (;;) {
    const size_t found = input.find(separator, begin);
    if (found == std::string_view::npos) break;
    parts.push_back(input.substr(begin, found - begin));
    begin = found + separator.size();
  }
  parts.push_back(input.substr(begin));
  return parts;
}

}  // namespace zs::fuzz
