// Token files: round trips for 2- and 4-byte tokens, the header bytes, llm.c's layout read as-is
// and written byte for byte, clear errors for corrupt, truncated and mismatched files, and the
// writer's crash safety (nothing at the path until commit, nothing torn).
#include "data/token_file.h"

#include <gtest/gtest.h>

#include <cstring>

#include "data_test_util.h"
#include "runtime/error.h"
#include "runtime/rng.h"

namespace zs::data {
namespace {

using testing::error_message;
using testing::file_exists;
using testing::llmc_file;
using testing::read_bytes;
using testing::ScratchDir;
using testing::write_bytes;

std::vector<uint32_t> random_tokens(size_t count, uint32_t bound, uint64_t seed) {
  std::vector<uint32_t> tokens(count);
  const RngKey key = rng_key(seed, "tokens");
  for (size_t i = 0; i < count; ++i) tokens[i] = random_bits(key, i) % bound;
  return tokens;
}

std::vector<uint32_t> read_all(const TokenDataset& dataset) {
  std::vector<int32_t> ids(dataset.size());
  dataset.read(0, ids.size(), ids.data());
  return std::vector<uint32_t>(ids.begin(), ids.end());
}

uint32_t word(const std::vector<uint8_t>& bytes, size_t index) {
  uint32_t value;
  std::memcpy(&value, bytes.data() + index * 4, 4);
  return value;
}

TEST(TokenFile, RoundTripUint16) {
  ScratchDir scratch;
  const std::string path = scratch.path("u16.bin");
  std::vector<uint32_t> tokens = random_tokens(5000, 65536, 1);
  tokens[0] = 0;
  tokens[1] = 65535;
  TokenWriteOptions options;
  options.vocab_size = 65536;  // width chosen from the vocab: 2 bytes
  write_token_file(path, tokens, options);

  EXPECT_EQ(read_bytes(path).size(), 1024 + 2 * tokens.size());
  TokenDataset dataset(path, 65536);
  EXPECT_EQ(dataset.info().format, TokenFileFormat::kZeroshard);
  EXPECT_EQ(dataset.info().version, 1u);
  EXPECT_EQ(dataset.info().token_bytes, 2);
  EXPECT_EQ(dataset.info().vocab_size, 65536u);
  EXPECT_EQ(dataset.size(), tokens.size());
  EXPECT_EQ(read_all(dataset), tokens);
  EXPECT_EQ(dataset.at(1), 65535u);
  std::vector<int32_t> middle(7);
  dataset.read(100, 7, middle.data());
  for (size_t j = 0; j < 7; ++j) EXPECT_EQ(static_cast<uint32_t>(middle[j]), tokens[100 + j]);
}

TEST(TokenFile, RoundTripUint32) {
  ScratchDir scratch;
  const std::string path = scratch.path("u32.bin");
  std::vector<uint32_t> tokens = random_tokens(3000, 0x7FFFFFFFu, 2);
  tokens[5] = 0x7FFFFFFFu;  // the largest id an int32 tensor holds
  tokens[6] = 65536;
  write_token_file(path, tokens);  // no vocab: 4-byte tokens

  EXPECT_EQ(read_bytes(path).size(), 1024 + 4 * tokens.size());
  TokenDataset dataset(path);
  EXPECT_EQ(dataset.info().token_bytes, 4);
  EXPECT_EQ(dataset.info().vocab_size, 0u);
  EXPECT_EQ(read_all(dataset), tokens);
}

TEST(TokenFile, HeaderBytesFollowTheDocumentedLayout) {
  ScratchDir scratch;
  const std::string path = scratch.path("layout.bin");
  TokenWriteOptions options;
  options.vocab_size = 50257;
  options.token_bytes = 4;
  write_token_file(path, {1, 2, 50256}, options);
  const std::vector<uint8_t> bytes = read_bytes(path);
  ASSERT_EQ(bytes.size(), 1024u + 12u);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 4), "ZSTK");
  EXPECT_EQ(word(bytes, 0), kZeroshardTokenMagic);
  EXPECT_EQ(word(bytes, 1), 1u);
  EXPECT_EQ(word(bytes, 2), 4u);
  EXPECT_EQ(word(bytes, 3), 50257u);
  EXPECT_EQ(word(bytes, 4), 3u);
  EXPECT_EQ(word(bytes, 5), 0u);
  for (size_t i = 6; i < 256; ++i) EXPECT_EQ(word(bytes, i), 0u) << "reserved word " << i;
  EXPECT_EQ(word(bytes, 256 + 2), 50256u);
}

