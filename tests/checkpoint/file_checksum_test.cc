// Checksums of rank files (checkpoint/file_checksum.h): XXH3 64 matches xxHash's value for the
// empty input; a running checksum fed in pieces equals the one-shot one for both algorithms;
// texts name their algorithm and round-trip; an unknown algorithm or a malformed value is a
// CorruptCheckpoint that names it.
#include "checkpoint/file_checksum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "tests/support/error_text.h"

namespace zs::checkpoint {
namespace {

using zs::testing::error_message;

std::vector<uint8_t> sample_bytes(size_t count) {
  std::vector<uint8_t> bytes(count);
  for (size_t i = 0; i < count; ++i) bytes[i] = static_cast<uint8_t>(i * 131 + (i >> 7));
  return bytes;
}

TEST(FileChecksum, Xxh3OfNothingIsXxHashsValue) {
  EXPECT_EQ(FileChecksum::of("", 0).value, 0x2d06800538d394c2ull);
  EXPECT_EQ(FileChecksum().digest().value, 0x2d06800538d394c2ull);
  EXPECT_EQ(FileChecksum::of("", 0, ChecksumAlgorithm::kFnv1a64).value, kFnv64Basis);
}

TEST(FileChecksum, PiecesEqualTheWholeForBothAlgorithms) {
  // Longer than XXH3's internal block (1 KiB stripes, 240-byte short-input limit), cut at odd
  // places.
  const std::vector<uint8_t> bytes = sample_bytes(10007);
  for (const ChecksumAlgorithm algorithm :
       {ChecksumAlgorithm::kXxh3, ChecksumAlgorithm::kFnv1a64}) {
    const Checksum whole = FileChecksum::of(bytes.data(), bytes.size(), algorithm);
    EXPECT_EQ(whole.algorithm, algorithm);
    for (const size_t piece : {size_t{1}, size_t{7}, size_t{240}, size_t{4096}}) {
      FileChecksum running(algorithm);
      for (size_t at = 0; at < bytes.size(); at += piece) {
        running.update(bytes.data() + at, std::min(piece, bytes.size() - at));
      }
      EXPECT_EQ(running.digest(), whole) << checksum_algorithm_name(algorithm) << ", " << piece;
    }
  }
  EXPECT_EQ(FileChecksum::of(bytes.data(), bytes.size(), ChecksumAlgorithm::kFnv1a64).value,
            fnv1a64(bytes.data(), bytes.size()));
  // One flipped byte changes it.
  std::vector<uint8_t> flipped = bytes;
  flipped[5000] ^= 1;
  EXPECT_NE(FileChecksum::of(flipped.data(), flipped.size()),
            FileChecksum::of(bytes.data(), bytes.size()));
}

TEST(FileChecksum, TextsNameTheAlgorithmAndRoundTrip) {
  const Checksum xxh3{ChecksumAlgorithm::kXxh3, 0x0123456789abcdefull};
  EXPECT_EQ(xxh3.text(), "xxh3:0123456789abcdef");
  EXPECT_EQ(Checksum::parse(xxh3.text()), xxh3);
  const Checksum fnv{ChecksumAlgorithm::kFnv1a64, 0xabcull};
  EXPECT_EQ(fnv.text(), "fnv1a64:0000000000000abc");
  EXPECT_EQ(Checksum::parse("fnv1a64:0000000000000ABC"), fnv);
  // The same value under another algorithm is another checksum.
  EXPECT_NE(Checksum::parse("xxh3:0000000000000abc"), fnv);
}

TEST(FileChecksum, AnUnknownAlgorithmOrAMalformedValueIsCorrupt) {
  const std::string unknown =
      error_message<CorruptCheckpoint>([] { Checksum::parse("sha256:0123456789abcdef"); });
  EXPECT_NE(unknown.find("unknown checksum algorithm 'sha256'"), std::string::npos) << unknown;
  for (const char* bad : {"xxh3:", "xxh3:0123", "xxh3:0123456789abcdefg", "xxh3:0123456789abcdeg",
                          "xxh3:-123456789abcdef", "0123456789abcdef"}) {
    EXPECT_THROW(Checksum::parse(bad), CorruptCheckpoint) << bad;
  }
}

}  // namespace
}  // namespace zs::checkpoint
