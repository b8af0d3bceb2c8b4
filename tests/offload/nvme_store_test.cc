// NvmeStore (offload/nvme_store.h): bytes written come back, striped over the directories as the
// header says, through both engines, with many requests in flight; the swap files are
// preallocated and removed; bad input and every fault the file wrapper injects (a full disk, EIO,
// a short read, a failed reservation) end in an IoError that names the file, the byte and the
// cause, the request fails alone and the store goes on working; a swap file truncated under the
// run is a named error too, not wrong bytes.
#include "offload/nvme_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/error.h"
#include "runtime/fault_file_system.h"
#include "tests/support/scratch.h"

namespace zs::offload {
namespace {

using testing::ScratchDir;

constexpr uint64_t kAlign = NvmeStore::kAlignment;

// An aligned buffer of `bytes`, freed with the object.
struct Buffer {
  explicit Buffer(uint64_t bytes)
      : data(static_cast<uint8_t*>(std::aligned_alloc(kAlign, bytes)), &std::free), size(bytes) {}
  std::unique_ptr<uint8_t, decltype(&std::free)> data;
  uint64_t size;
  uint8_t* get() const { return data.get(); }
  void fill(uint32_t seed) {
    for (uint64_t i = 0; i < size; ++i)
      data.get()[i] = static_cast<uint8_t>((i * 2654435761u + seed) >> 13);
  }
};

// Waits for `io`, which must fail with an IoError whose text holds every one of `parts`.
void expect_io_error(NvmeStore& store, NvmeStore::Io io, const std::vector<std::string>& parts) {
  try {
    store.wait(io);
    ADD_FAILURE() << "the request succeeded; expected an IoError with: " << parts.front();
  } catch (const IoError& e) {
    for (const std::string& part : parts) EXPECT_CONTAINS(e.what(), part);
  }
}

class NvmeStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    if (GetParam() == "io_uring" && !NvmeStore::io_uring_supported(&why)) {
      GTEST_SKIP() << "the io_uring engine cannot run here: " << why;
    }
  }

  NvmeStoreOptions options(const std::vector<std::string>& dirs, uint64_t capacity) {
    NvmeStoreOptions o;
    o.paths = dirs;
    o.name = "rank-00000-test";
    o.capacity = capacity;
    o.stripe_bytes = 64 * 1024;
    o.queue_depth = 8;
    o.direct = testing::direct_io_works(dirs.front());
    o.engine = GetParam();
    return o;
  }
};

