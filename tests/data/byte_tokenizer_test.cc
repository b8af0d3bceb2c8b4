// The byte tokenizer round-trips arbitrary bytes (NUL, invalid UTF-8, all 256 values), rejects
// ids outside the byte vocabulary, and turns text files into token files that read back as the
// text's bytes.
#include "data/byte_tokenizer.h"

#include <gtest/gtest.h>

#include "data_test_util.h"
#include "runtime/error.h"
#include "runtime/rng.h"

namespace zs::data {
namespace {

using testing::error_message;
using testing::file_exists;
using testing::ScratchDir;
using testing::write_text;

std::string all_bytes() {
  std::string text(256, '\0');
  for (int b = 0; b < 256; ++b) text[b] = static_cast<char>(b);
  return text;
}

std::string random_bytes(size_t count, uint64_t seed) {
  std::string text(count, '\0');
  const RngKey key = rng_key(seed, "bytes");
  for (size_t i = 0; i < count; ++i) text[i] = static_cast<char>(random_bits(key, i) & 0xFF);
  return text;
}

TEST(ByteTokenizer, EveryByteIsItsOwnToken) {
  const ByteTokenizer tokenizer;
  EXPECT_EQ(tokenizer.vocab_size(), 256u);
  const std::vector<uint32_t> tokens = tokenizer.encode(all_bytes());
  ASSERT_EQ(tokens.size(), 256u);
  for (uint32_t b = 0; b < 256; ++b) EXPECT_EQ(tokens[b], b);
  EXPECT_EQ(tokenizer.encode("hé"), (std::vector<uint32_t>{0x68, 0xC3, 0xA9}));  // UTF-8 bytes
}

TEST(ByteTokenizer, RoundTripsArbitraryBytes) {
  const ByteTokenizer tokenizer;
  for (const std::string& text : {std::string(), all_bytes(), std::string("a\0b\xff\xfe\x80", 6),
                                  random_bytes(10000, 1), random_bytes(1, 2)}) {
    const std::vector<uint32_t> tokens = tokenizer.encode(text);
    EXPECT_EQ(tokenizer.decode(tokens), text);
    std::vector<int32_t> ids(tokens.begin(), tokens.end());
    EXPECT_EQ(tokenizer.decode(ids.data(), ids.size()), text);
  }
}

TEST(ByteTokenizer, DecodeRejectsIdsOutsideTheByteVocabulary) {
  const ByteTokenizer tokenizer;
  EXPECT_CONTAINS(error_message<InvalidArgument>([&] {
                    tokenizer.decode({65, 256});
                  }),
                  "token 1 is 256, outside the byte vocabulary");
  const int32_t ids[] = {65, -1};
  EXPECT_CONTAINS(error_message<InvalidArgument>([&] { tokenizer.decode(ids, 2); }),
                  "id 1 is -1, outside the byte vocabulary");
}

TEST(EncodeTextFile, TokensAreTheTextsBytes) {
  ScratchDir scratch;
  const std::string text_path = scratch.path("text.txt");
  const std::string token_path = scratch.path("text.bin");
  // Larger than the conversion's 64 KiB chunk, so chunk boundaries are crossed.
  const std::string text = all_bytes() + random_bytes(200000, 3) + "the end\n";
  write_text(text_path, text);
  EXPECT_EQ(encode_text_file(text_path, token_path), text.size());
  TokenDataset dataset(token_path, ByteTokenizer::kVocabSize);
  EXPECT_EQ(dataset.info().format, TokenFileFormat::kZeroshard);
  EXPECT_EQ(dataset.info().token_bytes, 2);
  EXPECT_EQ(dataset.info().vocab_size, 256u);
  std::vector<int32_t> ids(dataset.size());
  dataset.read(0, ids.size(), ids.data());
  EXPECT_EQ(ByteTokenizer().decode(ids.data(), ids.size()), text);
}

TEST(EncodeTextFile, WritesLlmcLayoutsToo) {
  ScratchDir scratch;
  const std::string text_path = scratch.path("text.txt");
  const std::string token_path = scratch.path("text.bin");
  write_text(text_path, "hello");
  EXPECT_EQ(encode_text_file(text_path, token_path, TokenFileFormat::kLlmcGpt2), 5u);
  TokenDataset dataset(token_path);
  EXPECT_EQ(dataset.info().format, TokenFileFormat::kLlmcGpt2);
  EXPECT_EQ(dataset.at(4), static_cast<uint32_t>('o'));
}

TEST(EncodeTextFile, EmptyAndMissingFiles) {
  ScratchDir scratch;
  const std::string text_path = scratch.path("empty.txt");
  const std::string token_path = scratch.path("empty.bin");
  write_text(text_path, "");
  EXPECT_EQ(encode_text_file(text_path, token_path), 0u);
  EXPECT_EQ(TokenDataset(token_path).size(), 0u);

  const std::string missing = scratch.path("missing.txt");
  const std::string out = scratch.path("missing.bin");
  EXPECT_CONTAINS(error_message<IoError>([&] { encode_text_file(missing, out); }),
                  "cannot open text file '" + missing + "'");
  EXPECT_FALSE(file_exists(out));
}

}  // namespace
}  // namespace zs::data
