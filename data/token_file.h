// Token files: a pre-tokenized corpus as one binary file, written crash-safely and read through
// a memory mapping.
//
// Format. zeroshard defines its own variant of llm.c's .bin layout and also reads llm.c's files
// as they are. Both start with a header of 256 little-endian 32-bit words (1024 bytes), followed
// directly by the tokens, little-endian:
//
//   zeroshard (TokenFileFormat::kZeroshard)       llm.c (kLlmcGpt2 / kLlmcLlama3)
//   word 0  magic 0x4B54535A ("ZSTK" on disk)     magic 20240520 (gpt-2) / 20240801 (llama-3)
//   word 1  version 1                             version 1 (gpt-2) / 7 (llama-3)
//   word 2  token width in bytes: 2 or 4          token count (int32)
//   word 3  vocab size, 0 if not recorded         (zero)
//   words 4-5  token count, uint64 (low first)    (zero)
//   rest    zero (reserved)                       (zero)
//   tokens  uint16 or uint32 per word 2           uint16 (gpt-2) / uint32 (llama-3)
//
// Why a variant rather than llm.c's layout exactly: llm.c's count is an int32, which caps a file
// at 2^31 tokens, and its token width is implied by (magic, version) pairs rather than stated;
// zeroshard's header states the width, holds a 64-bit count and records the vocabulary size, so
// a reader can tell whether a file fits a model without a separate flag. Keeping llm.c's header
// size puts the tokens at byte 1024 in both, so one reader serves both kinds, and a distinct
// magic means a file's kind is never ambiguous. The writer can also emit llm.c's layouts, for
// files that llm.c's trainers will read.
//
// Errors. A file that cannot be read, or that is not a valid token file (wrong magic, unknown
// version, bad width, truncated or with trailing bytes), is an IoError naming the file, what was
// expected and what was found. A valid file that does not fit what the caller asked for (a token
// >= the given vocab size) is an InvalidArgument, as is a writer given such a token.
//
// Ownership and thread-safety. TokenDataset owns its mapping (RAII; move-only); it is immutable
// after construction and its const methods may be called from any number of threads.
// TokenFileWriter owns a temporary file until commit(); it is used from one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/file_io.h"

namespace zs::data {

enum class TokenFileFormat : uint8_t {
  kZeroshard,   // zeroshard's header above: uint16 or uint32 tokens, 64-bit count, vocab size
  kLlmcGpt2,    // llm.c: magic 20240520, version 1, uint16 tokens, int32 count
  kLlmcLlama3,  // llm.c: magic 20240801, version 7, uint32 tokens, int32 count
};
const char* token_file_format_name(TokenFileFormat format);  // "zeroshard", "llm.c gpt-2", ...

constexpr size_t kTokenFileHeaderBytes = 256 * 4;
constexpr uint32_t kZeroshardTokenMagic = 0x4B54535Au;  // the bytes "ZSTK" read little-endian
constexpr uint32_t kZeroshardTokenVersion = 1;
constexpr uint32_t kLlmcGpt2Magic = 20240520;
constexpr uint32_t kLlmcGpt2Version = 1;
constexpr uint32_t kLlmcLlama3Magic = 20240801;
constexpr uint32_t kLlmcLlama3Version = 7;

// What a token file's header says.
struct TokenFileInfo {
  TokenFileFormat format = TokenFileFormat::kZeroshard;
  uint32_t version = 0;
  int token_bytes = 0;      // 2 (uint16 tokens) or 4 (uint32 tokens)
  uint64_t num_tokens = 0;  // tokens after the header
  uint32_t vocab_size = 0;  // as recorded by the writer; 0 when unknown (always for llm.c)
};

struct TokenWriteOptions {
  TokenFileFormat format = TokenFileFormat::kZeroshard;
  // 0: the format's width — 2 for llm.c gpt-2, 4 for llama-3; for zeroshard 2 when vocab_size
  // is in [1, 65536], else 4. llm.c formats accept only their own width.
  int token_bytes = 0;
  // When > 0: every token is checked to be < vocab_size, and zeroshard files record it.
  uint32_t vocab_size = 0;
};

// Appends tokens to a new token file. Nothing appears at `path` until commit(): the tokens go to
// a temporary file next to it, which commit() completes with the header, fsyncs and renames over
// `path`. Destroyed without commit() (an exception, a crash), the writer leaves `path` as it was.
// Tokens are buffered, so memory use does not grow with the file.
class TokenFileWriter {
 public:
  explicit TokenFileWriter(std::string path, const TokenWriteOptions& options = {});
  ~TokenFileWriter() = default;
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  // Throws InvalidArgument (writing nothing of this call) if a token does not fit the width,
  // the vocab size, or int32 (the dtype of the id tensors the samplers fill).
  void append(const uint32_t* tokens, size_t count);
  void append(const std::vector<uint32_t>& tokens) { append(tokens.data(), tokens.size()); }
  // Writes the header and makes the file visible at path(). Once only.
  void commit();

  const std::string& path() const { return file_.path(); }
  uint64_t num_tokens() const { return num_tokens_; }
  int token_bytes() const { return token_bytes_; }

 private:
  void flush_buffer();

  zs::detail::AtomicFileWriter file_;
  TokenWriteOptions options_;
  int token_bytes_ = 0;
  uint64_t num_tokens_ = 0;
  std::vector<uint8_t> buffer_;  // encoded tokens not yet written
};

// Writes `tokens` as a token file in one call (TokenFileWriter + commit).
void write_token_file(const std::string& path, const uint32_t* tokens, size_t count,
                      const TokenWriteOptions& options = {});
inline void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens,
                             const TokenWriteOptions& options = {}) {
  write_token_file(path, tokens.data(), tokens.size(), options);
}

// A token file mapped read-only. Opening validates the header and that the file size is exactly
// header + count × width. With vocab_size > 0 it also checks every token is < vocab_size — a
// pass over the whole file, at memory bandwidth; the first offending token is reported by index.
class TokenDataset {
 public:
  explicit TokenDataset(std::string path, uint32_t vocab_size = 0);
  TokenDataset(TokenDataset&&) noexcept = default;
  TokenDataset& operator=(TokenDataset&&) noexcept = default;
  TokenDataset(const TokenDataset&) = delete;
  TokenDataset& operator=(const TokenDataset&) = delete;

  const std::string& path() const { return path_; }
  const TokenFileInfo& info() const { return info_; }
  uint64_t size() const { return info_.num_tokens; }

  // Token `index`; throws InvalidArgument if index >= size().
  uint32_t at(uint64_t index) const;
  // out[j] = token begin + j as int32 for j < count; throws InvalidArgument if the range is past
  // the end or a token does not fit int32 (possible only in unchecked uint32 files).
  void read(uint64_t begin, size_t count, int32_t* out) const;

 private:
  const uint8_t* tokens() const { return mapping_.data() + kTokenFileHeaderBytes; }

  std::string path_;
  zs::detail::MappedFile mapping_;
  TokenFileInfo info_;
};

}  // namespace zs::data
