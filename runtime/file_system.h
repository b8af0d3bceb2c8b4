// The one file layer: every low-level file operation of the checkpoint and data layers goes
// through a FileSystem, so that a wrapper (runtime/fault_file_system.h, in the manner of
// LevelDB's EnvWrapper/ErrorEnv) can make any of them fail — a write with ENOSPC or EIO, an fsync,
// a read cut short, a file deleted under the run — and tests can show that nothing published is
// lost when one does.
//
// FileSystem is an interface over paths and Files. posix_file_system() is the default: a
// stateless, immutable object over the POSIX calls, one per process, that callers take by
// reference (there is nothing in it to change, so it is no mutable global). Code that writes or
// reads files takes a `const FileSystem&` defaulting to it; a run that wants faults passes its
// own object instead (train::TrainConfig::file_system).
//
// Errors: every failure is an IoError that names the call, the path, the byte offset where one
// applies and errno's text, then says what to do about that errno (ENOSPC: the disk is full...).
// throw_file_error builds that message, so a fault injected by the wrapper reads exactly like a
// real one.
//
// Ownership: File, detail::FileDescriptor and detail::MappedFile own their handle and release it
// in the destructor; all are move-only. A FileSystem does not own the Files it returns.
//
// Thread-safety: every FileSystem implementation is safe for concurrent use from any number of
// threads (PosixFileSystem has no state; wrappers guard theirs). A File, FileDescriptor or
// MappedFile object is used by one thread at a time; a MappedFile's bytes may be read from any
// number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zs {

// O_DIRECT's alignment of buffers, file offsets and lengths: a 4 KiB logical block covers every
// common drive.
constexpr uint64_t kDirectIoAlignment = 4096;

namespace detail {

// "No such file or directory" for ENOENT; thread-safe (unlike strerror).
std::string errno_message(int error_number);

class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() { reset(); }
  FileDescriptor(FileDescriptor&& other) noexcept;
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Closes, ignoring errors (for paths that are being abandoned anyway).
  void reset() noexcept;
  // Closes and throws IoError if close() reports an error (it can report a failed write-back).
  void close_or_throw(const std::string& path);

 private:
  int fd_ = -1;
};

// The whole of a regular file mapped read-only (MAP_PRIVATE). An empty file maps to
// data() == nullptr, size() == 0. If another process truncates the file while it is mapped,
// reading past the new end raises SIGBUS: token files and checkpoints are meant to be immutable
// once written.
class MappedFile {
 public:
  // Opens and maps `path`; `what` says what the file is for in errors ("token file").
  MappedFile(const std::string& path, const char* what);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Shows only the first min(bytes, size()) bytes from now on, as if the file were that short
  // (the fault wrapper's short read); the whole mapping is still released.
  void limit(size_t bytes) { size_ = bytes < size_ ? bytes : size_; }

 private:
  void unmap() noexcept;

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_size_ = 0;
};

}  // namespace detail

