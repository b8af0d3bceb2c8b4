// Token file header encoding and validation, the buffered crash-safe writer, the mapped reader.
#include "data/token_file.h"

#include <array>
#include <cstring>
#include <limits>
#include <utility>

#include "runtime/error.h"

namespace zs::data {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "token files are little-endian and read by memcpy; a big-endian host needs byte "
              "swaps in token_file.cc");

constexpr size_t kHeaderWords = kTokenFileHeaderBytes / 4;
constexpr size_t kWriteBufferBytes = size_t{1} << 20;
constexpr uint32_t kMaxInt32Token = static_cast<uint32_t>(std::numeric_limits<int32_t>::max());

uint32_t load_u32(const uint8_t* bytes) {
  uint32_t value;
  std::memcpy(&value, bytes, sizeof value);
  return value;
}

uint16_t load_u16(const uint8_t* bytes) {
  uint16_t value;
  std::memcpy(&value, bytes, sizeof value);
  return value;
}

uint32_t load_token(const uint8_t* tokens, int token_bytes, uint64_t index) {
  return token_bytes == 2 ? load_u16(tokens + index * 2) : load_u32(tokens + index * 4);
}

int resolve_token_bytes(const TokenWriteOptions& options, const std::string& path) {
  switch (options.format) {
    case TokenFileFormat::kLlmcGpt2:
      ZS_CHECK(options.token_bytes == 0 || options.token_bytes == 2, "writing '", path,
               "': llm.c's gpt-2 layout stores 2-byte tokens, not ", options.token_bytes,
               "; use token_bytes 0 or 2, or the llama-3 layout for 4-byte tokens");
      return 2;
    case TokenFileFormat::kLlmcLlama3:
      ZS_CHECK(options.token_bytes == 0 || options.token_bytes == 4, "writing '", path,
               "': llm.c's llama-3 layout stores 4-byte tokens, not ", options.token_bytes,
               "; use token_bytes 0 or 4, or the gpt-2 layout for 2-byte tokens");
      return 4;
    case TokenFileFormat::kZeroshard:
      break;
  }
  if (options.token_bytes == 0) {
    return options.vocab_size >= 1 && options.vocab_size <= 65536 ? 2 : 4;
  }
  ZS_CHECK(options.token_bytes == 2 || options.token_bytes == 4, "writing '", path,
           "': token_bytes must be 2 (uint16), 4 (uint32) or 0 (chosen from the vocab size), "
           "got ",
           options.token_bytes);
  ZS_CHECK(options.token_bytes == 4 || options.vocab_size <= 65536, "writing '", path,
           "': a vocab of ", options.vocab_size,
           " tokens does not fit 2-byte tokens; use token_bytes 4 (or 0)");
  return options.token_bytes;
}

// The header words of a new file.
std::array<uint32_t, kHeaderWords> make_header(TokenFileFormat format, int token_bytes,
                                               uint64_t num_tokens, uint32_t vocab_size) {
  std::array<uint32_t, kHeaderWords> header{};
  switch (format) {
    case TokenFileFormat::kZeroshard:
      header[0] = kZeroshardTokenMagic;
      header[1] = kZeroshardTokenVersion;
      header[2] = static_cast<uint32_t>(token_bytes);
      header[3] = vocab_size;
      header[4] = static_cast<uint32_t>(num_tokens);
      header[5] = static_cast<uint32_t>(num_tokens >> 32);
      break;
    case TokenFileFormat::kLlmcGpt2:
      header[0] = kLlmcGpt2Magic;
      header[1] = kLlmcGpt2Version;
      header[2] = static_cast<uint32_t>(num_tokens);
      break;
    case TokenFileFormat::kLlmcLlama3:
      header[0] = kLlmcLlama3Magic;
      header[1] = kLlmcLlama3Version;
      header[2] = static_cast<uint32_t>(num_tokens);
      break;
  }
  return header;
}

