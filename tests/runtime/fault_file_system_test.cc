// The file layer (runtime/file_system.h) and its fault wrapper (runtime/fault_file_system.h):
// POSIX reads and writes round-trip and their errors name the call, the path, the offset and what
// to do; write_all goes on after short writes; AtomicFileWriter leaves the final path as it was
// when a write, an fsync or the rename fails; the wrapper's rules fire by path (substring or
// regex), operation, bytes and calls, as many times as asked, also under concurrent writers; reads
// are cut short, files deleted under the caller; rules parse from text.
#include "runtime/fault_file_system.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <thread>
#include <vector>

#include "runtime/error.h"
#include "runtime/file_io.h"
#include "tests/support/scratch.h"

namespace zs {
namespace {

using zs::testing::error_message;
using zs::testing::file_exists;
using zs::testing::read_bytes;
using zs::testing::ScratchDir;
using zs::testing::write_text;

std::vector<char> pattern(size_t n) {
  std::vector<char> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<char>(i * 7 + 3);
  return bytes;
}

TEST(PosixFileSystem, WritesAndReadsRoundTrip) {
  ScratchDir scratch;
  const FileSystem& fs = posix_file_system();
  const std::string path = scratch.path("data.bin");
  const std::vector<char> bytes = pattern(100000);
  File out = fs.create(path, /*exclusive=*/true);
  ASSERT_TRUE(out.is_open());
  fs.write_all(out, bytes.data(), bytes.size());
  fs.pwrite_all(out, "XY", 2, 10);
  fs.sync(out);
  fs.close(out);
  EXPECT_FALSE(fs.create(path, /*exclusive=*/true).is_open())
      << "exclusive create of a file that exists";

  File in = fs.open_for_read(path);
  std::vector<char> back(bytes.size() + 10);
  EXPECT_EQ(fs.pread_full(in, back.data(), back.size(), 0), bytes.size());
  back.resize(bytes.size());
  std::vector<char> expected = bytes;
  expected[10] = 'X';
  expected[11] = 'Y';
  EXPECT_EQ(back, expected);
  EXPECT_EQ(fs.read_file(path).size(), bytes.size());
  const detail::MappedFile mapped = fs.map(path, "test file");
  EXPECT_EQ(mapped.size(), bytes.size());

  fs.make_directories(scratch.path("a/b"));
  fs.rename(path, scratch.path("a/b/moved.bin"));
  EXPECT_TRUE(fs.exists(scratch.path("a/b/moved.bin")));
  EXPECT_FALSE(fs.exists(path));
  const std::vector<DirectoryEntry> entries = fs.list_directory(scratch.path("a"));
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].name, "b");
  EXPECT_TRUE(entries[0].is_directory);
  EXPECT_TRUE(fs.list_directory(scratch.path("none")).empty());
  fs.remove_tree(scratch.path("a"));
  EXPECT_FALSE(fs.is_directory(scratch.path("a")));
  fs.remove_file(scratch.path("never-was"));  // a missing file is not an error
}

TEST(PosixFileSystem, ErrorsNameTheCallThePathAndWhatToDo) {
  ScratchDir scratch;
  const FileSystem& fs = posix_file_system();
  const std::string missing = scratch.path("missing.bin");
  const std::string open = error_message<IoError>([&] { fs.open_for_read(missing); });
  EXPECT_CONTAINS(open, "open of '" + missing + "' failed: No such file or directory");
  EXPECT_CONTAINS(open, "check the path");
  const std::string create =
      error_message<IoError>([&] { fs.create(scratch.path("no/dir/x"), false); });
  EXPECT_CONTAINS(create, "check that the directory exists and is writable");
  const std::string mkdir = error_message<IoError>([&] { fs.make_directory(scratch.path("")); });
  EXPECT_CONTAINS(mkdir, "mkdir of '");
  EXPECT_CONTAINS(mkdir, "File exists");
  EXPECT_CONTAINS(file_error_advice(ENOSPC), "the disk is full");
  EXPECT_CONTAINS(file_error_advice(EIO), "I/O error");
}

// Writes at most 7 bytes per call, as a pipe or a network filesystem may.
class TrickleFileSystem final : public FileSystemWrapper {
 public:
  using FileSystemWrapper::FileSystemWrapper;
  size_t write_some(File& file, const void* bytes, size_t count) const override {
    return base().write_some(file, bytes, std::min<size_t>(count, 7));
  }
  size_t pwrite_some(File& file, const void* bytes, size_t count, uint64_t offset) const override {
    return base().pwrite_some(file, bytes, std::min<size_t>(count, 7), offset);
  }
};