TEST(TokenFile, StreamsAcrossTheWriteBuffer) {
  ScratchDir scratch;
  const std::string path = scratch.path("stream.bin");
  const std::vector<uint32_t> tokens = random_tokens(700000, 50257, 3);  // 1.4 MB of tokens
  TokenWriteOptions options;
  options.vocab_size = 50257;
  TokenFileWriter writer(path, options);
  for (size_t begin = 0; begin < tokens.size(); begin += 99991) {
    writer.append(tokens.data() + begin, std::min<size_t>(99991, tokens.size() - begin));
  }
  EXPECT_FALSE(file_exists(path));  // nothing visible before commit
  writer.commit();
  EXPECT_EQ(writer.num_tokens(), tokens.size());
  TokenDataset dataset(path, 50257);
  EXPECT_EQ(read_all(dataset), tokens);
}

TEST(TokenFile, EmptyFileHasOnlyAHeader) {
  ScratchDir scratch;
  const std::string path = scratch.path("empty.bin");
  write_token_file(path, std::vector<uint32_t>{});
  EXPECT_EQ(read_bytes(path).size(), 1024u);
  TokenDataset dataset(path, 10);
  EXPECT_EQ(dataset.size(), 0u);
}

TEST(TokenFile, ReadsLlmcGpt2FilesAsTheyAre) {
  ScratchDir scratch;
  const std::string path = scratch.path("llmc_gpt2.bin");
  const std::vector<uint32_t> tokens = {50256, 464, 2068, 7586, 21831, 0, 65535};
  write_bytes(path, llmc_file(20240520, 1, static_cast<int32_t>(tokens.size()), tokens, 2));
  TokenDataset dataset(path);
  EXPECT_EQ(dataset.info().format, TokenFileFormat::kLlmcGpt2);
  EXPECT_EQ(dataset.info().token_bytes, 2);
  EXPECT_EQ(dataset.info().vocab_size, 0u);
  EXPECT_EQ(read_all(dataset), tokens);
}

TEST(TokenFile, ReadsLlmcLlama3FilesAsTheyAre) {
  ScratchDir scratch;
  const std::string path = scratch.path("llmc_llama3.bin");
  const std::vector<uint32_t> tokens = {128000, 791, 4062, 128001};
  write_bytes(path, llmc_file(20240801, 7, static_cast<int32_t>(tokens.size()), tokens, 4));
  TokenDataset dataset(path, 128256);
  EXPECT_EQ(dataset.info().format, TokenFileFormat::kLlmcLlama3);
  EXPECT_EQ(dataset.info().token_bytes, 4);
  EXPECT_EQ(read_all(dataset), tokens);
}

TEST(TokenFile, WritesLlmcLayoutsByteForByte) {
  ScratchDir scratch;
  const std::vector<uint32_t> tokens = {50256, 464, 2068, 65535};
  const std::string gpt2 = scratch.path("gpt2.bin");
  TokenWriteOptions options;
  options.format = TokenFileFormat::kLlmcGpt2;
  write_token_file(gpt2, tokens, options);
  EXPECT_EQ(read_bytes(gpt2), llmc_file(20240520, 1, 4, tokens, 2));

  const std::string llama = scratch.path("llama.bin");
  options.format = TokenFileFormat::kLlmcLlama3;
  write_token_file(llama, tokens, options);
  EXPECT_EQ(read_bytes(llama), llmc_file(20240801, 7, 4, tokens, 4));

  options.token_bytes = 2;  // llama-3 stores 4-byte tokens only
  EXPECT_CONTAINS(error_message<InvalidArgument>([&] { TokenFileWriter writer(llama, options); }),
                  "llama-3 layout stores 4-byte tokens");
}

