// Test helpers shared by the test programs: a per-test scratch directory under
// ::testing::TempDir(), raw file bytes and text, and checks on error messages.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

// EXPECT that `text` (a std::string) contains `part`, printing the text when it does not.
#define EXPECT_CONTAINS(text, part)                                      \
  do {                                                                   \
    const std::string zs_text_ = (text);                                 \
    EXPECT_NE(zs_text_.find(part), std::string::npos)                    \
        << "expected to contain: " << (part) << "\nfound: " << zs_text_; \
  } while (0)

namespace zs::testing {

// A directory of the running test's own, TempDir/<prefix><suite>_<test>_<pid>, removed with
// everything in it when the object goes out of scope. Declare it first in a test, so that the
// files it holds outlive the readers mapping them.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix = "zs_") {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ =
        std::filesystem::path(::testing::TempDir()) /
        (prefix + info->test_suite_name() + "_" + info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // The names of the entries in the directory, in no particular order.
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    return names;
  }

 private:
  std::filesystem::path dir_;
};

// Whether the filesystem of `dir` takes O_DIRECT (tmpfs before Linux 6.6 and some overlays do
// not): tests of the NVMe tier use it where it works.
inline bool direct_io_works(const std::string& dir) {
  const std::string probe = dir + "/.direct-probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  return fd >= 0;
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(file.good()) << "cannot write " << path;
}

inline void write_text(const std::string& path, const std::string& text) {
  write_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(file), {});
}

inline bool file_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// The message of the E that `body` throws, or a failure if it throws nothing or something else.
template <typename E, typename F>
std::string error_message(F&& body) {
  try {
    body();
  } catch (const E& error) {
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "threw a different error: " << error.what();
    return {};
  }
  ADD_FAILURE() << "did not throw";
  return {};
}

}  // namespace zs::testing