TEST(FileSystem, WriteAllGoesOnAfterShortWrites) {
  ScratchDir scratch;
  const TrickleFileSystem trickle(posix_file_system());
  const std::string path = scratch.path("trickle.bin");
  const std::vector<char> bytes = pattern(1000);
  {
    detail::AtomicFileWriter writer(path, trickle);
    writer.write(bytes.data(), bytes.size());
    writer.write_at(500, bytes.data(), 100);
    writer.commit();
  }
  std::vector<char> expected = bytes;
  std::copy(bytes.begin(), bytes.begin() + 100, expected.begin() + 500);
  EXPECT_EQ(read_bytes(path), std::vector<uint8_t>(expected.begin(), expected.end()));
}

TEST(FaultFileSystem, DiskFullCutsTheWriteAtTheLimitAndLeavesTheFinalPathAlone) {
  ScratchDir scratch;
  const std::string path = scratch.path("out.bin");
  write_text(path, "old");
  FaultFileSystem faults;
  FaultRule full;
  full.path = "out.bin";
  full.op = FileOp::kWrite;
  full.error_number = ENOSPC;
  full.after_bytes = 4096;
  const size_t rule = faults.add_rule(full);
  const std::vector<char> bytes = pattern(10000);
  std::string temp;
  const std::string message = error_message<IoError>([&] {
    detail::AtomicFileWriter writer(path, faults);
    temp = writer.temp_path();
    writer.write(bytes.data(), 1000);  // within the limit
    writer.write(bytes.data(), bytes.size());
  });
  EXPECT_CONTAINS(message, "write of '" + temp + "' at byte 4096 failed: No space left on device");
  EXPECT_CONTAINS(message, "the disk is full");
  EXPECT_EQ(faults.fired(rule), 1);
  EXPECT_EQ(zs::testing::read_bytes(path), (std::vector<uint8_t>{'o', 'l', 'd'}));
  EXPECT_FALSE(file_exists(temp)) << "the abandoned temporary was removed";

  // A write that crosses the limit reaches the file up to it (a short write), then fails.
  FaultRule cut = full;
  cut.path = "cut.bin";
  cut.after_bytes = 100;
  faults.add_rule(cut);
  const std::string cut_path = scratch.path("cut.bin");
  File file = faults.create(cut_path, false);
  EXPECT_CONTAINS(error_message<IoError>([&] { faults.write_all(file, bytes.data(), 250); }),
                  "at byte 100 failed");
  faults.close(file);
  EXPECT_EQ(read_bytes(cut_path).size(), 100u);
  // Without rules, everything goes through.
  faults.clear_rules();
  File again = faults.create(cut_path, false);
  faults.write_all(again, bytes.data(), 250);
  faults.close(again);
  EXPECT_EQ(read_bytes(cut_path).size(), 250u);
}

TEST(FaultFileSystem, RulesMatchByOperationPathCallsAndTimes) {
  ScratchDir scratch;
  FaultFileSystem faults;
  FaultRule fsync;
  fsync.path = R"(/rank-0000[1-3]\.bin)";
  fsync.regex = true;
  fsync.op = FileOp::kSync;
  fsync.error_number = EIO;
  fsync.after_calls = 1;  // the second matching fsync fails...
  fsync.times = 1;        // ...and only that one
  const size_t rule = faults.add_rule(fsync);
  auto save = [&](const std::string& name) {
    detail::AtomicFileWriter writer(scratch.path(name), faults);
    writer.write("abc", 3);
    writer.commit();
  };
  save("rank-00000.bin");  // no match
  save("rank-00001.bin");  // first match: let through
  const std::string message = error_message<IoError>([&] { save("rank-00002.bin"); });
  EXPECT_CONTAINS(message, "fsync of '" + scratch.path("rank-00002.bin.tmp."));
  EXPECT_CONTAINS(message, "Input/output error");
  EXPECT_FALSE(file_exists(scratch.path("rank-00002.bin")));
  save("rank-00003.bin");  // fired its one time already
  EXPECT_EQ(faults.fired(rule), 1);
  EXPECT_TRUE(file_exists(scratch.path("rank-00003.bin")));

  FaultRule rename;
  rename.path = "latest";
  rename.op = FileOp::kRename;
  rename.error_number = EIO;
  faults.add_rule(rename);
  write_text(scratch.path("latest"), "step-000001\n");
  const std::string renamed = error_message<IoError>([&] { save("latest"); });
  EXPECT_CONTAINS(renamed, "rename of '" + scratch.path("latest.tmp."));
  EXPECT_CONTAINS(renamed, "' to '" + scratch.path("latest") + "' failed: Input/output error");
  EXPECT_EQ(faults.read_file(scratch.path("latest")), "step-000001\n");
}

