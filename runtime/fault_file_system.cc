// The fault-injecting file layer (runtime/fault_file_system.h).
#include "runtime/fault_file_system.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <regex>
#include <sstream>

#include "runtime/error.h"

namespace zs {

struct FaultFileSystem::Armed {
  explicit Armed(const FaultRule& r) : rule(r) {
    if (rule.regex) pattern = std::regex(rule.path, std::regex::ECMAScript);
  }
  bool matches(FileOp op, const std::string& path) const {
    if (op != rule.op) return false;
    if (rule.regex) return std::regex_search(path, pattern);
    return path.find(rule.path) != std::string::npos;
  }

  FaultRule rule;
  std::regex pattern;
  int64_t calls = 0;   // matching operations seen
  uint64_t bytes = 0;  // bytes the matching writes were let through
  int64_t fired = 0;   // times it fired
};

namespace {

FileOp parse_op(const std::string& name, const std::string& text) {
  for (FileOp op : {FileOp::kOpen, FileOp::kCreate, FileOp::kWrite, FileOp::kRead, FileOp::kSync,
                    FileOp::kClose, FileOp::kRename, FileOp::kRemove, FileOp::kMakeDirectory,
                    FileOp::kSyncDirectory}) {
    if (name == file_op_name(op)) return op;
  }
  if (name == "fsync-dir") return FileOp::kSyncDirectory;
  ZS_THROW(InvalidArgument, "fault rule '", text, "': unknown operation '", name,
           "'; use open, create, write, read, fsync, close, rename, remove, mkdir or fsync-dir");
}

int64_t parse_count(const std::string& key, const std::string& value, const std::string& text) {
  size_t used = 0;
  long long number = -1;
  try {
    number = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  ZS_CHECK(used == value.size() && number >= 0, "fault rule '", text, "': ", key, "=", value,
           " is not a count; give a whole number >= 0");
  return number;
}

}  // namespace

FaultRule parse_fault_rule(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ':');) parts.push_back(part);
  ZS_CHECK(
      parts.size() == 3 || parts.size() == 4, "fault rule '", text,
      "' is not op:path:action[:key=value,...] (e.g. write:rank-00001:enospc:after_bytes=4096)");
  FaultRule rule;
  rule.op = parse_op(parts[0], text);
  rule.path = parts[1];
  const std::string& action = parts[2];
  if (action == "enospc") {
    rule.error_number = ENOSPC;
  } else if (action == "eio") {
    rule.error_number = EIO;
  } else if (action == "edquot") {
    rule.error_number = EDQUOT;
  } else if (action == "erofs") {
    rule.error_number = EROFS;
  } else if (action == "short-read") {
    rule.action = FaultAction::kShortRead;
  } else if (action == "delete") {
    rule.action = FaultAction::kDelete;
  } else {
    ZS_THROW(InvalidArgument, "fault rule '", text, "': unknown action '", action,
             "'; use enospc, eio, edquot, erofs, short-read or delete");
  }
  if (parts.size() == 4) {
    std::stringstream options(parts[3]);
    for (std::string option; std::getline(options, option, ',');) {
      const size_t eq = option.find('=');
      ZS_CHECK(eq != std::string::npos, "fault rule '", text, "': option '", option,
               "' is not key=value");
      const std::string key = option.substr(0, eq), value = option.substr(eq + 1);
      if (key == "after_calls") {
        rule.after_calls = parse_count(key, value, text);
      } else if (key == "after_bytes") {
        rule.after_bytes = static_cast<uint64_t>(parse_count(key, value, text));
      } else if (key == "times") {
        rule.times = parse_count(key, value, text);
      } else if (key == "regex") {
        rule.regex = parse_count(key, value, text) != 0;
      } else {
        ZS_THROW(InvalidArgument, "fault rule '", text, "': unknown option '", key,
                 "'; use after_calls, after_bytes, times or regex");
      }
    }
  }
  ZS_CHECK(rule.action != FaultAction::kShortRead || rule.op == FileOp::kRead, "fault rule '", text,
           "': short-read applies to the read operation");
  if (rule.regex) {
    try {
      std::regex check(rule.path);
    } catch (const std::regex_error& e) {
      ZS_THROW(InvalidArgument, "fault rule '", text, "': '", rule.path,
               "' is not a regular expression: ", e.what());
    }
  }
  return rule;
}

