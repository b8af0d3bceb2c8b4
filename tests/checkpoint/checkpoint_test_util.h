// Helpers for the checkpoint tests: safetensors files assembled by hand (so corrupt ones can be
// made), test values and tiny GPTs, plus the scratch directory, file and error-message helpers
// of tests/support/scratch.h.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "models/gpt.h"
#include "runtime/error.h"
#include "runtime/rng.h"
#include "tests/support/scratch.h"

namespace zs::checkpoint::testing {

// The generic helpers (tests/support/scratch.h), under the names the checkpoint tests use.
using zs::testing::error_message;
using zs::testing::read_bytes;
using zs::testing::ScratchDir;
using zs::testing::write_bytes;

// A safetensors file from its parts: the 8-byte length (the JSON's unless `declared_length` is
// given), the JSON exactly as written (no padding), then `data_bytes` bytes of data.
inline std::vector<uint8_t> safetensors_bytes(const std::string& json, size_t data_bytes,
                                              int64_t declared_length = -1) {
  const uint64_t length =
      declared_length >= 0 ? static_cast<uint64_t>(declared_length) : json.size();
  std::vector<uint8_t> bytes(8 + json.size() + data_bytes, 0);
  std::memcpy(bytes.data(), &length, 8);
  std::memcpy(bytes.data() + 8, json.data(), json.size());
  for (size_t i = 0; i < data_bytes; ++i) bytes[8 + json.size() + i] = static_cast<uint8_t>(i);
  return bytes;
}

// Deterministic values in [-1, 1): element i of stream `name`.
inline std::vector<float> test_values(const std::string& name, size_t count) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) {
    values[i] = static_cast<float>(random_bits(rng_key(7, name), i) % 20001) / 10000.0f - 1.0f;
  }
  return values;
}

// A tiny GPT-2 shape: odd vocab (not a multiple of 128), 2 layers.
inline models::GptConfig tiny_gpt_config() {
  models::GptConfig config;
  config.vocab_size = 37;
  config.context = 8;
  config.width = 16;
  config.n_head = 2;
  config.n_layer = 2;
  return config;
}

}  // namespace zs::checkpoint::testing
