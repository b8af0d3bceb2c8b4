// Helpers for the data tests: a per-test scratch directory under ::testing::TempDir(), raw file
// bytes, llm.c-layout files built by hand, and error-message checks.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

// EXPECT that `text` (a std::string) contains `part`, printing the text when it does not.
#define EXPECT_CONTAINS(text, part)                                      \
  do {                                                                   \
    const std::string zs_text_ = (text);                                 \
    EXPECT_NE(zs_text_.find(part), std::string::npos)                    \
        << "expected to contain: " << (part) << "\nfound: " << zs_text_; \
  } while (0)

namespace zs::data::testing {

// A directory of the running test's own, TempDir/zs_data_<suite>_<test>_<pid>, removed with
// everything in it when the object goes out of scope. Declare it first in a test, so that the
// files it holds outlive the datasets mapping them.
class ScratchDir {
 public:
  ScratchDir() {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::path(::testing::TempDir()) /
           (std::string("zs_data_") + info->test_suite_name() + "_" + info->name() + "_" +
            std::to_string(::getpid()));
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

 private:
  std::filesystem::path dir_;
};

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

// A file in llm.c's layout, built the way llm.c's data_common.py writes it: 256 int32 words
// (magic, version, token count, zeros), then the tokens as uint16 or uint32, little-endian.
inline std::vector<uint8_t> llmc_file(int32_t magic, int32_t version, int32_t count,
                                      const std::vector<uint32_t>& tokens, int token_bytes) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::vector<uint8_t> bytes(header.size() * 4 + tokens.size() * token_bytes);
  std::memcpy(bytes.data(), header.data(), header.size() * 4);
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::memcpy(bytes.data() + 1024 + i * token_bytes, &tokens[i], token_bytes);
  }
  return bytes;
}

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

}  // namespace zs::data::testing
