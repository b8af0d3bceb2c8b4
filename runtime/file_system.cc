// The POSIX file layer, the handles it returns and its error messages (runtime/file_system.h).
#include "runtime/file_system.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>
#include <utility>

#include "runtime/error.h"

namespace zs {
namespace detail {

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
    throw_file_error("close", path, errno, -1,
                     "the data may not have reached the disk (disk full or a network filesystem "
                     "error?)");
  }
}

MappedFile::MappedFile(const std::string& path, const char* what) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    const int error = errno;
    ZS_THROW(IoError, "cannot open ", what, " '", path, "': ", errno_message(error), "; ",
             error == ENOENT ? "check the path (was it deleted?)"
                             : "check the path and its permissions");
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
  mapped_size_ = size_;
  // The mapping keeps the file referenced; the descriptor closes here.
}

MappedFile::~MappedFile() { unmap(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_size_(std::exchange(other.mapped_size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_size_ = std::exchange(other.mapped_size_, 0);
  }
  return *this;
}

void MappedFile::unmap() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), mapped_size_);
  data_ = nullptr;
  size_ = 0;
  mapped_size_ = 0;
}

}  // namespace detail

namespace {

namespace stdfs = std::filesystem;

// The errno of a failed call, for a system call's -1 or a std::filesystem error_code.
int system_errno(const std::error_code& error) {
  return error.category() == std::generic_category() || error.category() == std::system_category()
             ? error.value()
             : EIO;
}

}  // namespace

const char* file_op_name(FileOp op) {
  switch (op) {
    case FileOp::kOpen:
      return "open";
    case FileOp::kCreate:
      return "create";
    case FileOp::kWrite:
      return "write";
    case FileOp::kRead:
      return "read";
    case FileOp::kSync:
      return "fsync";
    case FileOp::kClose:
      return "close";
    case FileOp::kRename:
      return "rename";
    case FileOp::kRemove:
      return "remove";
    case FileOp::kMakeDirectory:
      return "mkdir";
    case FileOp::kSyncDirectory:
      return "directory fsync";
  }
  return "?";
}

std::string file_error_advice(int error_number) {
  switch (error_number) {
    case ENOSPC:
      return "the disk is full: free space on it, or point the flag that chose this path "
             "(--checkpoint-dir, --nvme-path, --save-weights, ...) at another disk";
    case EDQUOT:
      return "the disk quota is used up: free space within it, or write elsewhere";
    case EIO:
      return "the device reported an I/O error: check the disk and the kernel log (dmesg); what "
             "was being written there cannot be trusted";
    case EROFS:
      return "the filesystem is read-only: write elsewhere";
    case EACCES:
    case EPERM:
      return "permission denied: check the permissions of the path and of its directory";
    case ENOENT:
      return "it does not exist: check the path (was it deleted while in use?)";
    case ENOTDIR:
      return "a part of the path is not a directory: check the path";
    case EISDIR:
      return "it is a directory: pass the path of a file";
    case EMFILE:
    case ENFILE:
      return "too many open files: raise the limit (ulimit -n)";
    default:
      return "check the path, its permissions and the disk";
  }
}

void throw_file_error(const std::string& call, const std::string& path, int error_number,
                      int64_t offset, const std::string& advice) {
  const std::string at = offset >= 0 ? " at byte " + std::to_string(offset) : std::string();
  ZS_THROW(IoError, call, " of '", path, "'", at, " failed: ", detail::errno_message(error_number),
           "; ", advice.empty() ? file_error_advice(error_number) : advice);
}

void FileSystem::write_all(File& file, const void* bytes, size_t count) const {
  const char* cursor = static_cast<const char*>(bytes);
  while (count > 0) {
    const size_t written = write_some(file, cursor, count);
    cursor += written;
    count -= written;
  }
}