// Parses and checks the header of a mapped file of `file_size` bytes.
TokenFileInfo parse_header(const std::string& path, const uint8_t* bytes, size_t file_size) {
  ZS_CHECK_AS(IoError, file_size >= kTokenFileHeaderBytes, "token file '", path, "' is ", file_size,
              " bytes, shorter than the ", kTokenFileHeaderBytes,
              "-byte header every token file starts with; it is truncated or not a token file");
  const uint32_t magic = load_u32(bytes);
  const uint32_t version = load_u32(bytes + 4);
  TokenFileInfo info;
  info.version = version;
  if (magic == kZeroshardTokenMagic) {
    info.format = TokenFileFormat::kZeroshard;
    ZS_CHECK_AS(IoError, version == kZeroshardTokenVersion, "token file '", path,
                "' has zeroshard format version ", version, "; this build reads version ",
                kZeroshardTokenVersion,
                " — rewrite the file with this build's tools or use a newer zeroshard");
    const uint32_t token_bytes = load_u32(bytes + 8);
    ZS_CHECK_AS(IoError, token_bytes == 2 || token_bytes == 4, "token file '", path, "' declares ",
                token_bytes, "-byte tokens; the format has 2 or 4 — the header is corrupt");
    info.token_bytes = static_cast<int>(token_bytes);
    info.vocab_size = load_u32(bytes + 12);
    info.num_tokens = uint64_t{load_u32(bytes + 16)} | uint64_t{load_u32(bytes + 20)} << 32;
  } else if (magic == kLlmcGpt2Magic || magic == kLlmcLlama3Magic) {
    const bool gpt2 = magic == kLlmcGpt2Magic;
    info.format = gpt2 ? TokenFileFormat::kLlmcGpt2 : TokenFileFormat::kLlmcLlama3;
    const uint32_t expected_version = gpt2 ? kLlmcGpt2Version : kLlmcLlama3Version;
    ZS_CHECK_AS(IoError, version == expected_version, "token file '", path, "' has llm.c magic ",
                magic, " (", gpt2 ? "gpt-2" : "llama-3", ") with version ", version,
                "; zeroshard reads version ", expected_version,
                " of that layout — re-run llm.c's data preparation or convert the file");
    info.token_bytes = gpt2 ? 2 : 4;
    const int32_t count = static_cast<int32_t>(load_u32(bytes + 8));
    ZS_CHECK_AS(IoError, count >= 0, "token file '", path, "' (llm.c ", gpt2 ? "gpt-2" : "llama-3",
                ") has a negative token count ", count, "; the header is corrupt");
    info.num_tokens = static_cast<uint64_t>(count);
  } else {
    char text[5] = {};
    for (int i = 0; i < 4; ++i) {
      const char c = static_cast<char>(bytes[i]);
      text[i] = c >= 0x20 && c < 0x7f ? c : '.';
    }
    ZS_THROW(IoError, "'", path, "' is not a token file: its magic is ", magic, " (bytes \"", text,
             "\"), expected ", kZeroshardTokenMagic, " (\"ZSTK\", zeroshard), ", kLlmcGpt2Magic,
             " (llm.c gpt-2) or ", kLlmcLlama3Magic,
             " (llm.c llama-3); pass a file written by write_token_file or llm.c's data scripts");
  }
  const uint64_t width = static_cast<uint64_t>(info.token_bytes);
  const uint64_t max_tokens =
      (std::numeric_limits<uint64_t>::max() - kTokenFileHeaderBytes) / width;
  ZS_CHECK_AS(IoError, info.num_tokens <= max_tokens, "token file '", path, "' claims ",
              info.num_tokens, " tokens, more than any file can hold; the header is corrupt");
  const uint64_t expected_size = kTokenFileHeaderBytes + info.num_tokens * width;
  ZS_CHECK_AS(IoError, file_size >= expected_size, "token file '", path,
              "' is truncated: its header says ", info.num_tokens, " tokens of ", width, " bytes (",
              expected_size, " bytes with the header), but the file has ", file_size, " bytes (",
              (file_size - kTokenFileHeaderBytes) / width,
              " whole tokens); re-create or re-copy it (an interrupted copy or download?)");
  ZS_CHECK_AS(IoError, file_size == expected_size, "token file '", path, "' has ",
              file_size - expected_size, " bytes after the ", info.num_tokens,
              " tokens its header announces (expected ", expected_size,
              " bytes in all); the header does not match the data — re-create the file");
  return info;
}

}  // namespace

const char* token_file_format_name(TokenFileFormat format) {
  switch (format) {
    case TokenFileFormat::kZeroshard:
      return "zeroshard";
    case TokenFileFormat::kLlmcGpt2:
      return "llm.c gpt-2";
    case TokenFileFormat::kLlmcLlama3:
      return "llm.c llama-3";
  }
  return "?";
}

TokenFileWriter::TokenFileWriter(std::string path, const TokenWriteOptions& options)
    : file_(std::move(path)), options_(options) {
  token_bytes_ = resolve_token_bytes(options_, file_.path());
  // A zero header holds the place; commit() overwrites it with the final count.
  const std::array<uint8_t, kTokenFileHeaderBytes> placeholder{};
  file_.write(placeholder.data(), placeholder.size());
  buffer_.reserve(kWriteBufferBytes);
}

