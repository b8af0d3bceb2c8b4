// libFuzzer target: token files, zeroshard's and llm.c's layouts (data/token_file.h). The input
// is the file. It is opened without a vocabulary and with one (the check that scans every
// token), and an accepted file is read back whole.
#include <vector>

#include "data/token_file.h"
#include "fuzz/fuzz_input.h"
#include "runtime/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = zs::fuzz::write_scratch_file("input.tokens", data, size);
  for (const uint32_t vocab_size : {0u, 50257u}) {
    try {
      const zs::data::TokenDataset dataset(path, vocab_size);
      std::vector<int32_t> tokens(static_cast<size_t>(dataset.size()));
      dataset.read(0, tokens.size(), tokens.data());
      if (dataset.size() > 0) dataset.at(dataset.size() - 1);
    } catch (const zs::Error&) {
      // A clean rejection of a bad file, or a token that does not fit.
    }
  }
  return 0;
}
