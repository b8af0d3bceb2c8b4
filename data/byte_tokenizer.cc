// Byte-level encode/decode and the streaming text-file conversion.
#include "data/byte_tokenizer.h"

#include <algorithm>

#include "runtime/error.h"
#include "runtime/file_io.h"

namespace zs::data {

std::vector<uint32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<uint8_t>(text[i]);
  return tokens;
}

std::string ByteTokenizer::decode(const std::vector<uint32_t>& tokens) const {
  std::string text(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    ZS_CHECK(tokens[i] < kVocabSize, "byte tokenizer: token ", i, " is ", tokens[i],
             ", outside the byte vocabulary [0, 256); these ids came from another tokenizer");
    text[i] = static_cast<char>(static_cast<uint8_t>(tokens[i]));
  }
  return text;
}

std::string ByteTokenizer::decode(const int32_t* ids, size_t count) const {
  ZS_CHECK(ids != nullptr || count == 0, "byte tokenizer: null ids with count ", count);
  std::string text(count, '\0');
  for (size_t i = 0; i < count; ++i) {
    ZS_CHECK(ids[i] >= 0 && ids[i] < static_cast<int32_t>(kVocabSize), "byte tokenizer: id ", i,
             " is ", ids[i],
             ", outside the byte vocabulary [0, 256); these ids came from another tokenizer");
    text[i] = static_cast<char>(static_cast<uint8_t>(ids[i]));
  }
  return text;
}

uint64_t encode_text_file(const std::string& text_path, const std::string& token_path,
                          TokenFileFormat format) {
  const zs::detail::MappedFile text(text_path, "text file");
  TokenWriteOptions options;
  options.format = format;
  options.vocab_size = ByteTokenizer::kVocabSize;  // recorded by the zeroshard layout only
  TokenFileWriter writer(token_path, options);
  // Chunks bound the memory of the widened tokens; the writer buffers the file writes.
  constexpr size_t kChunkBytes = size_t{1} << 16;
  std::vector<uint32_t> tokens(kChunkBytes);
  for (size_t begin = 0; begin < text.size(); begin += kChunkBytes) {
    const size_t count = std::min(kChunkBytes, text.size() - begin);
    for (size_t i = 0; i < count; ++i) tokens[i] = text.data()[begin + i];
    writer.append(tokens.data(), count);
  }
  writer.commit();
  return writer.num_tokens();
}

}  // namespace zs::data
