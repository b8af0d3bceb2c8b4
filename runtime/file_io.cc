// File descriptors, read-only mappings and crash-safe writes over POSIX calls.
#include "runtime/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <utility>

#include "runtime/error.h"

namespace zs::detail {
namespace {

// The directory that holds `path` ("." for a bare file name), for the fsync after a rename.
std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

std::string errno_message(int error_number) {
  return std::error_code(error_number, std::generic_category()).message();
}

FileDescriptor::FileDescriptor(FileDescriptor&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)) {}

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void FileDescriptor::reset() noexcept {
  // No retry on EINTR: on Linux the descriptor is released even when close() is interrupted.
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void FileDescriptor::close_or_throw(const std::string& path) {
  const int fd = std::exchange(fd_, -1);
  if (fd < 0) return;
  if (::close(fd) != 0 && errno != EINTR) {
    ZS_THROW(IoError, "closing '", path, "' failed: ", errno_message(errno),
             "; the data may not have reached the disk (disk full or a network filesystem "
             "error?)");
  }
}

MappedFile::MappedFile(const std::string& path, const char* what) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    ZS_THROW(IoError, "cannot open ", what, " '", path, "': ", errno_message(errno),
             "; check the path and its permissions");
  }
  struct stat status {};
  if (::fstat(fd.get(), &status) != 0) {
    ZS_THROW(IoError, "cannot stat ", what, " '", path, "': ", errno_message(errno));
  }
  ZS_CHECK_AS(IoError, S_ISREG(status.st_mode), what, " '", path,
              "' is not a regular file; pass the path of a file");
  size_ = static_cast<size_t>(status.st_size);
  if (size_ == 0) return;  // mmap of length 0 is an error; an empty file is just empty
  void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (mapped == MAP_FAILED) {
    ZS_THROW(IoError, "cannot memory-map ", what, " '", path, "' (", size_,
             " bytes): ", errno_message(errno));
  }
  data_ = static_cast<const uint8_t*>(mapped);
  // The mapping keeps the file referenced; the descriptor closes here.
}

MappedFile::~MappedFile() { unmap(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::unmap() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  ZS_CHECK(!path_.empty(), "an output path is required; got an empty string");
  // O_EXCL on "<path>.tmp.<pid>.<n>": two writers of the same path (even in one process) never
  // share a temporary, and a temporary left by a crashed run is skipped, not reused. Mode 0666
  // goes through the umask, like any file the user creates.
  const std::string prefix = path_ + ".tmp." + std::to_string(::getpid()) + ".";
  for (int attempt = 0; attempt < 1000; ++attempt) {
    std::string candidate = prefix + std::to_string(attempt);
    FileDescriptor fd(::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
    if (fd.valid()) {
      fd_ = std::move(fd);
      temp_path_ = std::move(candidate);
      return;
    }
    if (errno != EEXIST) {
      ZS_THROW(IoError, "cannot create '", candidate, "' to write '", path_,
               "': ", errno_message(errno), "; check that the directory exists and is writable");
    }
  }
  ZS_THROW(IoError, "cannot find a free temporary name '", prefix, "N' next to '", path_,
           "' after 1000 tries; remove stale '*.tmp.*' files there");
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_) {
    fd_.reset();
    if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  }
}

void AtomicFileWriter::write(const void* bytes, size_t count) {
  ZS_CHECK(!committed_, "'", path_, "' was already committed; create a new writer");
  const char* cursor = static_cast<const char*>(bytes);
  while (count > 0) {
    const ssize_t written = ::write(fd_.get(), cursor, count);
    if (written < 0) {
      if (errno == EINTR) continue;
      ZS_THROW(IoError, "writing '", temp_path_, "' (for '", path_,
               "') failed: ", errno_message(errno), "; '", path_,
               "' was left as it was (disk full?)");
    }
    cursor += written;
    count -= static_cast<size_t>(written);
  }
}

void AtomicFileWriter::write_at(uint64_t offset, const void* bytes, size_t count) {
  ZS_CHECK(!committed_, "'", path_, "' was already committed; create a new writer");
  const char* cursor = static_cast<const char*>(bytes);
  while (count > 0) {
    const ssize_t written = ::pwrite(fd_.get(), cursor, count, static_cast<off_t>(offset));
    if (written < 0) {
      if (errno == EINTR) continue;
      ZS_THROW(IoError, "writing '", temp_path_, "' (for '", path_, "') at byte ", offset,
               " failed: ", errno_message(errno), "; '", path_, "' was left as it was");
    }
    cursor += written;
    offset += static_cast<uint64_t>(written);
    count -= static_cast<size_t>(written);
  }
}

void AtomicFileWriter::commit() {
  ZS_CHECK(!committed_, "'", path_, "' was already committed; create a new writer");
  // Data and metadata reach the disk before the rename makes the file visible under its name:
  // after a crash the name holds either the old file or this complete one.
  if (::fsync(fd_.get()) != 0) {
    ZS_THROW(IoError, "fsync of '", temp_path_, "' failed: ", errno_message(errno), "; '", path_,
             "' was left as it was");
  }
  fd_.close_or_throw(temp_path_);
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    ZS_THROW(IoError, "cannot rename '", temp_path_, "' to '", path_, "': ", errno_message(errno));
  }
  committed_ = true;
  // The rename itself is durable only once the directory entry is.
  sync_directory(directory_of(path_));
}

void sync_directory(const std::string& directory) {
  // Some filesystems refuse fsync on a directory (EINVAL), and then there is nothing more to do.
  FileDescriptor dir(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.valid() && ::fsync(dir.get()) != 0 && errno != EINVAL) {
    ZS_THROW(IoError, "fsync of directory '", directory, "' failed: ", errno_message(errno));
  }
}

}  // namespace zs::detail