// A file opened through a FileSystem: its descriptor and the path it was opened under (errors
// and the fault wrapper's rules name it). Closed, ignoring errors, when destroyed; close it
// through FileSystem::close to see them.
class File {
 public:
  File() = default;
  File(std::string path, detail::FileDescriptor fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  File(File&&) noexcept = default;
  File& operator=(File&&) noexcept = default;

  const std::string& path() const { return path_; }
  int fd() const { return fd_.get(); }
  bool is_open() const { return fd_.valid(); }
  detail::FileDescriptor& descriptor() { return fd_; }

 private:
  std::string path_;
  detail::FileDescriptor fd_;
};

// The operations of a FileSystem, as the fault wrapper's rules and the errors name them.
enum class FileOp {
  kOpen,           // open for reading (open_for_read, map)
  kCreate,         // create for writing
  kWrite,          // write_some, pwrite_some
  kRead,           // pread_some, and the bytes map shows
  kSync,           // fsync of a file
  kClose,          // close (it can report a failed write-back)
  kRename,         // rename (the source path is matched)
  kRemove,         // unlink, remove_tree
  kMakeDirectory,  // mkdir, make_directories
  kSyncDirectory,  // fsync of a directory
};
const char* file_op_name(FileOp op);

struct DirectoryEntry {
  std::string name;  // the entry's name, without the directory
  bool is_directory = false;
};

// Throws the IoError of a failed call: "<call> of '<path>'[ at byte <offset>] failed: <errno
// text>; <what to do>". `advice` replaces the advice derived from the errno when not empty.
[[noreturn]] void throw_file_error(const std::string& call, const std::string& path,
                                   int error_number, int64_t offset = -1,
                                   const std::string& advice = "");
// What to do about `error_number` ("the disk is full: ..."), for the messages above.
std::string file_error_advice(int error_number);

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // Opens an existing file for reading.
  virtual File open_for_read(const std::string& path) const = 0;
  // Creates `path` for writing (mode 0666 through the umask). `exclusive`: fails if it exists,
  // and then returns a File that is not open (the caller picks another name) instead of
  // throwing; otherwise an existing file is truncated.
  virtual File create(const std::string& path, bool exclusive) const = 0;
  // Writes at the file's position / at `offset`; returns how many bytes were written (at least 1
  // for count > 0: a short write is not an error, the *_all loops below go on). EINTR is retried.
  virtual size_t write_some(File& file, const void* bytes, size_t count) const = 0;
  virtual size_t pwrite_some(File& file, const void* bytes, size_t count,
                             uint64_t offset) const = 0;
  // Reads at `offset`; returns how many bytes were read, 0 at the end of the file.
  virtual size_t pread_some(File& file, void* bytes, size_t count, uint64_t offset) const = 0;
  // fsync: the file's data and metadata reach the disk.
  virtual void sync(File& file) const = 0;
  // Starts writing [offset, offset + count) of the file's dirty pages to the disk and returns
  // without waiting (Linux's sync_file_range with SYNC_FILE_RANGE_WRITE), so that the disk works
  // while the writer goes on and a later sync() finds little left to do. Advisory: where the
  // call is not supported, or fails, nothing happens — durability is still sync()'s, which
  // reports any error of the write-back.
  virtual void start_write_back(File& file, uint64_t offset, uint64_t count) const = 0;
  // Closes, reporting an error close() returns.
  virtual void close(File& file) const = 0;
  // Creates (or truncates) `path` for reading and writing, with O_DIRECT when `direct` — the
  // swap files of the offload store (offload/nvme_store.h), whose I/O bypasses the page cache.
  // A filesystem that refuses O_DIRECT (tmpfs, some overlays: EINVAL) gets an IoError that says
  // so and what to do. The fault wrapper matches it as a create.
  virtual File create_for_swap(const std::string& path, bool direct) const = 0;
  // Opens the existing file `path` for writing with O_DIRECT (no page cache: pwrite_some from
  // buffers, at offsets and of lengths aligned to kDirectIoAlignment), next to the descriptor the
  // file was created with. Returns a File that is not open where the filesystem refuses O_DIRECT
  // (EINVAL: tmpfs before Linux 6.6, some overlays), so that the caller writes through the page
  // cache instead; any other failure throws. The fault wrapper matches it as a create.
  virtual File open_for_direct_write(const std::string& path) const = 0;
  // Reserves the file's first `bytes` on the disk (posix_fallocate), so that a full disk shows
  // now and not in the middle of a run. The fault wrapper matches it as a write of `bytes`.
  virtual void allocate(File& file, uint64_t bytes) const = 0;
  // For I/O a caller issues on file.fd() itself (the offload store's io_uring engine): how many
  // of the `count` bytes at `offset` a read (op kRead) or write (kWrite) may move. POSIX: all of
  // them. A wrapper may shorten it or throw the IoError of a failure — exactly what its
  // pread_some / pwrite_some would do — so that injected faults reach that I/O too.
  virtual size_t admit_io(File& file, FileOp op, uint64_t offset, size_t count) const = 0;
  // The whole file mapped read-only; `what` names it in errors ("checkpoint rank file").
  virtual detail::MappedFile map(const std::string& path, const char* what) const = 0;

  virtual void rename(const std::string& from, const std::string& to) const = 0;
  // Removes a file; a missing one is not an error.
  virtual void remove_file(const std::string& path) const = 0;
  // Removes a file or a directory with everything in it; a missing one is not an error.
  virtual void remove_tree(const std::string& path) const = 0;
  // Creates a directory; it must not exist.
  virtual void make_directory(const std::string& path) const = 0;
  // Creates a directory and its missing parents; an existing one is fine.
  virtual void make_directories(const std::string& path) const = 0;
  // fsync of a directory: the entries renamed or created in it are durable. A filesystem that
  // cannot fsync a directory (EINVAL) is not an error.
  virtual void sync_directory(const std::string& path) const = 0;
  // The entries of a directory (not "." and ".."), in no particular order; a missing directory
  // has none.
  virtual std::vector<DirectoryEntry> list_directory(const std::string& path) const = 0;
  virtual bool is_directory(const std::string& path) const = 0;
  virtual bool exists(const std::string& path) const = 0;