void TokenFileWriter::append(const uint32_t* tokens, size_t count) {
  ZS_CHECK(tokens != nullptr || count == 0, "writing '", path(), "': null tokens with count ",
           count);
  ZS_CHECK(!file_.committed(), "'", path(), "' was already committed; create a new writer");
  const uint32_t width_limit = token_bytes_ == 2 ? 0xFFFFu : kMaxInt32Token;
  for (size_t i = 0; i < count; ++i) {
    const uint32_t token = tokens[i];
    ZS_CHECK(options_.vocab_size == 0 || token < options_.vocab_size, "writing '", path(),
             "': token ", token, " (token ", num_tokens_ + i, " of the file) is >= the vocab size ",
             options_.vocab_size, "; check the tokenizer or pass its vocab size");
    ZS_CHECK(token <= width_limit, "writing '", path(), "': token ", token, " (token ",
             num_tokens_ + i, " of the file) does not fit ",
             token_bytes_ == 2 ? "2-byte tokens (max 65535)"
                               : "int32 ids (4-byte tokens are limited to 2^31 - 1)",
             token_bytes_ == 2 ? "; use token_bytes 4" : "");
  }
  if (options_.format != TokenFileFormat::kZeroshard) {
    ZS_CHECK(num_tokens_ + count <= kMaxInt32Token, "writing '", path(), "': llm.c's layout ",
             "counts tokens in an int32, so a file holds at most 2^31 - 1 tokens; write the ",
             "zeroshard format or split the corpus into shards");
  }
  for (size_t i = 0; i < count; ++i) {
    if (buffer_.size() + static_cast<size_t>(token_bytes_) > kWriteBufferBytes) flush_buffer();
    const uint32_t token = tokens[i];
    uint8_t encoded[4];
    std::memcpy(encoded, &token, 4);  // little-endian: the low bytes come first
    buffer_.insert(buffer_.end(), encoded, encoded + token_bytes_);
  }
  num_tokens_ += count;
}

void TokenFileWriter::flush_buffer() {
  if (buffer_.empty()) return;
  file_.write(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void TokenFileWriter::commit() {
  ZS_CHECK(!file_.committed(), "'", path(), "' was already committed; create a new writer");
  flush_buffer();
  const auto header = make_header(options_.format, token_bytes_, num_tokens_, options_.vocab_size);
  file_.write_at(0, header.data(), kTokenFileHeaderBytes);
  file_.commit();
}

void write_token_file(const std::string& path, const uint32_t* tokens, size_t count,
                      const TokenWriteOptions& options) {
  TokenFileWriter writer(path, options);
  writer.append(tokens, count);
  writer.commit();
}

TokenDataset::TokenDataset(std::string path, uint32_t vocab_size)
    : path_(std::move(path)), mapping_(path_, "token file") {
  info_ = parse_header(path_, mapping_.data(), mapping_.size());
  if (vocab_size == 0) return;
  const uint8_t* data = tokens();
  for (uint64_t i = 0; i < info_.num_tokens; ++i) {
    const uint32_t token = load_token(data, info_.token_bytes, i);
    if (token >= vocab_size) {
      ZS_THROW(InvalidArgument, "token file '", path_, "': token ", i, " is ", token,
               ", not below the vocab size ", vocab_size, " (the file's header records ",
               info_.vocab_size == 0 ? std::string("no vocab size")
                                     : "vocab size " + std::to_string(info_.vocab_size),
               "); the file was tokenized for another vocabulary — use the matching model or "
               "re-tokenize");
    }
  }
}

uint32_t TokenDataset::at(uint64_t index) const {
  ZS_CHECK(index < info_.num_tokens, "token index ", index, " is out of range for '", path_,
           "', which holds ", info_.num_tokens, " tokens");
  return load_token(tokens(), info_.token_bytes, index);
}

void TokenDataset::read(uint64_t begin, size_t count, int32_t* out) const {
  ZS_CHECK(begin <= info_.num_tokens && count <= info_.num_tokens - begin, "tokens [", begin, ", ",
           begin + count, ") are out of range for '", path_, "', which holds ", info_.num_tokens,
           " tokens");
  ZS_CHECK(out != nullptr || count == 0, "read: null output for ", count, " tokens");
  const uint8_t* data = tokens();
  if (info_.token_bytes == 2) {
    for (size_t j = 0; j < count; ++j) out[j] = load_u16(data + (begin + j) * 2);
    return;
  }
  for (size_t j = 0; j < count; ++j) {
    const uint32_t token = load_u32(data + (begin + j) * 4);
    ZS_CHECK(token <= kMaxInt32Token, "token file '", path_, "': token ", begin + j, " is ", token,
             ", which does not fit an int32 id; open the file with its vocab size to "
             "check it up front");
    out[j] = static_cast<int32_t>(token);
  }
}

}  // namespace zs::data
