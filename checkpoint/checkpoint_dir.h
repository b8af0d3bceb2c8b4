// The directory layout of sharded checkpoints and the steps that make a save atomic.
//
//   DIR/step-000120/meta.json, rank-00000.bin, ...   one complete checkpoint per step
//   DIR/.tmp-step-000120-<token>/                    a save in progress (never loaded)
//   DIR/latest                                       "step-000120\n": the newest complete one
//
// A save writes into the temporary directory, fsyncs its files, renames the directory to its
// step name and fsyncs DIR; only then is `latest` replaced (write to a temporary name, fsync,
// rename). A crash at any point leaves every published checkpoint intact: a torn save is a
// .tmp-* directory or a step directory that `latest` does not name yet, and --resume auto skips
// what does not verify. Pruning deletes older step directories after `latest` moved.
//
// Free functions over paths. Every file operation goes through the FileSystem passed in (the
// POSIX one by default; a fault wrapper in tests), and its errors are the file layer's IoErrors
// naming the path, the call and errno's text. Not for concurrent writers to the same DIR (one run
// saves at a time; readers may run any time).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/file_system.h"

namespace zs::checkpoint {

// The format version a step directory's meta.json carries (train/checkpoints.h writes it); one
// of a newer version is refused by every reader. 2: a hybrid replica's file entry names its
// source rank's file (it writes none); version 1's entries each name their own, which reads the
// same way. 3: meta.json carries its own checksum, meta_checksum (seal_checkpoint_meta); one of
// version 1 or 2 is read without it.
constexpr int kCheckpointFormatVersion = 3;
// Refuses a meta.json `format_version` this build cannot read: newer than
// kCheckpointFormatVersion (InvalidArgument: the zeroshard that wrote it reads it), or below 1
// (CorruptCheckpoint). `dir` names the checkpoint in the message.
void check_format_version(int version, const std::string& dir);

// "step-000120".
std::string step_dir_name(int64_t step);
// The step of a directory name "step-000120" (any number of digits), or -1 for other names.
int64_t step_of_dir_name(const std::string& name);

// DIR/.tmp-step-<step>-<token>: where the save of `step` by the run named `token` is written.
std::string temp_step_dir(const std::string& dir, int64_t step, int64_t token);
// Creates `dir` (with its parents) and an empty temp_step_dir(dir, step, token); returns its
// path. First removes what crashed saves left in `dir` (.tmp-* directories, latest.tmp.* files):
// one run saves into a directory at a time, so none of them is in use.
std::string make_temp_step_dir(const std::string& dir, int64_t step, int64_t token,
                               const FileSystem& fs = posix_file_system());
// Makes the temporary directory the checkpoint of `step`: fsyncs it, renames it to
// DIR/step-<step> (replacing an unpublished directory of that name left by an earlier run),
// fsyncs DIR. Returns the step directory's path.
std::string commit_step_dir(const std::string& temp_dir, const std::string& dir, int64_t step,
                            const FileSystem& fs = posix_file_system());
// Points DIR/latest at the step directory of `step`, atomically.
void publish_latest(const std::string& dir, int64_t step,
                    const FileSystem& fs = posix_file_system());
// The directory name DIR/latest holds ("" when there is no such file).
std::string read_latest(const std::string& dir, const FileSystem& fs = posix_file_system());

// The step directories --resume auto (and zs-ckpt inspect DIR) try, in order: every step
// directory, newest (highest step) first. A directory under a step name is complete (a save is
// renamed to it only when written), so a newer one than `latest` names is a save that ended
// before `latest` moved, and it comes first. `note` (if not null) is set to a line saying how
// `latest` disagrees, when it does: it names a missing or an older directory, or holds no step
// name (quoted, cut to 40 printable characters); "" otherwise.
std::vector<std::string> resume_candidates(const std::string& dir, std::string* note,
                                           const FileSystem& fs = posix_file_system());

// The step directories in `dir`, newest (highest step) first, as paths.
std::vector<std::string> step_dirs(const std::string& dir,
                                   const FileSystem& fs = posix_file_system());
// Deletes all but the newest `keep` step directories; returns the deleted paths. A step directory
// is deleted (here and when commit_step_dir replaces one) by renaming it to a .tmp- name and
// fsyncing DIR first, so a crash never leaves a torn directory under a step name.
std::vector<std::string> prune_step_dirs(const std::string& dir, int keep,
                                         const FileSystem& fs = posix_file_system());

// An advisory lock on a checkpoint directory for one run (issue 28, finding 8): DIR/.lock, held
// with flock(2) and holding "HOST PID" of the run. A second run on the same directory would delete
// the first's save in progress as a crashed one's leftovers; it is refused instead. The lock ends
// with the process that holds it (a killed run's lock is free), so a .lock file left by a run
// that ended without clearing it is taken over, and previous() names that run for a log line.
// flock reaches other hosts on NFS (Linux emulates it there with fcntl locks); not every
// network file system honours it.
class DirectoryLock {
 public:
  // Creates `dir` if needed and takes its lock. InvalidArgument naming the holder when another
  // run (another process, or another lock in this one) holds it; IoError when the lock file
  // cannot be opened.
  explicit DirectoryLock(const std::string& dir);
  // Clears the file's holder and releases the lock.
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  // "HOST PID" of the run whose lock file was left behind (it no longer holds the lock); ""
  // when the file was new or cleared.
  const std::string& previous() const { return previous_; }

 private:
  int fd_ = -1;
  std::string previous_;
};

}  // namespace zs::checkpoint