TEST(FaultFileSystem, ShortReadsAndDeletedFiles) {
  ScratchDir scratch;
  const std::string path = scratch.path("rank-00000.bin");
  const std::vector<char> bytes = pattern(5000);
  {
    detail::AtomicFileWriter writer(path);
    writer.write(bytes.data(), bytes.size());
    writer.commit();
  }
  FaultFileSystem faults;
  FaultRule short_read;
  short_read.path = "rank-00000";
  short_read.op = FileOp::kRead;
  short_read.action = FaultAction::kShortRead;
  short_read.after_bytes = 1234;
  faults.add_rule(short_read);
  File file = faults.open_for_read(path);
  std::vector<char> back(bytes.size());
  EXPECT_EQ(faults.pread_full(file, back.data(), back.size(), 0), 1234u);
  EXPECT_EQ(faults.pread_full(file, back.data(), 10, 2000), 0u);
  EXPECT_EQ(faults.map(path, "rank file").size(), 1234u);
  EXPECT_EQ(faults.read_file(path).size(), 1234u);

  FaultRule remove;
  remove.path = "rank-00000";
  remove.op = FileOp::kOpen;
  remove.action = FaultAction::kDelete;
  faults.add_rule(remove);
  const std::string message = error_message<IoError>([&] { faults.map(path, "rank file"); });
  EXPECT_CONTAINS(message, "cannot open rank file '" + path + "': No such file or directory");
  EXPECT_FALSE(file_exists(path));
}

TEST(FaultFileSystem, AByteBudgetHoldsUnderConcurrentWriters) {
  ScratchDir scratch;
  FaultFileSystem faults;
  FaultRule full;
  full.path = "shard-";
  full.error_number = ENOSPC;
  full.after_bytes = 100000;
  faults.add_rule(full);
  const std::vector<char> bytes = pattern(1000);
  std::vector<std::thread> threads;
  std::vector<size_t> written(4, 0);
  for (size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      File file = faults.create(scratch.path("shard-" + std::to_string(t)), false);
      try {
        for (int i = 0; i < 100; ++i) {
          faults.write_all(file, bytes.data(), bytes.size());
          written[t] += bytes.size();
        }
      } catch (const IoError&) {
      }
    });
  }
  for (auto& thread : threads) thread.join();
  size_t on_disk = 0;
  for (size_t t = 0; t < 4; ++t) {
    on_disk += read_bytes(scratch.path("shard-" + std::to_string(t))).size();
  }
  EXPECT_EQ(on_disk, 100000u);
}

TEST(FaultRuleText, ParsesAndRefusesWhatItCannotRead) {
  const FaultRule rule = parse_fault_rule("write:rank-00001:enospc:after_bytes=65536,times=1");
  EXPECT_EQ(rule.op, FileOp::kWrite);
  EXPECT_EQ(rule.path, "rank-00001");
  EXPECT_EQ(rule.action, FaultAction::kFail);
  EXPECT_EQ(rule.error_number, ENOSPC);
  EXPECT_EQ(rule.after_bytes, 65536u);
  EXPECT_EQ(rule.times, 1);
  EXPECT_EQ(parse_fault_rule("fsync-dir:ckpt:eio").op, FileOp::kSyncDirectory);
  EXPECT_EQ(parse_fault_rule("read:x:short-read:after_bytes=10").action, FaultAction::kShortRead);
  const FaultRule regex = parse_fault_rule(R"(open:rank-\d+:delete:regex=1,after_calls=2)");
  EXPECT_TRUE(regex.regex);
  EXPECT_EQ(regex.after_calls, 2);
  EXPECT_CONTAINS(error_message<InvalidArgument>([] { parse_fault_rule("write:x"); }),
                  "op:path:action");
  EXPECT_CONTAINS(error_message<InvalidArgument>([] { parse_fault_rule("chmod:x:eio"); }),
                  "unknown operation 'chmod'");
  EXPECT_CONTAINS(error_message<InvalidArgument>([] { parse_fault_rule("write:x:boom"); }),
                  "unknown action 'boom'");
  EXPECT_CONTAINS(
      error_message<InvalidArgument>([] { parse_fault_rule("write:x:eio:after_bytes=-3"); }),
      "after_bytes=-3 is not a count");
  EXPECT_CONTAINS(error_message<InvalidArgument>([] { parse_fault_rule("write:(:eio:regex=1"); }),
                  "is not a regular expression");
}

}  // namespace
}  // namespace zs
