// write_random_tokens: the token file the benches that run training read (zs-bench-train,
// zs-bench-offload): uniformly random tokens of a vocabulary, from a keyed counter-based stream,
// so a run's data depends only on its seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/token_file.h"
#include "runtime/rng.h"

namespace zs::bench {

inline void write_random_tokens(const std::string& path, size_t count, uint32_t vocab,
                                uint32_t seed) {
  std::vector<uint32_t> tokens(count);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = random_bits(rng_key(seed, "bench tokens", 0), i) % vocab;
  }
  data::TokenWriteOptions options;
  options.vocab_size = vocab;
  data::write_token_file(path, tokens, options);
}

}  // namespace zs::bench
