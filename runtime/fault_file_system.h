// A file layer that fails on purpose (LevelDB's ErrorEnv): FaultFileSystem wraps another
// FileSystem and, by rules a test or a program sets, fails a write with ENOSPC or EIO (after so
// many bytes, or on the n-th call), fails an fsync, a rename or a directory fsync, shortens
// reads, or deletes a file just before it is opened. Everything a rule does not match goes to the
// wrapped file layer unchanged. The errors it raises are built by throw_file_error, so they read
// exactly like the real ones ("write of '.../rank-00001.bin.tmp.42.0' at byte 65536 failed: No
// space left on device; the disk is full: ...").
//
// It lives in the runtime library (not only in tests) so that the offload store and programs can
// use it too; parse_fault_rule builds a rule from a short text ("write:rank-00001:enospc:
// after_bytes=65536"), so a program can take rules from a flag or a config file instead of the
// environment.
//
// Ownership: the wrapped FileSystem must outlive the wrapper. Thread-safety: the FileSystem
// operations may run concurrently from any number of threads (the rules' counters are guarded by
// a mutex); add_rule and fired() may be called at any time, also while operations run.
#pragma once

#include <cerrno>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/file_system.h"

namespace zs {

enum class FaultAction {
  kFail,       // the operation fails with `error_number` (writes: after `after_bytes` bytes)
  kShortRead,  // reads end early: a file shows only its first `after_bytes` bytes
  kDelete,     // the file is deleted just before the operation, which then runs on no file
};

struct FaultRule {
  // Which paths: those containing `path` (every path when empty), or matching it as an ECMAScript
  // regular expression (std::regex_search) when `regex` is set.
  std::string path;
  bool regex = false;
  FileOp op = FileOp::kWrite;
  FaultAction action = FaultAction::kFail;
  // kFail's errno: ENOSPC (disk full), EIO, EDQUOT, ...
  int error_number = EIO;
  // The rule fires from the (after_calls + 1)-th matching operation on.
  int64_t after_calls = 0;
  // kWrite: the rule lets this many bytes (over all matching files) reach the disk, then fails —
  // a write that crosses the limit writes up to it (a short write) and the next one fails, as a
  // disk that fills up does. kShortRead: how many bytes of a file its reads show.
  uint64_t after_bytes = 0;
  // How many times it fires; 0: every time once it has started.
  int64_t times = 0;
};

// "write:rank-00001:enospc:after_bytes=65536,times=1" — op:path:action[:key=value,...] with op
// one of open, create, write, read, fsync, close, rename, remove, mkdir, fsync-dir; action one of
// enospc, eio, edquot, erofs, short-read, delete; keys after_calls, after_bytes, times, regex
// (regex=1 reads the path as a regular expression). Throws InvalidArgument naming the part that
// is wrong.
FaultRule parse_fault_rule(const std::string& text);

class FaultFileSystem final : public FileSystemWrapper {
 public:
  explicit FaultFileSystem(const FileSystem& base = posix_file_system());
  ~FaultFileSystem() override;

  // Adds a rule; returns its index for fired(). Rules are tried in the order they were added;
  // the first that fires decides.
  size_t add_rule(const FaultRule& rule);
  // Removes every rule (operations from now on go straight to the wrapped layer).
  void clear_rules();
  // How many times rule `index` has fired.
  int64_t fired(size_t index) const;

  File open_for_read(const std::string& path) const override;
  File create(const std::string& path, bool exclusive) const override;
  size_t write_some(File& file, const void* bytes, size_t count) const override;
  size_t pwrite_some(File& file, const void* bytes, size_t count, uint64_t offset) const override;
  size_t pread_some(File& file, void* bytes, size_t count, uint64_t offset) const override;
  void sync(File& file) const override;
  void close(File& file) const override;
  File create_for_swap(const std::string& path, bool direct) const override;
  File open_for_direct_write(const std::string& path) const override;
  void allocate(File& file, uint64_t bytes) const override;
  size_t admit_io(File& file, FileOp op, uint64_t offset, size_t count) const override;
  detail::MappedFile map(const std::string& path, const char* what) const override;
  void rename(const std::string& from, const std::string& to) const override;
  void remove_file(const std::string& path) const override;
  void remove_tree(const std::string& path) const override;
  void make_directory(const std::string& path) const override;
  void make_directories(const std::string& path) const override;
  void sync_directory(const std::string& path) const override;

 private:
  struct Armed;
  // What the rules decide for one operation.
  struct Decision {
    FaultAction action = FaultAction::kFail;
    bool fires = false;
    int error_number = 0;
    // kWrite: bytes the operation may still write before failing (a short write); kShortRead:
    // the bytes of the file a read may show.
    uint64_t allowed_bytes = UINT64_MAX;
  };
  // Counts the operation against every matching rule and returns what the first firing one
  // says. `bytes`: the bytes a write wants to write.
  Decision decide(FileOp op, const std::string& path, uint64_t bytes = 0) const;
  // Applies a decision before the operation: throws for kFail (the error names `call`, e.g.
  // file_op_name(op)), deletes `path` for kDelete.
  void apply(const Decision& decision, const std::string& call, const std::string& path,
             int64_t offset = -1) const;
  void apply(const Decision& decision, FileOp op, const std::string& path,
             int64_t offset = -1) const {
    apply(decision, file_op_name(op), path, offset);
  }
  // The bytes the rules let a write of `count` at `offset` (-1: the file's position) move, or a
  // read of `count` at `offset` show; both throw a failure the rules decide.
  size_t admitted_write(File& file, size_t count, int64_t offset) const;
  size_t admitted_read(const std::string& path, uint64_t offset, size_t count) const;
  size_t write_through(File& file, const void* bytes, size_t count, int64_t offset) const;

  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Armed>> rules_;
};

}  // namespace zs
