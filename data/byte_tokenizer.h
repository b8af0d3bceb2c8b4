// The byte-level tokenizer: token t is the byte t (0–255), so any text — any byte string, UTF-8
// or not — encodes losslessly and raw text files train out of the box with a 256-token vocab.
// Also the conversion of a text file into a token file (data/token_file.h).
//
// ByteTokenizer has no state; its methods are pure and safe to call from any thread.
// encode_text_file is a one-shot function; the file it writes belongs to the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/token_file.h"

namespace zs::data {

class ByteTokenizer {
 public:
  static constexpr uint32_t kVocabSize = 256;
  uint32_t vocab_size() const { return kVocabSize; }

  // One token per byte, in order.
  std::vector<uint32_t> encode(std::string_view text) const;
  // The bytes back; throws InvalidArgument naming the position of a token outside [0, 256).
  std::string decode(const std::vector<uint32_t>& tokens) const;
  std::string decode(const int32_t* ids, size_t count) const;  // e.g. a row of an id tensor
};

// Encodes the file at `text_path` byte by byte into a token file at `token_path` (vocab size
// 256; 2-byte tokens unless `format` is llm.c's llama-3 layout) and returns the token count.
// The text is mapped, not loaded, and written through TokenFileWriter: memory use stays small
// whatever the file size, and `token_path` appears only once complete. IoError if the text
// cannot be read or the output cannot be written.
uint64_t encode_text_file(const std::string& text_path, const std::string& token_path,
                          TokenFileFormat format = TokenFileFormat::kZeroshard);

}  // namespace zs::data
