// POSIX file plumbing shared by the data and checkpoint layers (internal; not part of the public
// surface): an owning file descriptor, a read-only whole-file mapping, and the
// write-to-a-temporary-name, fsync, rename sequence that keeps a crash from ever leaving a torn
// file at the final path.
//
// Ownership: FileDescriptor and MappedFile own their handle and release it in the destructor;
// both are move-only. AtomicFileWriter owns a temporary file until commit() renames it into
// place; destroyed uncommitted, it removes the temporary and leaves the final path untouched.
// Errors are IoError and name the path, the failing call and errno's text.
//
// Thread-safety: none of these objects may be used from two threads at once; distinct objects
// are independent. A MappedFile's bytes may be read from any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace zs::detail {

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

 private:
  void unmap() noexcept;

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Makes the entries of `directory` (a rename into it, a new file) durable: fsync on the
// directory. Throws IoError naming it.
void sync_directory(const std::string& directory);

// Writes a file under a temporary name next to `path` (same directory, so rename() is atomic),
// then commit() flushes it to disk, renames it over `path` and syncs the directory. Readers see
// either the old file or the complete new one, never a prefix.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();  // uncommitted: closes and unlinks the temporary
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Appends at the current end (retrying short writes and EINTR).
  void write(const void* bytes, size_t count);
  // Overwrites bytes already written, at `offset` (e.g. a header completed at the end).
  void write_at(uint64_t offset, const void* bytes, size_t count);
  // fsync, close, rename over the final path, fsync the directory. Once only.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }
  bool committed() const { return committed_; }

 private:
  const std::string path_;
  std::string temp_path_;
  FileDescriptor fd_;
  bool committed_ = false;
};

}  // namespace zs::detail
