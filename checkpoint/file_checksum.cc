// Rank file checksums (checkpoint/file_checksum.h): FNV-1a 64 written here, XXH3 64 from
// libxxhash (Debian's libxxhash-dev, found by the top-level CMakeLists.txt).
#include "checkpoint/file_checksum.h"

#include <xxhash.h>

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "runtime/error.h"

namespace zs::checkpoint {

struct FileChecksum::Xxh3 {
  XXH3_state_t* state;
  Xxh3() : state(XXH3_createState()) {
    ZS_CHECK_AS(OutOfMemory, state != nullptr, "checksum: cannot allocate an XXH3 state");
    XXH3_64bits_reset(state);
  }
  ~Xxh3() { XXH3_freeState(state); }
  Xxh3(const Xxh3&) = delete;
  Xxh3& operator=(const Xxh3&) = delete;
};

const char* checksum_algorithm_name(ChecksumAlgorithm algorithm) {
  switch (algorithm) {
    case ChecksumAlgorithm::kFnv1a64:
      return "fnv1a64";
    case ChecksumAlgorithm::kXxh3:
      return "xxh3";
  }
  return "unknown";
}

std::string Checksum::text() const {
  char hex[20];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(value));
  return std::string(checksum_algorithm_name(algorithm)) + ":" + hex;
}

Checksum Checksum::parse(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string name = text.substr(0, colon);
  Checksum checksum;
  if (name == checksum_algorithm_name(ChecksumAlgorithm::kXxh3)) {
    checksum.algorithm = ChecksumAlgorithm::kXxh3;
  } else if (name == checksum_algorithm_name(ChecksumAlgorithm::kFnv1a64)) {
    checksum.algorithm = ChecksumAlgorithm::kFnv1a64;
  } else {
    ZS_THROW(CorruptCheckpoint, "unknown checksum algorithm '", name, "' in checksum '", text,
             "' (this build verifies xxh3 and fnv1a64; a newer zeroshard may have written it)");
  }
  const std::string digits = text.substr(colon + 1);
  char* end = nullptr;
  checksum.value = std::strtoull(digits.c_str(), &end, 16);
  ZS_CHECK_AS(CorruptCheckpoint,
              digits.size() == 16 && end == digits.c_str() + digits.size() &&
                  digits.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos,
              "checksum '", text, "' is not ", name, ": followed by 16 hex digits");
  return checksum;
}

uint64_t fnv1a64(const void* bytes, size_t count, uint64_t hash) {
  const auto* p = static_cast<const uint8_t*>(bytes);
  for (size_t i = 0; i < count; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  return hash;
}

FileChecksum::FileChecksum(ChecksumAlgorithm algorithm) : algorithm_(algorithm) {
  if (algorithm_ == ChecksumAlgorithm::kXxh3) xxh3_ = std::make_unique<Xxh3>();
}

FileChecksum::~FileChecksum() = default;
FileChecksum::FileChecksum(FileChecksum&&) noexcept = default;
FileChecksum& FileChecksum::operator=(FileChecksum&&) noexcept = default;

void FileChecksum::update(const void* bytes, size_t count) {
  if (xxh3_) {
    ZS_CHECK(XXH3_64bits_update(xxh3_->state, bytes, count) == XXH_OK,
             "checksum: XXH3 update failed");
  } else {
    fnv_ = fnv1a64(bytes, count, fnv_);
  }
}

Checksum FileChecksum::digest() const {
  return {algorithm_, xxh3_ ? XXH3_64bits_digest(xxh3_->state) : fnv_};
}

Checksum FileChecksum::of(const void* bytes, size_t count, ChecksumAlgorithm algorithm) {
  if (algorithm == ChecksumAlgorithm::kXxh3) {
    return {algorithm, XXH3_64bits(bytes, count)};
  }
  return {algorithm, fnv1a64(bytes, count)};
}

}  // namespace zs::checkpoint
