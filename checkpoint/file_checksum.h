// The checksums of rank files, as the metadata writes them: "<algorithm>:<16 hex digits>".
//
// New checkpoints use XXH3 64 (xxHash, "xxh3:..."), which runs at memory speed, so that a save
// or a load is bound by the disk rather than by the checksum pass over every byte. Checkpoints
// written before it carry FNV-1a 64 ("fnv1a64:...", byte by byte, about 1 GB/s) and keep
// verifying with it: a checksum's text names its algorithm, and a file is verified with the
// algorithm its metadata names. An unknown algorithm is a CorruptCheckpoint naming it.
//
// Checksum is a plain value. FileChecksum is one running checksum over a file's bytes, fed in
// order (update) by one thread; it owns its hashing state and is movable, not copyable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace zs::checkpoint {

enum class ChecksumAlgorithm { kFnv1a64, kXxh3 };

// What new rank files are checksummed with.
constexpr ChecksumAlgorithm kSavedChecksum = ChecksumAlgorithm::kXxh3;

// "fnv1a64", "xxh3": the prefix of the algorithm's checksums in the metadata.
const char* checksum_algorithm_name(ChecksumAlgorithm algorithm);

struct Checksum {
  ChecksumAlgorithm algorithm = kSavedChecksum;
  uint64_t value = 0;

  // "xxh3:0123456789abcdef".
  std::string text() const;
  // The checksum a metadata text names; CorruptCheckpoint for an unknown algorithm (named) or a
  // value that is not 16 hex digits.
  static Checksum parse(const std::string& text);
  bool operator==(const Checksum& other) const {
    return algorithm == other.algorithm && value == other.value;
  }
  bool operator!=(const Checksum& other) const { return !(*this == other); }
};

constexpr uint64_t kFnv64Basis = 14695981039346656037ull;
// FNV-1a over `count` bytes, continuing from `hash` (the checksum of checkpoints before XXH3).
uint64_t fnv1a64(const void* bytes, size_t count, uint64_t hash = kFnv64Basis);

class FileChecksum {
 public:
  explicit FileChecksum(ChecksumAlgorithm algorithm = kSavedChecksum);
  ~FileChecksum();
  FileChecksum(FileChecksum&&) noexcept;
  FileChecksum& operator=(FileChecksum&&) noexcept;
  FileChecksum(const FileChecksum&) = delete;
  FileChecksum& operator=(const FileChecksum&) = delete;

  // Adds the next `count` bytes of the file.
  void update(const void* bytes, size_t count);
  // The checksum of the bytes added so far (more may follow).
  Checksum digest() const;
  ChecksumAlgorithm algorithm() const { return algorithm_; }

  // The checksum of `count` bytes at once.
  static Checksum of(const void* bytes, size_t count, ChecksumAlgorithm algorithm = kSavedChecksum);

 private:
  struct Xxh3;  // xxHash's streaming state, kept out of this header
  ChecksumAlgorithm algorithm_;
  uint64_t fnv_ = kFnv64Basis;
  std::unique_ptr<Xxh3> xxh3_;
};

}  // namespace zs::checkpoint
