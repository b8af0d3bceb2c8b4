// Crash-safe writes over the file layer (runtime/file_io.h).
#include "runtime/file_io.h"

#include <unistd.h>

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

AtomicFileWriter::AtomicFileWriter(std::string path, const FileSystem& fs)
    : fs_(fs), path_(std::move(path)) {
  ZS_CHECK(!path_.empty(), "an output path is required; got an empty string");
  // O_EXCL on "<path>.tmp.<pid>.<n>": two writers of the same path (even in one process) never
  // share a temporary, and a temporary left by a crashed run is skipped, not reused.
  const std::string prefix = path_ + ".tmp." + std::to_string(::getpid()) + ".";
  for (int attempt = 0; attempt < 1000; ++attempt) {
    std::string candidate = prefix + std::to_string(attempt);
    File file = fs_.create(candidate, /*exclusive=*/true);
    if (file.is_open()) {
      file_ = std::move(file);
      temp_path_ = std::move(candidate);
      return;
    }
  }
  ZS_THROW(IoError, "cannot find a free temporary name '", prefix, "N' next to '", path_,
           "' after 1000 tries; remove stale '*.tmp.*' files there");
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_ && !temp_path_.empty()) {
    file_.descriptor().reset();
    try {
      fs_.remove_file(temp_path_);
    } catch (const IoError&) {
      // Abandoning anyway (often while another error unwinds): a leftover temporary is harmless,
      // it never has the final name.
    }
  }
}

void AtomicFileWriter::write(const void* bytes, size_t count) {
  ZS_CHECK(!committed_, "'", path_, "' was already committed; create a new writer");
  fs_.write_all(file_, bytes, count);
  appended_ += count;
  if (appended_ - written_back_ >= kWriteBackBytes) {
    fs_.start_write_back(file_, written_back_, appended_ - written_back_);
    written_back_ = appended_;
  }
}

void AtomicFileWriter::write_at(uint64_t offset, const void* bytes, size_t count) {
  ZS_CHECK(!committed_, "'", path_, "' was already committed; create a new writer");
  fs_.pwrite_all(file_, bytes, count, offset);
}

void AtomicFileWriter::commit() {
  ZS_CHECK(!committed_, "'", path_, "' was already committed; create a new writer");
  // Data and metadata reach the disk before the rename makes the file visible under its name:
  // after a crash the name holds either the old file or this complete one.
  fs_.sync(file_);
  fs_.close(file_);
  fs_.rename(temp_path_, path_);
  committed_ = true;
  // The rename itself is durable only once the directory entry is.
  fs_.sync_directory(directory_of(path_));
}

void sync_directory(const std::string& directory, const FileSystem& fs) {
  fs.sync_directory(directory);
}

}  // namespace zs::detail