TEST(TokenFile, WrongMagicIsAClearIoError) {
  ScratchDir scratch;
  const std::string path = scratch.path("magic.bin");
  std::vector<uint8_t> bytes = llmc_file(20240520, 1, 2, {1, 2}, 2);
  std::memcpy(bytes.data(), "GGUF", 4);
  write_bytes(path, bytes);
  const std::string message = error_message<IoError>([&] { TokenDataset dataset(path); });
  EXPECT_CONTAINS(message, path);
  EXPECT_CONTAINS(message, "is not a token file");
  EXPECT_CONTAINS(message, "\"GGUF\"");
  EXPECT_CONTAINS(message, "ZSTK");
  EXPECT_CONTAINS(message, "20240520");
}

TEST(TokenFile, UnsupportedVersionsAreClearIoErrors) {
  ScratchDir scratch;
  const std::string path = scratch.path("version.bin");
  std::vector<uint8_t> bytes = llmc_file(static_cast<int32_t>(kZeroshardTokenMagic), 2, 0, {}, 2);
  write_bytes(path, bytes);
  std::string message = error_message<IoError>([&] { TokenDataset dataset(path); });
  EXPECT_CONTAINS(message, path);
  EXPECT_CONTAINS(message, "zeroshard format version 2; this build reads version 1");

  write_bytes(path, llmc_file(20240520, 3, 1, {7}, 2));
  message = error_message<IoError>([&] { TokenDataset dataset(path); });
  EXPECT_CONTAINS(message, "with version 3; zeroshard reads version 1");
}

TEST(TokenFile, BadTokenWidthIsAnIoError) {
  ScratchDir scratch;
  const std::string path = scratch.path("width.bin");
  write_token_file(path, {1, 2, 3}, TokenWriteOptions{TokenFileFormat::kZeroshard, 2, 0});
  std::vector<uint8_t> bytes = read_bytes(path);
  bytes[8] = 3;  // word 2: the token width
  write_bytes(path, bytes);
  EXPECT_CONTAINS(error_message<IoError>([&] { TokenDataset dataset(path); }),
                  "declares 3-byte tokens");
}

TEST(TokenFile, TruncatedFilesSayWhatWasExpectedAndFound) {
  ScratchDir scratch;
  const std::string path = scratch.path("truncated.bin");
  write_token_file(path, random_tokens(100, 1000, 4), TokenWriteOptions{{}, 2, 1000});
  std::vector<uint8_t> bytes = read_bytes(path);
  bytes.resize(bytes.size() - 3);  // 98.5 tokens left
  write_bytes(path, bytes);
  std::string message = error_message<IoError>([&] { TokenDataset dataset(path); });
  EXPECT_CONTAINS(message, path);
  EXPECT_CONTAINS(message,
                  "is truncated: its header says 100 tokens of 2 bytes (1224 "
                  "bytes with the header), but the file has 1221 bytes (98 whole "
                  "tokens)");

  bytes.resize(600);  // not even a header
  write_bytes(path, bytes);
  message = error_message<IoError>([&] { TokenDataset dataset(path); });
  EXPECT_CONTAINS(message, "is 600 bytes, shorter than the 1024-byte header");

  write_bytes(path, {});
  message = error_message<IoError>([&] { TokenDataset dataset(path); });
  EXPECT_CONTAINS(message, "is 0 bytes");
}

TEST(TokenFile, TrailingBytesAreAnIoError) {
  ScratchDir scratch;
  const std::string path = scratch.path("trailing.bin");
  write_bytes(path, llmc_file(20240520, 1, 2, {1, 2, 3}, 2));  // 3 tokens, header says 2
  EXPECT_CONTAINS(error_message<IoError>([&] { TokenDataset dataset(path); }),
                  "has 2 bytes after the 2 tokens its header announces");
}

TEST(TokenFile, NegativeLlmcCountIsAnIoError) {
  ScratchDir scratch;
  const std::string path = scratch.path("negative.bin");
  write_bytes(path, llmc_file(20240520, 1, -5, {}, 2));
  EXPECT_CONTAINS(error_message<IoError>([&] { TokenDataset dataset(path); }),
                  "negative token count -5");
}

TEST(TokenFile, TokenOutsideTheVocabIsAnInvalidArgumentNamingIt) {
  ScratchDir scratch;
  const std::string path = scratch.path("vocab.bin");
  write_token_file(path, {5, 255, 256, 3}, TokenWriteOptions{{}, 2, 0});
  TokenDataset unchecked(path);  // no vocab given: no scan
  EXPECT_EQ(unchecked.at(2), 256u);
  const std::string message =
      error_message<InvalidArgument>([&] { TokenDataset dataset(path, 256); });
  EXPECT_CONTAINS(message, path);
  EXPECT_CONTAINS(message, "token 2 is 256, not below the vocab size 256");
}

