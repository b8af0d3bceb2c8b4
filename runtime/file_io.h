// Crash-safe writes over the file layer (runtime/file_system.h), shared by the data and
// checkpoint layers (internal; not part of the public surface): the write-to-a-temporary-name,
// fsync, rename sequence that keeps a crash from ever leaving a torn file at the final path, and
// the directory fsync that makes a rename durable. Also brings in the owning file descriptor and
// the read-only mapping (detail::FileDescriptor, detail::MappedFile), which live with the layer.
//
// Every operation goes through the FileSystem passed in (posix_file_system() by default), so a
// fault wrapper can fail any step; errors are the layer's IoErrors, naming the path, the call,
// the offset and errno's text.
//
// Ownership: AtomicFileWriter owns a temporary file until commit() renames it into place;
// destroyed uncommitted, it removes the temporary and leaves the final path untouched. The
// FileSystem must outlive the writer.
//
// Thread-safety: an AtomicFileWriter may not be used from two threads at once; distinct objects
// are independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/file_system.h"

namespace zs::detail {

// Makes the entries of `directory` (a rename into it, a new file) durable: fsync on the
// directory. Throws IoError naming it.
void sync_directory(const std::string& directory, const FileSystem& fs = posix_file_system());

// Writes a file under a temporary name next to `path` (same directory, so rename() is atomic),
// then commit() flushes it to disk, renames it over `path` and syncs the directory. Readers see
// either the old file or the complete new one, never a prefix. Appended bytes are handed to the
// disk every kWriteBackBytes as they come (FileSystem::start_write_back), so a large file is
// mostly on the disk by the time commit() syncs it: the disk writes while the writer copies,
// instead of after it.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path, const FileSystem& fs = posix_file_system());
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
  static constexpr uint64_t kWriteBackBytes = uint64_t{8} << 20;

  const FileSystem& fs_;
  const std::string path_;
  std::string temp_path_;
  File file_;
  uint64_t appended_ = 0;      // bytes written by write()
  uint64_t written_back_ = 0;  // bytes handed to start_write_back
  bool committed_ = false;
};

}  // namespace zs::detail
