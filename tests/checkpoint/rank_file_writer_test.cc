// RankFileWriter (checkpoint/rank_file_writer.h) on CPU tensors: the file holds the tensors'
// bytes in order with the checksum wait() returns, whatever the buffer's size against the file
// and the tensors (a 3-value ring wraps inside every tensor; a buffer larger than the file holds
// it whole); the file holds the values at the snapshot even when the tensors change right after;
// a write that fails is thrown by wait() naming the file, and the writer takes the next file;
// a second snapshot before the first was waited for is refused; a writer destroyed during a write
// leaves the whole file or nothing, never a torn one or a temporary; a buffer reserved ahead
// writes the same file, and is not reallocated under a write.
#include "checkpoint/rank_file_writer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/shard_files.h"
#include "runtime/allocator.h"
#include "runtime/error.h"
#include "tests/support/scratch.h"

namespace zs::checkpoint {
namespace {

using zs::testing::error_message;
using zs::testing::read_bytes;
using zs::testing::ScratchDir;

// Tensors of 1000, 7, 1 and 333 fp32 values; value i of tensor t is 1000 t + i.
std::vector<Tensor> numbered_tensors(Allocator& allocator) {
  std::vector<Tensor> tensors;
  const std::vector<int64_t> sizes = {1000, 7, 1, 333};
  for (size_t t = 0; t < sizes.size(); ++t) {
    std::vector<float> values(static_cast<size_t>(sizes[t]));
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(1000 * t + i);
    tensors.push_back(Tensor::empty({sizes[t]}, DType::kF32, allocator, "t" + std::to_string(t)));
    tensors.back().copy_from(values);
  }
  return tensors;
}

// The bytes a rank file of `tensors` holds: their values, in order.
std::vector<uint8_t> expected_bytes(const std::vector<Tensor>& tensors) {
  std::vector<uint8_t> bytes;
  for (const Tensor& t : tensors) {
    const std::vector<float> values = t.to_vector();
    const size_t at = bytes.size();
    bytes.resize(at + values.size() * sizeof(float));
    std::memcpy(bytes.data() + at, values.data(), values.size() * sizeof(float));
  }
  return bytes;
}

class RankFileWriterTest : public ::testing::TestWithParam<size_t> {};

TEST_P(RankFileWriterTest, WritesTheTensorsAtTheSnapshotWithTheirChecksum) {
  ScratchDir dir;
  CpuAllocator allocator(nullptr);
  const std::vector<Tensor> tensors = numbered_tensors(allocator);
  const std::vector<uint8_t> expected = expected_bytes(tensors);
  const std::vector<float> first = tensors[0].to_vector();
  RankFileWriter writer(GetParam());
  for (int round = 0; round < 2; ++round) {
    const std::string path = dir.path("rank-" + std::to_string(round) + ".bin");
    writer.snapshot(path, tensors);
    // Changed right after the snapshot (as the next optimizer step does): the file keeps the
    // values at the snapshot.
    tensors[0].fill(-1.0f);
    const RankFileWriter::Written written = writer.wait();
    EXPECT_TRUE(read_bytes(path) == expected) << "buffer " << GetParam() << ", round " << round;
    EXPECT_EQ(written.checksum, FileChecksum::of(expected.data(), expected.size()));
    EXPECT_EQ(written.checksum.algorithm, ChecksumAlgorithm::kXxh3);
    EXPECT_GE(written.seconds, 0.0);
    // The parts of the write happen within it (the copy runs alongside the writer thread).
    EXPECT_GE(written.copy_seconds, 0.0);
    EXPECT_LE(written.checksum_seconds + written.write_seconds + written.commit_seconds,
              written.seconds);
    tensors[0].copy_from(first);
  }
  // A buffer reserved ahead of the first snapshot (its pages touched) writes the same file.
  RankFileWriter reserved(GetParam());
  reserved.reserve(expected.size());
  const std::string path = dir.path("reserved.bin");
  reserved.snapshot(path, tensors);
  EXPECT_EQ(reserved.wait().checksum, FileChecksum::of(expected.data(), expected.size()));
  EXPECT_TRUE(read_bytes(path) == expected) << "buffer " << GetParam() << ", reserved";
}

// A buffer of one value, of three (dividing no tensor but the 1-value one), of an odd number of
// bytes (rounded down to whole values), and one larger than the whole file.
INSTANTIATE_TEST_SUITE_P(BufferSizes, RankFileWriterTest,
                         ::testing::Values(size_t{4}, size_t{12}, size_t{1001}, size_t{1} << 20));

TEST(RankFileWriter, AFailedWriteIsThrownByWaitNamingTheFile) {
  ScratchDir dir;
  CpuAllocator allocator(nullptr);
  const std::vector<Tensor> tensors = numbered_tensors(allocator);
  RankFileWriter writer(64);  // smaller than the file: the copy must not wait forever
  const std::string unwritable = dir.path("no-such-directory/rank-00000.bin");
  writer.snapshot(unwritable, tensors);
  const std::string message = error_message<IoError>([&] { writer.wait(); });
  EXPECT_NE(message.find(unwritable), std::string::npos) << message;
  EXPECT_FALSE(zs::testing::file_exists(unwritable));
  // The writer takes the next file.
  const std::string path = dir.path("rank-00000.bin");
  writer.snapshot(path, tensors);
  writer.wait();
  EXPECT_TRUE(read_bytes(path) == expected_bytes(tensors));
}

TEST(RankFileWriter, OneWriteAtATime) {
  ScratchDir dir;
  CpuAllocator allocator(nullptr);
  const std::vector<Tensor> tensors = numbered_tensors(allocator);
  RankFileWriter writer(1 << 20);
  writer.snapshot(dir.path("a.bin"), tensors);
  const std::string message =
      error_message<InvalidArgument>([&] { writer.snapshot(dir.path("b.bin"), tensors); });
  EXPECT_NE(message.find("waited for"), std::string::npos) << message;
  EXPECT_THROW(writer.reserve(2 << 20), InvalidArgument);  // no reallocation under a write
  writer.wait();
  EXPECT_THROW(writer.wait(), InvalidArgument);  // nothing left to wait for
  EXPECT_THROW(RankFileWriter(2), InvalidArgument);
}

TEST(RankFileWriter, DestroyedDuringAWriteLeavesTheWholeFileOrNothing) {
  ScratchDir dir;
  CpuAllocator allocator(nullptr);
  const Tensor big = Tensor::zeros({int64_t{1} << 22}, DType::kF32, allocator, "big");  // 16 MiB
  const std::string path = dir.path("files/rank-00000.bin");
  std::filesystem::create_directories(dir.path("files"));
  {
    RankFileWriter writer(1 << 20);  // the last MiB may still be unwritten when it goes
    writer.snapshot(path, {big});
  }
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path("files"))) {
    names.push_back(entry.path().filename().string());
  }
  if (names.empty()) return;  // abandoned before the rename
  EXPECT_EQ(names, std::vector<std::string>{"rank-00000.bin"});
  EXPECT_EQ(std::filesystem::file_size(path), uint64_t{4} << 22);
}

}  // namespace
}  // namespace zs::checkpoint
