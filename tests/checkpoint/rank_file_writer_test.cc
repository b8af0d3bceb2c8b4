// RankFileWriter (checkpoint/rank_file_writer.h) on CPU tensors: the file holds the tensors'
// bytes in order with the checksum wait() returns, whatever the buffer's size against the file
// and the tensors (a 3-value ring wraps inside every tensor; a buffer larger than the file holds
// it whole); the file holds the values at the snapshot even when the tensors change right after;
// a write that fails is thrown by wait() naming the file, and the writer takes the next file;
// a second snapshot before the first was waited for is refused; a writer destroyed during a write
// leaves the whole file or nothing, never a torn one or a temporary; a buffer reserved ahead
// writes the same file, and is not reallocated under a write.
//
// The O_DIRECT path: files of whole blocks and an unaligned tail, through a ring that wraps
// or holds the file, are written with O_DIRECT where the scratch
// directory's filesystem takes it and come out byte for byte; a filesystem that refuses it gets
// the page-cache path and one line in the log; a direct write cut short at an unaligned byte is
// finished through the page cache; a disk that fills, a write or an fsync with EIO, or an
// O_DIRECT open that fails, each injected through the fault wrapper, is an IoError naming the
// file (and the byte, errno's text and what to do), leaves neither a file nor a temporary, and
// keeps the file saved before under that name as it was.
#include "checkpoint/rank_file_writer.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "checkpoint/shard_files.h"
#include "runtime/allocator.h"
#include "runtime/error.h"
#include "runtime/fault_file_system.h"
#include "tests/support/log_capture.h"
#include "tests/support/scratch.h"

namespace zs::checkpoint {
namespace {

using zs::testing::direct_io_works;
using zs::testing::error_message;
using zs::testing::file_exists;
using zs::testing::LogCapture;
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

// One tensor of `values` fp32 values; value i is i / 8 (exact, and distinct across blocks).
std::vector<Tensor> counted_tensor(Allocator& allocator, int64_t values) {
  std::vector<float> data(static_cast<size_t>(values));
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i) / 8;
  std::vector<Tensor> tensors;
  tensors.push_back(Tensor::empty({values}, DType::kF32, allocator, "counted"));
  tensors.back().copy_from(data);
  return tensors;
}

// 81 blocks and an 8-byte tail: the body goes with O_DIRECT, the tail through the page cache.
constexpr int64_t kBodyAndTail = 81 * 1024 + 2;

// The file's name, whole, and no temporary beside it.
void expect_only(const ScratchDir& dir, const std::vector<std::string>& names) {
  std::vector<std::string> found = dir.files();
  std::sort(found.begin(), found.end());
  EXPECT_EQ(found, names);
}

// A 64 KiB buffer makes 16 KiB pieces in a ring that wraps 5 times; 1 MiB holds the file whole.
class DirectWrites : public ::testing::TestWithParam<size_t> {};

TEST_P(DirectWrites, TheFileComesOutByteForByteWithODirectWhereTheFilesystemTakesIt) {
  ScratchDir dir;
  CpuAllocator allocator(nullptr);
  const std::vector<Tensor> tensors = counted_tensor(allocator, kBodyAndTail);
  const std::vector<uint8_t> expected = expected_bytes(tensors);
  RankFileWriter writer(GetParam());
  for (int round = 0; round < 2; ++round) {  // the second one reuses the buffer
    const std::string path = dir.path("rank-00000.bin");
    writer.snapshot(path, tensors);
    const RankFileWriter::Written written = writer.wait();
    EXPECT_TRUE(read_bytes(path) == expected) << "buffer " << GetParam() << ", round " << round;
    EXPECT_EQ(written.checksum, FileChecksum::of(expected.data(), expected.size()));
    EXPECT_EQ(written.direct, direct_io_works(dir.path(""))) << "buffer " << GetParam();
    expect_only(dir, {"rank-00000.bin"});
  }
}

INSTANTIATE_TEST_SUITE_P(BufferSizes, DirectWrites,
                         ::testing::Values(size_t{64} << 10, size_t{1} << 20));

// The file layer of a filesystem without O_DIRECT (what tmpfs before Linux 6.6 says): the
// direct open is refused, the rest goes through.
class NoDirectIo final : public FileSystemWrapper {
 public:
  NoDirectIo() : FileSystemWrapper(posix_file_system()) {}
  File open_for_direct_write(const std::string& /*path*/) const override {
    ++refused;
    return File();
  }
  mutable std::atomic<int> refused{0};
};

TEST(RankFileWriter, AFilesystemWithoutODirectGetsThePageCacheAndTheLogSaysSoOnce) {
  ScratchDir dir;
  CpuAllocator allocator(nullptr);
  const std::vector<Tensor> tensors = counted_tensor(allocator, kBodyAndTail);
  const std::vector<uint8_t> expected = expected_bytes(tensors);
  NoDirectIo no_direct;
  LogCapture log;
  RankFileWriter writer(size_t{64} << 10, no_direct);
  for (const char* name : {"rank-00000.bin", "rank-00001.bin"}) {
    writer.snapshot(dir.path(name), tensors);
    const RankFileWriter::Written written = writer.wait();
    EXPECT_FALSE(written.direct);
    EXPECT_TRUE(read_bytes(dir.path(name)) == expected) << name;
    EXPECT_EQ(written.checksum, FileChecksum::of(expected.data(), expected.size()));
  }
  EXPECT_EQ(no_direct.refused.load(), 2);
  const std::string text = log.text();
  const std::string line = "refuses O_DIRECT; rank files go through the page cache";
  const size_t first = text.find(line);
  EXPECT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find(line, first + 1), std::string::npos) << "said more than once:\n" << text;
}

