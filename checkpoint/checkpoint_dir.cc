// The checkpoint directory layout and its atomic steps (checkpoint/checkpoint_dir.h).
#include "checkpoint/checkpoint_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "runtime/error.h"
#include "runtime/file_io.h"

namespace zs::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr const char* kStepPrefix = "step-";
constexpr const char* kLatest = "latest";

// Deletes the step directory `path` so that no reader ever sees it torn: it is renamed to a
// .tmp- name (which step_dirs never lists) and DIR fsynced before its files go. A crash in
// between leaves a .tmp- leftover, removed by the next save.
void remove_step_dir(const fs::path& path, const FileSystem& files) {
  if (!files.exists(path.string())) return;
  const fs::path trash = path.parent_path() / (".tmp-deleting-" + path.filename().string() + "-" +
                                               std::to_string(::getpid()));
  files.remove_tree(trash.string());
  files.rename(path.string(), trash.string());
  files.sync_directory(path.parent_path().string());
  files.remove_tree(trash.string());
}

// Removes what crashed saves left in `dir`: .tmp-* directories and latest.tmp.* files. Only one
// run saves into a directory at a time, so none of them is in use.
void remove_leftovers(const fs::path& dir, const FileSystem& files) {
  for (const DirectoryEntry& entry : files.list_directory(dir.string())) {
    const std::string& name = entry.name;
    if (name.rfind(".tmp-", 0) == 0 || name.rfind(std::string(kLatest) + ".tmp.", 0) == 0) {
      files.remove_tree((dir / name).string());
    }
  }
}

}  // namespace

void check_format_version(int version, const std::string& dir) {
  ZS_CHECK(version <= kCheckpointFormatVersion, "checkpoint '", dir, "' has format version ",
           version, ", newer than this zeroshard reads (", kCheckpointFormatVersion,
           "); read it with the zeroshard that wrote it, or a newer one");
  ZS_CHECK_AS(CorruptCheckpoint, version >= 1, "checkpoint '", dir, "' has format version ",
              version);
}

std::string step_dir_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "%s%06lld", kStepPrefix, static_cast<long long>(step));
  return name;
}