TEST_P(NvmeStoreTest, BytesComeBackStripedOverTheDirectories) {
  ScratchDir scratch;
  std::filesystem::create_directories(scratch.path("a"));
  std::filesystem::create_directories(scratch.path("b"));
  const std::vector<std::string> dirs = {scratch.path("a"), scratch.path("b")};
  std::vector<std::string> files;
  {
    // 5 stripes of 64 KiB asked: 3 per file, so 6 stripes of capacity.
    NvmeStore store(options(dirs, 5 * 64 * 1024 - 100), posix_file_system());
    EXPECT_EQ(std::string(store.engine_name()), GetParam() == "blocking" ? "blocking" : "io_uring");
    EXPECT_EQ(store.capacity(), 6u * 64 * 1024);
    files = store.file_paths();
    ASSERT_EQ(files.size(), 2u);
    EXPECT_EQ(files[0], scratch.path("a") + "/rank-00000-test.swap");
    for (const std::string& f : files) EXPECT_EQ(std::filesystem::file_size(f), 3u * 64 * 1024);

    // Three regions written by requests all in flight at once, one crossing stripes unaligned
    // to them.
    const uint64_t first = store.reserve(kAlign);            // [0, 4 KiB)
    const uint64_t second = store.reserve(200 * 1024 - 10);  // rounded to 200 KiB
    const uint64_t third = store.reserve(kAlign * 3);
    EXPECT_EQ(first, 0u);
    EXPECT_EQ(second, kAlign);
    EXPECT_EQ(third, kAlign + 200 * 1024);
    EXPECT_EQ(store.reserved(), third + kAlign * 3);
    Buffer a(kAlign), b(200 * 1024), c(kAlign * 3);
    a.fill(1);
    b.fill(2);
    c.fill(3);
    NvmeStore::Io wa = store.write(first, a.get(), a.size);
    NvmeStore::Io wb = store.write(second, b.get(), b.size);
    NvmeStore::Io wc = store.write(third, c.get(), c.size);
    store.wait(wa);
    store.wait(wb);
    store.wait(wc);

    Buffer back(200 * 1024);
    NvmeStore::Io rb = store.read(second, back.get(), back.size);
    store.wait(rb);
    EXPECT_EQ(std::memcmp(back.get(), b.get(), b.size), 0);
    Buffer back_c(kAlign * 3);
    NvmeStore::Io rc = store.read(third, back_c.get(), back_c.size);
    store.wait(rc);
    EXPECT_EQ(std::memcmp(back_c.get(), c.get(), c.size), 0);

    // The layout: store byte 64 KiB (stripe 1) is file b's byte 0; stripe 2 is file a's 64 KiB.
    std::vector<uint8_t> file_b = testing::read_bytes(files[1]);
    std::vector<uint8_t> file_a = testing::read_bytes(files[0]);
    const uint64_t stripe = 64 * 1024;
    EXPECT_EQ(std::memcmp(file_b.data(), b.get() + (stripe - second), 16), 0);
    EXPECT_EQ(std::memcmp(file_a.data() + stripe, b.get() + (2 * stripe - second), 16), 0);
    EXPECT_EQ(std::memcmp(file_a.data(), a.get(), a.size), 0);

    const NvmeStoreStats stats = store.stats();
    EXPECT_EQ(stats.bytes_written, a.size + b.size + c.size);
    EXPECT_EQ(stats.bytes_read, back.size + back_c.size);
    EXPECT_GT(stats.busy_seconds, 0.0);
  }
  for (const std::string& f : files) EXPECT_FALSE(std::filesystem::exists(f)) << f;
}

TEST_P(NvmeStoreTest, ManyRequestsFromSeveralThreads) {
  ScratchDir scratch;
  const uint64_t region = 96 * 1024;
  const int regions = 24;
  NvmeStore store(options({scratch.path("")}, region * regions), posix_file_system());
  std::vector<Buffer> out, in;
  std::vector<uint64_t> offsets;
  for (int i = 0; i < regions; ++i) {
    out.emplace_back(region);
    out.back().fill(static_cast<uint32_t>(i * 7 + 1));
    in.emplace_back(region);
    offsets.push_back(store.reserve(region));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      std::vector<NvmeStore::Io> ios;
      for (int i = t; i < regions; i += 3)
        ios.push_back(store.write(offsets[i], out[i].get(), region));
      for (auto& io : ios) store.wait(io);
      ios.clear();
      for (int i = t; i < regions; i += 3)
        ios.push_back(store.read(offsets[i], in[i].get(), region));
      for (auto& io : ios) store.wait(io);
    });
  }
  for (auto& thread : threads) thread.join();
  for (int i = 0; i < regions; ++i) {
    EXPECT_EQ(std::memcmp(in[i].get(), out[i].get(), region), 0) << "region " << i;
  }
}

TEST_P(NvmeStoreTest, BadInputIsRefusedWithWhatToDo) {
  ScratchDir scratch;
  const std::string missing = scratch.path("no-such-dir");
  EXPECT_THROW(
      {
        try {
          NvmeStore store(options({missing}, 1 << 20), posix_file_system());
        } catch (const IoError& e) {
          EXPECT_CONTAINS(e.what(), missing);
          EXPECT_CONTAINS(e.what(), "--nvme-path");
          throw;
        }
      },
      IoError);

  NvmeStore store(options({scratch.path("")}, 256 * 1024), posix_file_system());
  Buffer buffer(2 * kAlign);
  EXPECT_THROW((void)store.write(0, buffer.get() + 8, kAlign), InvalidArgument);
  EXPECT_THROW((void)store.write(100, buffer.get(), kAlign), InvalidArgument);
  EXPECT_THROW((void)store.read(0, buffer.get(), 1000), InvalidArgument);
  EXPECT_THROW((void)store.read(store.capacity() - kAlign, buffer.get(), 2 * kAlign),
               InvalidArgument);
  (void)store.reserve(200 * 1024);
  try {
    (void)store.reserve(100 * 1024);
    ADD_FAILURE() << "a reservation past the capacity was accepted";
  } catch (const OutOfMemory& e) {
    EXPECT_CONTAINS(e.what(), "is full");
  }
  NvmeStoreOptions bad = options({scratch.path("")}, 1 << 20);
  bad.stripe_bytes = 1000;
  EXPECT_THROW(NvmeStore s(bad, posix_file_system()), InvalidArgument);
  bad = options({scratch.path("")}, 1 << 20);
  bad.engine = "aio";
  EXPECT_THROW(NvmeStore s(bad, posix_file_system()), InvalidArgument);
}