  // Writes all `count` bytes (looping over short writes).
  void write_all(File& file, const void* bytes, size_t count) const;
  void pwrite_all(File& file, const void* bytes, size_t count, uint64_t offset) const;
  // Reads until `count` bytes or the end of the file; returns how many were read.
  size_t pread_full(File& file, void* bytes, size_t count, uint64_t offset) const;
  // The whole of a small file (`latest`, meta.json).
  std::string read_file(const std::string& path) const;
};

// The POSIX calls, nothing added: no state, so one object serves every thread.
class PosixFileSystem final : public FileSystem {
 public:
  File open_for_read(const std::string& path) const override;
  File create(const std::string& path, bool exclusive) const override;
  size_t write_some(File& file, const void* bytes, size_t count) const override;
  size_t pwrite_some(File& file, const void* bytes, size_t count, uint64_t offset) const override;
  size_t pread_some(File& file, void* bytes, size_t count, uint64_t offset) const override;
  void sync(File& file) const override;
  void start_write_back(File& file, uint64_t offset, uint64_t count) const override;
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
  std::vector<DirectoryEntry> list_directory(const std::string& path) const override;
  bool is_directory(const std::string& path) const override;
  bool exists(const std::string& path) const override;
};

// The default file layer: a PosixFileSystem that lives as long as the process. Immutable.
const FileSystem& posix_file_system();

// Forwards every operation to `base` (which must outlive it): derive from it to change a few
// (runtime/fault_file_system.h).
class FileSystemWrapper : public FileSystem {
 public:
  explicit FileSystemWrapper(const FileSystem& base) : base_(base) {}
  const FileSystem& base() const { return base_; }

  File open_for_read(const std::string& path) const override { return base_.open_for_read(path); }
  File create(const std::string& path, bool exclusive) const override {
    return base_.create(path, exclusive);
  }
  size_t write_some(File& file, const void* bytes, size_t count) const override {
    return base_.write_some(file, bytes, count);
  }
  size_t pwrite_some(File& file, const void* bytes, size_t count, uint64_t offset) const override {
    return base_.pwrite_some(file, bytes, count, offset);
  }
  size_t pread_some(File& file, void* bytes, size_t count, uint64_t offset) const override {
    return base_.pread_some(file, bytes, count, offset);
  }
  void sync(File& file) const override { base_.sync(file); }
  void start_write_back(File& file, uint64_t offset, uint64_t count) const override {
    base_.start_write_back(file, offset, count);
  }
  void close(File& file) const override { base_.close(file); }
  File create_for_swap(const std::string& path, bool direct) const override {
    return base_.create_for_swap(path, direct);
  }
  File open_for_direct_write(const std::string& path) const override {
    return base_.open_for_direct_write(path);
  }
  void allocate(File& file, uint64_t bytes) const override { base_.allocate(file, bytes); }
  size_t admit_io(File& file, FileOp op, uint64_t offset, size_t count) const override {
    return base_.admit_io(file, op, offset, count);
  }
  detail::MappedFile map(const std::string& path, const char* what) const override {
    return base_.map(path, what);
  }
  void rename(const std::string& from, const std::string& to) const override {
    base_.rename(from, to);
  }
  void remove_file(const std::string& path) const override { base_.remove_file(path); }
  void remove_tree(const std::string& path) const override { base_.remove_tree(path); }
  void make_directory(const std::string& path) const override { base_.make_directory(path); }
  void make_directories(const std::string& path) const override { base_.make_directories(path); }
  void sync_directory(const std::string& path) const override { base_.sync_directory(path); }
  std::vector<DirectoryEntry> list_directory(const std::string& path) const override {
    return base_.list_directory(path);
  }
  bool is_directory(const std::string& path) const override { return base_.is_directory(path); }
  bool exists(const std::string& path) const override { return base_.exists(path); }

 private:
  const FileSystem& base_;
};

}  // namespace zs