int64_t step_of_dir_name(const std::string& name) {
  const std::string prefix = kStepPrefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  if (name.size() - prefix.size() > 18) return -1;
  int64_t step = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::string temp_step_dir(const std::string& dir, int64_t step, int64_t token) {
  return (fs::path(dir) / (".tmp-" + step_dir_name(step) + "-" + std::to_string(token))).string();
}

std::string make_temp_step_dir(const std::string& dir, int64_t step, int64_t token,
                               const FileSystem& files) {
  files.make_directories(dir);
  remove_leftovers(dir, files);
  const std::string temp = temp_step_dir(dir, step, token);
  files.make_directory(temp);
  return temp;
}

std::string commit_step_dir(const std::string& temp_dir, const std::string& dir, int64_t step,
                            const FileSystem& files) {
  files.sync_directory(temp_dir);
  const fs::path final_dir = fs::path(dir) / step_dir_name(step);
  // A directory of this step that exists already was never published by this run: an earlier
  // run saved it and this one resumed from an older checkpoint (or `latest` was not replaced
  // before a crash). The new save supersedes it.
  remove_step_dir(final_dir, files);
  files.rename(temp_dir, final_dir.string());
  files.sync_directory(dir);
  return final_dir.string();
}

void publish_latest(const std::string& dir, int64_t step, const FileSystem& files) {
  detail::AtomicFileWriter latest((fs::path(dir) / kLatest).string(), files);
  const std::string text = step_dir_name(step) + "\n";
  latest.write(text.data(), text.size());
  latest.commit();
}

std::string read_latest(const std::string& dir, const FileSystem& files) {
  const std::string path = (fs::path(dir) / kLatest).string();
  if (!files.exists(path)) return "";
  std::string name = files.read_file(path);
  name = name.substr(0, name.find('\n'));
  while (!name.empty() && (name.back() == '\r' || name.back() == ' ')) name.pop_back();
  return name;
}

std::vector<std::string> step_dirs(const std::string& dir, const FileSystem& files) {
  std::vector<std::pair<int64_t, std::string>> found;
  for (const DirectoryEntry& entry : files.list_directory(dir)) {
    const int64_t step = step_of_dir_name(entry.name);
    if (step >= 0 && entry.is_directory) {
      found.emplace_back(step, (fs::path(dir) / entry.name).string());
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second > b.second;
  });
  std::vector<std::string> paths;
  for (auto& entry : found) paths.push_back(std::move(entry.second));
  return paths;
}

namespace {

// `text` quoted for a log line: at most 40 characters, anything but printable ASCII as '?'.
std::string quoted_excerpt(const std::string& text) {
  std::string cut;
  for (const char ch : text.substr(0, 40)) cut += ch >= 32 && ch < 127 ? ch : '?';
  return "'" + cut + (text.size() > 40 ? "...'" : "'");
}

}  // namespace

std::vector<std::string> resume_candidates(const std::string& dir, std::string* note,
                                           const FileSystem& files) {
  std::vector<std::string> candidates = step_dirs(dir, files);
  if (note == nullptr) return candidates;
  note->clear();
  const std::string latest = read_latest(dir, files);
  if (latest.empty()) return candidates;
  const std::string newest =
      candidates.empty() ? std::string() : fs::path(candidates.front()).filename().string();
  if (step_of_dir_name(latest) < 0) {
    *note = dir + "/latest holds " + quoted_excerpt(latest) +
            ", not a step name (a damaged file?); trying the step directories newest first";
  } else if (!files.exists((fs::path(dir) / latest).string())) {
    *note = dir + "/latest names " + latest +
            ", which does not exist (a torn save?); trying the step directories newest first";
  } else if (latest != newest) {
    *note = dir + "/latest names " + latest + ", but " + newest +
            " is newer and complete (a save that ended before latest moved): it is tried first";
  }
  return candidates;
}

std::vector<std::string> prune_step_dirs(const std::string& dir, int keep,
                                         const FileSystem& files) {
  std::vector<std::string> deleted;
  const std::vector<std::string> dirs = step_dirs(dir, files);
  for (size_t i = static_cast<size_t>(std::max(keep, 0)); i < dirs.size(); ++i) {
    remove_step_dir(dirs[i], files);
    deleted.push_back(dirs[i]);
  }
  return deleted;
}

DirectoryLock::DirectoryLock(const std::string& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  const std::string path = (fs::path(dir) / ".lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ZS_CHECK_AS(IoError, fd_ >= 0, "cannot open the checkpoint directory's lock file '", path,
              "': ", std::strerror(errno));
  std::string holder(256, '\0');
  const ssize_t got = ::pread(fd_, holder.data(), holder.size(), 0);
  holder.resize(got > 0 ? static_cast<size_t>(got) : 0);
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int why = errno;
    ::close(fd_);
    fd_ = -1;
    ZS_CHECK_AS(IoError, why == EWOULDBLOCK, "cannot lock '", path, "': ", std::strerror(why));
    ZS_THROW(InvalidArgument, "checkpoint directory '", dir, "' is in use by another run (",
             holder.empty() ? std::string("its host and pid not written yet") : holder, ", in ",
             path,
             "): two runs in one directory would delete each other's saves in progress; wait "
             "for that run to end, or give this one another --checkpoint-dir");
  }
  previous_ = holder;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string me = std::string(host) + " pid " + std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) < 0) {
    // The lock is held either way; only the message a second run would print is poorer.
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ < 0) return;
  if (::ftruncate(fd_, 0) != 0) {
    // Left holding this run's name: the next run takes it over and says so.
  }
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

}  // namespace zs::checkpoint