TEST(TokenFile, MissingFileIsAnIoError) {
  ScratchDir scratch;
  const std::string path = scratch.path("does_not_exist.bin");
  const std::string message = error_message<IoError>([&] { TokenDataset dataset(path); });
  EXPECT_CONTAINS(message, "cannot open token file '" + path + "'");
  EXPECT_CONTAINS(message, "No such file or directory");
}

TEST(TokenFile, OutOfRangeReadsAreInvalidArguments) {
  ScratchDir scratch;
  const std::string path = scratch.path("range.bin");
  write_token_file(path, {1, 2, 3});
  TokenDataset dataset(path);
  int32_t out[4];
  EXPECT_THROW(dataset.read(1, 3, out), InvalidArgument);
  EXPECT_THROW(dataset.at(3), InvalidArgument);
  dataset.read(3, 0, out);  // an empty range at the end is fine
}

TEST(TokenFile, Uint32TokenBeyondInt32IsReportedOnRead) {
  ScratchDir scratch;
  const std::string path = scratch.path("big.bin");
  write_bytes(path, llmc_file(20240801, 7, 2, {1, 0x80000000u}, 4));
  TokenDataset dataset(path);
  int32_t out[2];
  EXPECT_CONTAINS(error_message<InvalidArgument>([&] { dataset.read(0, 2, out); }),
                  "token 1 is 2147483648, which does not fit an int32 id");
}

TEST(TokenFileWriter, RejectsTokensThatDoNotFit) {
  ScratchDir scratch;
  const std::string path = scratch.path("reject.bin");
  {
    TokenFileWriter writer(path, TokenWriteOptions{{}, 2, 0});
    EXPECT_CONTAINS(error_message<InvalidArgument>([&] {
                      writer.append({1, 70000});
                    }),
                    "token 70000 (token 1 of the file) does not fit 2-byte tokens");
    EXPECT_EQ(writer.num_tokens(), 0u);  // the failed call wrote nothing
  }
  TokenFileWriter writer(path, TokenWriteOptions{{}, 0, 100});
  writer.append({1, 2});
  EXPECT_CONTAINS(error_message<InvalidArgument>([&] {
                    writer.append({99, 100});
                  }),
                  "token 100 (token 3 of the file) is >= the vocab size 100");
  EXPECT_THROW(TokenFileWriter(path, TokenWriteOptions{{}, 2, 70000}), InvalidArgument);
  EXPECT_THROW(TokenFileWriter(path, TokenWriteOptions{{}, 3, 0}), InvalidArgument);
}

TEST(TokenFileWriter, AnAbandonedWriteLeavesThePathAsItWas) {
  ScratchDir scratch;
  const std::string path = scratch.path("atomic.bin");
  write_token_file(path, {10, 20, 30});
  const std::vector<uint8_t> before = read_bytes(path);
  {
    TokenFileWriter writer(path);
    writer.append(std::vector<uint32_t>(5000, 7));
    // The writer dies here without commit(), as in an exception or a crash mid-write.
  }
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(TokenDataset(path).size(), 3u);
  // And the temporary is gone: a fresh writer takes attempt 0 again.
  zs::detail::AtomicFileWriter probe(path);
  EXPECT_EQ(probe.temp_path(), path + ".tmp." + std::to_string(::getpid()) + ".0");
}

TEST(TokenFileWriter, CommitTwiceAndMissingDirectoryAreErrors) {
  ScratchDir scratch;
  const std::string path = scratch.path("twice.bin");
  TokenFileWriter writer(path);
  writer.commit();
  EXPECT_THROW(writer.commit(), InvalidArgument);
  EXPECT_THROW(writer.append({1}), InvalidArgument);
  const std::string missing = scratch.path("no_such_dir") + "/x.bin";
  const std::string message = error_message<IoError>([&] { TokenFileWriter w(missing); });
  EXPECT_CONTAINS(message, "check that the directory exists and is writable");
}

}  // namespace
}  // namespace zs::data