// Every injected fault: an IoError naming the swap file, the byte and the errno, for that request
// alone; the next request works.
TEST_P(NvmeStoreTest, InjectedFaultsFailTheRequestWithTheFileTheByteAndTheCause) {
  ScratchDir scratch;
  FaultFileSystem faults;
  NvmeStore store(options({scratch.path("")}, 512 * 1024), faults);
  const std::string swap = store.file_paths()[0];
  Buffer data(256 * 1024);
  data.fill(9);
  const uint64_t at = store.reserve(data.size);

  // The disk fills up 128 KiB into the write (once).
  faults.add_rule(parse_fault_rule("write:.swap:enospc:after_bytes=131072,times=1"));
  expect_io_error(store, store.write(at, data.get(), data.size),
                  {swap, "No space left on device", "at byte"});
  faults.clear_rules();
  NvmeStore::Io io = store.write(at, data.get(), data.size);
  store.wait(io);  // the store goes on

  // EIO on a read.
  faults.add_rule(parse_fault_rule("read:.swap:eio:times=1"));
  Buffer back(256 * 1024);
  expect_io_error(store, store.read(at, back.get(), back.size), {swap, "Input/output error"});
  faults.clear_rules();

  // The file shows only its first 64 KiB.
  faults.add_rule(parse_fault_rule("read:.swap:short-read:after_bytes=65536"));
  expect_io_error(store, store.read(at, back.get(), back.size),
                  {swap, "found the end of the file"});
  faults.clear_rules();
  io = store.read(at, back.get(), back.size);
  store.wait(io);
  EXPECT_EQ(std::memcmp(back.get(), data.get(), data.size), 0);
}

TEST_P(NvmeStoreTest, AFullDiskAtPreallocationFailsBeforeAnythingRunsAndLeavesNoFile) {
  ScratchDir scratch;
  FaultFileSystem faults;
  faults.add_rule(parse_fault_rule("write:.swap:enospc"));
  try {
    NvmeStore store(options({scratch.path("")}, 1 << 20), faults);
    ADD_FAILURE() << "a store was made on a full disk";
  } catch (const IoError& e) {
    EXPECT_CONTAINS(e.what(), "fallocate");
    EXPECT_CONTAINS(e.what(), "No space left on device");
  }
  EXPECT_FALSE(std::filesystem::exists(scratch.path("rank-00000-test.swap")));
}

TEST_P(NvmeStoreTest, ASwapFileTruncatedUnderTheRunIsANamedError) {
  ScratchDir scratch;
  NvmeStore store(options({scratch.path("")}, 256 * 1024), posix_file_system());
  Buffer data(128 * 1024);
  data.fill(5);
  const uint64_t at = store.reserve(data.size);
  NvmeStore::Io io = store.write(at, data.get(), data.size);
  store.wait(io);
  ASSERT_EQ(::truncate(store.file_paths()[0].c_str(), 0), 0);
  expect_io_error(store, store.read(at, data.get(), data.size),
                  {store.file_paths()[0], "truncated"});
}

INSTANTIATE_TEST_SUITE_P(Engines, NvmeStoreTest, ::testing::Values("io_uring", "blocking"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "io_uring" ? std::string("IoUring")
                                                           : std::string("Blocking");
                         });

}  // namespace
}  // namespace zs::offload