FaultFileSystem::FaultFileSystem(const FileSystem& base) : FileSystemWrapper(base) {}
FaultFileSystem::~FaultFileSystem() = default;

size_t FaultFileSystem::add_rule(const FaultRule& rule) {
  auto armed = std::make_unique<Armed>(rule);
  std::lock_guard<std::mutex> lock(mutex_);
  rules_.push_back(std::move(armed));
  return rules_.size() - 1;
}

void FaultFileSystem::clear_rules() {
  std::lock_guard<std::mutex> lock(mutex_);
  rules_.clear();
}

int64_t FaultFileSystem::fired(size_t index) const {
  std::lock_guard<std::mutex> lock(mutex_);
  ZS_CHECK(index < rules_.size(), "fault rule ", index, " does not exist (", rules_.size(),
           " rules)");
  return rules_[index]->fired;
}

FaultFileSystem::Decision FaultFileSystem::decide(FileOp op, const std::string& path,
                                                  uint64_t bytes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  Decision decision;
  for (const auto& armed : rules_) {
    if (!armed->matches(op, path)) continue;
    ++armed->calls;
    const FaultRule& rule = armed->rule;
    if (op == FileOp::kWrite && rule.action == FaultAction::kFail) {
      // The bytes this rule still lets through; a write beyond them is cut short first.
      const uint64_t left = rule.after_bytes > armed->bytes ? rule.after_bytes - armed->bytes : 0;
      if (left > 0) {
        const uint64_t through = std::min<uint64_t>(left, bytes);
        armed->bytes += through;
        if (through < bytes) decision.allowed_bytes = std::min(decision.allowed_bytes, through);
        continue;
      }
    }
    if (armed->calls <= rule.after_calls) continue;
    if (rule.times > 0 && armed->fired >= rule.times) continue;
    ++armed->fired;
    decision.fires = true;
    decision.action = rule.action;
    decision.error_number = rule.error_number;
    if (rule.action == FaultAction::kShortRead) decision.allowed_bytes = rule.after_bytes;
    return decision;
  }
  return decision;
}

void FaultFileSystem::apply(const Decision& decision, const std::string& call,
                            const std::string& path, int64_t offset) const {
  if (!decision.fires) return;
  if (decision.action == FaultAction::kDelete) {
    base().remove_tree(path);
  } else if (decision.action == FaultAction::kFail) {
    throw_file_error(call, path, decision.error_number, offset);
  }
}

File FaultFileSystem::open_for_read(const std::string& path) const {
  apply(decide(FileOp::kOpen, path), FileOp::kOpen, path);
  return base().open_for_read(path);
}

File FaultFileSystem::create(const std::string& path, bool exclusive) const {
  apply(decide(FileOp::kCreate, path), FileOp::kCreate, path);
  return base().create(path, exclusive);
}

size_t FaultFileSystem::admitted_write(File& file, size_t count, int64_t offset) const {
  const Decision decision = decide(FileOp::kWrite, file.path(), count);
  if (decision.fires) {
    // The error names the byte it failed at, as a real write's does: the file's position.
    apply(decision, FileOp::kWrite, file.path(),
          offset >= 0 ? offset : static_cast<int64_t>(::lseek(file.fd(), 0, SEEK_CUR)));
  }
  return static_cast<size_t>(std::min<uint64_t>(decision.allowed_bytes, count));
}

size_t FaultFileSystem::admitted_read(const std::string& path, uint64_t offset,
                                      size_t count) const {
  const Decision decision = decide(FileOp::kRead, path);
  if (decision.fires && decision.action == FaultAction::kShortRead) {
    if (offset >= decision.allowed_bytes) return 0;
    return static_cast<size_t>(std::min<uint64_t>(count, decision.allowed_bytes - offset));
  }
  apply(decision, FileOp::kRead, path, static_cast<int64_t>(offset));
  return count;
}

size_t FaultFileSystem::write_through(File& file, const void* bytes, size_t count,
                                      int64_t offset) const {
  const size_t allowed = admitted_write(file, count, offset);
  return offset >= 0 ? base().pwrite_some(file, bytes, allowed, static_cast<uint64_t>(offset))
                     : base().write_some(file, bytes, allowed);
}

