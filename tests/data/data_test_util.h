// Helpers for the data tests: llm.c-layout files built by hand, plus the scratch directory, file
// and error-message helpers of tests/support/scratch.h.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "tests/support/scratch.h"

namespace zs::data::testing {

// The generic helpers (tests/support/scratch.h), under the names the data tests use.
using zs::testing::error_message;
using zs::testing::file_exists;
using zs::testing::read_bytes;
using zs::testing::ScratchDir;
using zs::testing::write_bytes;
using zs::testing::write_text;

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

}  // namespace zs::data::testing