// A disk whose first write at or past `at` moves only 1000 bytes (a short write, as a kernel
// may return near a full disk), after which it writes normally. The 1000 bytes go through a
// descriptor of their own without O_DIRECT, which would refuse so short a write.
class ShortWriteOnce final : public FileSystemWrapper {
 public:
  explicit ShortWriteOnce(uint64_t at) : FileSystemWrapper(posix_file_system()), at_(at) {}
  size_t pwrite_some(File& file, const void* bytes, size_t count, uint64_t offset) const override {
    if (offset >= at_ && count > 1000 && !cut_.exchange(true)) {
      File plain(file.path(), detail::FileDescriptor(::open(file.path().c_str(), O_WRONLY)));
      EXPECT_TRUE(plain.is_open()) << file.path();
      return base().pwrite_some(plain, bytes, 1000, offset);
    }
    return base().pwrite_some(file, bytes, count, offset);
  }
  bool cut() const { return cut_.load(); }

 private:
  const uint64_t at_;
  mutable std::atomic<bool> cut_{false};
};

TEST(RankFileWriter, ADirectWriteCutShortAtAnUnalignedByteIsFinishedThroughThePageCache) {
  ScratchDir dir;
  CpuAllocator allocator(nullptr);
  const std::vector<Tensor> tensors = counted_tensor(allocator, kBodyAndTail);
  const std::vector<uint8_t> expected = expected_bytes(tensors);
  ShortWriteOnce short_write(size_t{64} << 10);
  RankFileWriter writer(size_t{64} << 10, short_write);
  const std::string path = dir.path("rank-00000.bin");
  writer.snapshot(path, tensors);
  const RankFileWriter::Written written = writer.wait();
  EXPECT_TRUE(short_write.cut());
  EXPECT_TRUE(read_bytes(path) == expected);
  EXPECT_EQ(written.checksum, FileChecksum::of(expected.data(), expected.size()));
  expect_only(dir, {"rank-00000.bin"});
}

struct DirectFault {
  const char* name;
  const char* rule;                        // parse_fault_rule's text
  std::vector<std::string> message_parts;  // what wait()'s error must say, besides the file
};

void PrintTo(const DirectFault& fault, std::ostream* out) { *out << fault.name; }

class DirectWriteFaults : public ::testing::TestWithParam<DirectFault> {};

TEST_P(DirectWriteFaults, AreAnIoErrorNamingTheFileAndTheFileSavedBeforeStaysAsItWas) {
  ScratchDir dir;
  CpuAllocator allocator(nullptr);
  const std::vector<Tensor> tensors = counted_tensor(allocator, kBodyAndTail);
  const std::vector<uint8_t> expected = expected_bytes(tensors);
  // The file as an earlier save left it: other values, that a failed save must not touch.
  const std::string path = dir.path("rank-00000.bin");
  const std::vector<uint8_t> earlier(expected.size(), 7);
  zs::testing::write_bytes(path, earlier);

  FaultFileSystem faults;
  const size_t index = faults.add_rule(parse_fault_rule(GetParam().rule));
  RankFileWriter writer(size_t{64} << 10, faults);  // 16 KiB pieces
  writer.snapshot(path, tensors);
  const std::string message = error_message<IoError>([&] { writer.wait(); });
  EXPECT_GE(faults.fired(index), 1);
  EXPECT_CONTAINS(message, path + ".tmp.");
  for (const std::string& part : GetParam().message_parts) EXPECT_CONTAINS(message, part);
  EXPECT_TRUE(read_bytes(path) == earlier);
  expect_only(dir, {"rank-00000.bin"});

  // The writer takes the next file once the disk is well.
  faults.clear_rules();
  writer.snapshot(path, tensors);
  writer.wait();
  EXPECT_TRUE(read_bytes(path) == expected);
  expect_only(dir, {"rank-00000.bin"});
}

INSTANTIATE_TEST_SUITE_P(
    Injected, DirectWriteFaults,
    ::testing::Values(
        // Four pieces go through whole; the disk is full from the fifth on.
        DirectFault{"disk_full",
                    "write:rank-00000.bin:enospc:after_bytes=65536",
                    {"write of '", "at byte 65536", "No space left on device", "the disk is full"}},
        DirectFault{"eio_on_the_third_write",
                    "write:rank-00000.bin:eio:after_calls=2",
                    {"write of '", "at byte ", "Input/output error", "check the disk"}},
        DirectFault{
            "eio_on_fsync", "fsync:rank-00000.bin:eio", {"fsync of '", "Input/output error"}},
        // The temporary's creation passes; opening it again with O_DIRECT fails.
        DirectFault{"direct_open_fails",
                    "create:rank-00000.bin:eio:after_calls=1",
                    {"open (O_DIRECT) of '", "Input/output error"}}),
    [](const ::testing::TestParamInfo<DirectFault>& info) { return info.param.name; });

}  // namespace
}  // namespace zs::checkpoint