void FileSystem::pwrite_all(File& file, const void* bytes, size_t count, uint64_t offset) const {
  const char* cursor = static_cast<const char*>(bytes);
  while (count > 0) {
    const size_t written = pwrite_some(file, cursor, count, offset);
    cursor += written;
    offset += written;
    count -= written;
  }
}

size_t FileSystem::pread_full(File& file, void* bytes, size_t count, uint64_t offset) const {
  char* cursor = static_cast<char*>(bytes);
  size_t total = 0;
  while (total < count) {
    const size_t got = pread_some(file, cursor + total, count - total, offset + total);
    if (got == 0) break;
    total += got;
  }
  return total;
}

std::string FileSystem::read_file(const std::string& path) const {
  File file = open_for_read(path);
  std::string text;
  char buffer[4096];
  for (;;) {
    const size_t got = pread_some(file, buffer, sizeof(buffer), text.size());
    if (got == 0) break;
    text.append(buffer, got);
  }
  close(file);
  return text;
}

File PosixFileSystem::open_for_read(const std::string& path) const {
  detail::FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) throw_file_error("open", path, errno);
  return File(path, std::move(fd));
}

File PosixFileSystem::create(const std::string& path, bool exclusive) const {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (exclusive ? O_EXCL : O_TRUNC);
  detail::FileDescriptor fd(::open(path.c_str(), flags, 0666));
  if (!fd.valid()) {
    if (exclusive && errno == EEXIST) return File();
    const int error = errno;
    throw_file_error("create", path, error, -1,
                     error == ENOENT || error == EACCES
                         ? "check that the directory exists and is writable"
                         : std::string());
  }
  return File(path, std::move(fd));
}

size_t PosixFileSystem::write_some(File& file, const void* bytes, size_t count) const {
  for (;;) {
    const ssize_t written = ::write(file.fd(), bytes, count);
    if (written >= 0) return static_cast<size_t>(written);
    if (errno != EINTR) {
      // A failed write leaves the position where it was: that is the offset it failed at.
      const int error = errno;
      throw_file_error("write", file.path(), error, ::lseek(file.fd(), 0, SEEK_CUR));
    }
  }
}

size_t PosixFileSystem::pwrite_some(File& file, const void* bytes, size_t count,
                                    uint64_t offset) const {
  for (;;) {
    const ssize_t written = ::pwrite(file.fd(), bytes, count, static_cast<off_t>(offset));
    if (written >= 0) return static_cast<size_t>(written);
    if (errno != EINTR) {
      throw_file_error("write", file.path(), errno, static_cast<int64_t>(offset));
    }
  }
}

size_t PosixFileSystem::pread_some(File& file, void* bytes, size_t count, uint64_t offset) const {
  for (;;) {
    const ssize_t got = ::pread(file.fd(), bytes, count, static_cast<off_t>(offset));
    if (got >= 0) return static_cast<size_t>(got);
    if (errno != EINTR) throw_file_error("read", file.path(), errno, static_cast<int64_t>(offset));
  }
}

File PosixFileSystem::create_for_swap(const std::string& path, bool direct) const {
  const int flags = O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | (direct ? O_DIRECT : 0);
  detail::FileDescriptor fd(::open(path.c_str(), flags, 0600));
  if (!fd.valid()) {
    const int error = errno;
    std::string advice;
    if (direct && error == EINVAL) {
      advice =
          "this filesystem does not take O_DIRECT (tmpfs and some overlay filesystems refuse "
          "it): put the swap directory (--nvme-path) on a disk filesystem such as ext4 or xfs";
    } else if (error == ENOENT || error == EACCES) {
      advice = "check that the directory exists and is writable";
    }
    throw_file_error(direct ? "create (O_DIRECT)" : "create", path, error, -1, advice);
  }
  return File(path, std::move(fd));
}

File PosixFileSystem::open_for_direct_write(const std::string& path) const {
  detail::FileDescriptor fd(::open(path.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == EINVAL) return File();  // the filesystem has no O_DIRECT: the caller falls back
    throw_file_error("open (O_DIRECT)", path, errno);
  }
  return File(path, std::move(fd));
}