size_t FaultFileSystem::write_some(File& file, const void* bytes, size_t count) const {
  return write_through(file, bytes, count, -1);
}

size_t FaultFileSystem::pwrite_some(File& file, const void* bytes, size_t count,
                                    uint64_t offset) const {
  return write_through(file, bytes, count, static_cast<int64_t>(offset));
}

size_t FaultFileSystem::pread_some(File& file, void* bytes, size_t count, uint64_t offset) const {
  count = admitted_read(file.path(), offset, count);
  return count == 0 ? 0 : base().pread_some(file, bytes, count, offset);
}

void FaultFileSystem::sync(File& file) const {
  apply(decide(FileOp::kSync, file.path()), FileOp::kSync, file.path());
  base().sync(file);
}

void FaultFileSystem::close(File& file) const {
  const Decision decision = decide(FileOp::kClose, file.path());
  if (decision.fires && decision.action == FaultAction::kFail) {
    // A failed close still releases the descriptor, as close(2) does.
    file.descriptor().reset();
  }
  apply(decision, FileOp::kClose, file.path());
  base().close(file);
}

File FaultFileSystem::create_for_swap(const std::string& path, bool direct) const {
  apply(decide(FileOp::kCreate, path), FileOp::kCreate, path);
  return base().create_for_swap(path, direct);
}

File FaultFileSystem::open_for_direct_write(const std::string& path) const {
  apply(decide(FileOp::kCreate, path), "open (O_DIRECT)", path);
  return base().open_for_direct_write(path);
}

void FaultFileSystem::allocate(File& file, uint64_t bytes) const {
  // A reservation of `bytes` is a write of them as far as a full disk goes: a write rule's
  // after_bytes counts them, and one that fires fails the whole reservation.
  const Decision decision = decide(FileOp::kWrite, file.path(), bytes);
  if (decision.fires || decision.allowed_bytes < bytes) {
    throw_file_error("fallocate", file.path(), decision.fires ? decision.error_number : ENOSPC, 0);
  }
  base().allocate(file, bytes);
}

size_t FaultFileSystem::admit_io(File& file, FileOp op, uint64_t offset, size_t count) const {
  ZS_CHECK(op == FileOp::kRead || op == FileOp::kWrite, "admit_io takes a read or a write, not ",
           file_op_name(op));
  count = op == FileOp::kWrite ? admitted_write(file, count, static_cast<int64_t>(offset))
                               : admitted_read(file.path(), offset, count);
  return base().admit_io(file, op, offset, count);
}

detail::MappedFile FaultFileSystem::map(const std::string& path, const char* what) const {
  apply(decide(FileOp::kOpen, path), FileOp::kOpen, path);
  detail::MappedFile mapped = base().map(path, what);
  const Decision decision = decide(FileOp::kRead, path);
  if (decision.fires && decision.action == FaultAction::kShortRead) {
    mapped.limit(static_cast<size_t>(decision.allowed_bytes));
  } else {
    apply(decision, FileOp::kRead, path);
  }
  return mapped;
}

void FaultFileSystem::rename(const std::string& from, const std::string& to) const {
  apply(decide(FileOp::kRename, from), "rename", from + "' to '" + to);
  base().rename(from, to);
}

void FaultFileSystem::remove_file(const std::string& path) const {
  apply(decide(FileOp::kRemove, path), FileOp::kRemove, path);
  base().remove_file(path);
}

void FaultFileSystem::remove_tree(const std::string& path) const {
  apply(decide(FileOp::kRemove, path), FileOp::kRemove, path);
  base().remove_tree(path);
}

void FaultFileSystem::make_directory(const std::string& path) const {
  apply(decide(FileOp::kMakeDirectory, path), FileOp::kMakeDirectory, path);
  base().make_directory(path);
}

void FaultFileSystem::make_directories(const std::string& path) const {
  apply(decide(FileOp::kMakeDirectory, path), FileOp::kMakeDirectory, path);
  base().make_directories(path);
}

void FaultFileSystem::sync_directory(const std::string& path) const {
  apply(decide(FileOp::kSyncDirectory, path), FileOp::kSyncDirectory, path);
  base().sync_directory(path);
}

}  // namespace zs
