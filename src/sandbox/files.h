// The daemon's access to a sandbox's files. Every path resolves inside the sandbox's root only
// (openat2 RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS from an O_PATH fd of the root), so `..`,
// absolute symlinks and links planted inside cannot reach the host; every call runs with the
// filesystem ids of a user inside, so that user's permissions apply and new files are its own.
// Synchronous, no Asio.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "platform/unique_fd.h"

namespace sandstream::sandbox {

enum class FileType { kFile, kDirectory, kSymlink, kOther };
std::string_view FileTypeName(FileType type);

struct FileInfo {
  std::string path;  // absolute, normalized, inside the sandbox
  std::string name;  // last component ("/" for the root)
  FileType type = FileType::kOther;
  uint64_t size = 0;
  int64_t mtime_ms = 0;  // Unix milliseconds
  uint32_t mode = 0;     // permission bits (07777)
  std::string link_target;  // symlinks only
};

// "/a/./b/../c" -> "/a/c". The path must be absolute; a `..` above the root is an error, so
// the caller hears of an escape attempt instead of silently getting the root.
Result<std::string> NormalizeSandboxPath(std::string_view path);

// An open file with what was learned opening it.
struct OpenedFile {
  UniqueFd fd;
  FileInfo info;
  bool created = false;  // OpenWrite made a new file
};

class SandboxFs {
 public:
  // `root`: Sandbox::RootPath(). `host_id`: the host uid (and gid) to act as, or nullopt to act
  // as the daemon itself (a runtime without a user namespace).
  static Result<SandboxFs> Open(const std::string& root, std::optional<uint32_t> host_id);

  // Paths are absolute sandbox paths (normalized here again).
  Result<OpenedFile> OpenRead(std::string_view path) const;
  // Creates or truncates a regular file; `mode` applies to new files (and to existing ones when
  // given); `parents` creates missing directories first.
  Result<OpenedFile> OpenWrite(std::string_view path, std::optional<uint32_t> mode,
                               bool parents) const;
  Result<FileInfo> Stat(std::string_view path) const;
  // The entries of a directory, by name, without following symlinks; at most `limit`.
  Result<std::vector<FileInfo>> List(std::string_view path, size_t limit, bool* truncated) const;
  Result<FileInfo> Mkdir(std::string_view path, uint32_t mode, bool parents) const;
  Result<void> Remove(std::string_view path, bool recursive) const;
  Result<FileInfo> Move(std::string_view from, std::string_view to, bool overwrite) const;
  Result<void> Symlink(std::string_view target, std::string_view path) const;
  // Adds an inotify watch on the directory `path` resolves to; returns the watch descriptor.
  Result<int> AddWatch(int inotify_fd, std::string_view path, uint32_t mask) const;

 private:
  SandboxFs(UniqueFd root, std::optional<uint32_t> host_id)
      : root_(std::move(root)), host_id_(host_id) {}
  // Opens a normalized path inside the root; refuses what lies on /proc, /sys and the like.
  Result<UniqueFd> Resolve(const std::string& normalized, int flags) const;
  Result<void> MkdirAll(const std::string& normalized) const;

  UniqueFd root_;
  std::optional<uint32_t> host_id_;
};

// A change under a watched directory.
struct FileEvent {
  std::string type;  // create, modify, delete, move, overflow
  std::string path;  // absolute inside the sandbox
  std::string from;  // move: the old path
  bool is_dir = false;
};

// inotify on a directory of a sandbox (and, recursively, the directories below it).
class FileWatch {
 public:
  static Result<FileWatch> Start(const SandboxFs& fs, std::string_view path, bool recursive,
                                 size_t max_watches);
  int fd() const { return fd_.get(); }
  const std::string& path() const { return root_path_; }
  // Reads what is pending (non-blocking). `gone`: the watched directory itself went away.
  std::vector<FileEvent> Drain(const SandboxFs& fs, bool* gone);

 private:
  FileWatch() = default;
  Result<void> AddTree(const SandboxFs& fs, const std::string& path);

  UniqueFd fd_;
  std::string root_path_;
  bool recursive_ = false;
  size_t max_watches_ = 0;
  int root_wd_ = -1;
  std::vector<std::pair<int, std::string>> watches_;  // wd -> directory path
};

// Unlinks everything below the directory `dir` without following symlinks or leaving it.
Result<void> RemoveTreeAt(int dir, const std::string& shown_path);

}  // namespace sandstream::sandbox