void PosixFileSystem::allocate(File& file, uint64_t bytes) const {
  if (bytes == 0) return;
  // posix_fallocate returns the error instead of setting errno. Where the filesystem has no
  // fallocate, glibc's fallback writes a byte per block, which an O_DIRECT file refuses
  // (EINVAL): such a filesystem is refused here, before training.
  const int error = ::posix_fallocate(file.fd(), 0, static_cast<off_t>(bytes));
  if (error != 0) throw_file_error("fallocate", file.path(), error, 0);
}

size_t PosixFileSystem::admit_io(File& /*file*/, FileOp /*op*/, uint64_t /*offset*/,
                                 size_t count) const {
  return count;
}

void PosixFileSystem::sync(File& file) const {
  if (::fsync(file.fd()) != 0) throw_file_error("fsync", file.path(), errno);
}

void PosixFileSystem::start_write_back(File& file, uint64_t offset, uint64_t count) const {
  // Errors ignored on purpose (see the header): EINVAL or ENOSYS where unsupported; a failed
  // write-back shows at the fsync that makes the file durable.
  (void)::sync_file_range(file.fd(), static_cast<off64_t>(offset), static_cast<off64_t>(count),
                          SYNC_FILE_RANGE_WRITE);
}

void PosixFileSystem::close(File& file) const { file.descriptor().close_or_throw(file.path()); }

detail::MappedFile PosixFileSystem::map(const std::string& path, const char* what) const {
  return detail::MappedFile(path, what);
}

void PosixFileSystem::rename(const std::string& from, const std::string& to) const {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    // "rename of 'FROM' to 'TO' failed: ...".
    throw_file_error("rename", from + "' to '" + to, errno);
  }
}

void PosixFileSystem::remove_file(const std::string& path) const {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) throw_file_error("unlink", path, errno);
}

void PosixFileSystem::remove_tree(const std::string& path) const {
  std::error_code error;
  stdfs::remove_all(path, error);
  if (error) throw_file_error("remove", path, system_errno(error));
}

void PosixFileSystem::make_directory(const std::string& path) const {
  if (::mkdir(path.c_str(), 0777) != 0) throw_file_error("mkdir", path, errno);
}

void PosixFileSystem::make_directories(const std::string& path) const {
  std::error_code error;
  stdfs::create_directories(path, error);
  if (error) throw_file_error("mkdir -p", path, system_errno(error));
}

void PosixFileSystem::sync_directory(const std::string& path) const {
  detail::FileDescriptor dir(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) throw_file_error("directory open", path, errno);
  // Some filesystems refuse fsync on a directory (EINVAL), and then there is nothing more to do.
  if (::fsync(dir.get()) != 0 && errno != EINVAL) {
    throw_file_error("directory fsync", path, errno);
  }
}

std::vector<DirectoryEntry> PosixFileSystem::list_directory(const std::string& path) const {
  std::vector<DirectoryEntry> entries;
  std::error_code error;
  for (stdfs::directory_iterator it(path, error), end; !error && it != end; it.increment(error)) {
    std::error_code kind_error;
    entries.push_back({it->path().filename().string(), it->is_directory(kind_error)});
  }
  if (error && error != std::errc::no_such_file_or_directory) {
    throw_file_error("listing", path, system_errno(error));
  }
  return entries;
}

bool PosixFileSystem::is_directory(const std::string& path) const {
  std::error_code error;
  return stdfs::is_directory(path, error);
}

bool PosixFileSystem::exists(const std::string& path) const {
  std::error_code error;
  return stdfs::exists(path, error);
}

const FileSystem& posix_file_system() {
  // Function-local and const: built on first use (thread-safe), nothing in it ever changes.
  static const PosixFileSystem instance;
  return instance;
}

}  // namespace zs
