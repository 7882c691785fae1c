// The daemon's access to a sandbox's files. Every path resolves inside the sandbox's root only
// (openat2 RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS from an O_PATH fd of the root), so `..`,
// absolute symlinks and links planted inside cannot reach the host; every call runs with the
// filesystem ids of a user inside, so that user's permissions apply and new files are its own.
// Synchronous, no Asio, no shared mutable state: the daemon runs these calls on worker threads.
#pragma once

#include <dirent.h>
#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
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
  uint32_t uid = 0;      // the owner and group as the host sees them (Sandbox::HostId's ids)
  uint32_t gid = 0;
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

  // Up to `size` bytes from the file's offset; 0 at its end.
  Result<size_t> Read(char* buf, size_t size) const;
  // All of `data` at the file's offset; a full disk is kPayloadTooLarge.
  Result<void> Write(std::string_view data) const;
};

// What a write to `path` that failed with `err` tells the client (a full disk is
// kPayloadTooLarge).
Error WriteError(const std::string& path, int err);

class SandboxFs {
 public:
  // `root`: Sandbox::RootPath(). `host_id`: the host uid (and gid) to act as, or nullopt to act
  // as the daemon itself (a runtime without a user namespace).
  static Result<SandboxFs> Open(const std::string& root, std::optional<uint32_t> host_id);

  // Paths are absolute sandbox paths (normalized here again).
  // A regular file only; opened O_NONBLOCK, so a lease held inside is kConflict at once instead
  // of the kernel's lease-break wait.
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
  // Changes the owner (ids as the host sees them, Sandbox::HostId's; nullopt: unchanged) and
  // the permission bits of `path`, not following a symlink there.
  Result<FileInfo> SetAttributes(std::string_view path, std::optional<uint32_t> uid,
                                 std::optional<uint32_t> gid, std::optional<uint32_t> mode) const;
  // Adds an inotify watch on the directory `path` resolves to; returns the watch descriptor.
  Result<int> AddWatch(int inotify_fd, std::string_view path, uint32_t mask) const;
  // A directory opened for reading its entries.
  Result<UniqueFd> OpenDirectory(std::string_view path) const;

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

// inotify on a directory of a sandbox (and, recursively, the directories below it). Work is
// taken in bounded steps, so neither a storm of events nor a huge new subtree holds the caller:
// Drain reads one batch of events; Scan watches and lists a bounded part of the new directories.
class FileWatch {
 public:
  // At most this much of the kernel's queue per Drain.
  static constexpr size_t kDrainBytes = 32 * 1024;
  // At most this many directory entries read (or directories watched) per Scan.
  static constexpr size_t kScanEntries = 4096;

  // Watches `path`; `recursive`: and every directory below it, at most `max_watches` in all
  // (more is kInvalidRequest). Scans the whole tree before it returns.
  static Result<FileWatch> Start(const SandboxFs& fs, std::string_view path, bool recursive,
                                 size_t max_watches);
  const std::string& path() const { return root_path_; }
  // A duplicate of the inotify descriptor, for a reactor to wait on (and close).
  Result<UniqueFd> DupFd() const;

  struct Batch {
    std::vector<FileEvent> events;
    bool gone = false;  // the watched directory itself went away
    bool more = false;  // the queue may hold more: Drain again before waiting for readiness
  };
  // Reads one batch of pending events (non-blocking). Touches only the inotify descriptor;
  // directories created under a recursive watch are queued for Scan.
  Batch Drain();
  // Whether new directories wait to be watched and listed.
  bool scanning() const { return listing_.has_value() || !pending_.empty(); }
  // Watches and lists queued directories, at most kScanEntries steps. Touches the sandbox's
  // files (and may take as long as they do).
  void Scan(const SandboxFs& fs);

 private:
  struct DirCloser {
    void operator()(DIR* dir) const { ::closedir(dir); }
  };
  struct PendingDir {
    std::string path;
    bool watched = false;
  };
  struct Listing {
    std::string path;
    std::unique_ptr<DIR, DirCloser> dir;
  };

  FileWatch() = default;
  void Queue(std::string path, bool watched);

  UniqueFd fd_;
  std::string root_path_;
  bool recursive_ = false;
  size_t max_watches_ = 0;
  bool limit_reached_ = false;  // a directory went unwatched: more than max_watches_
  int root_wd_ = -1;
  std::unordered_map<int, std::string> watches_;  // wd -> directory path
  std::deque<PendingDir> pending_;                // to watch (unless watched) and list
  std::optional<Listing> listing_;                // the directory being listed
};

// Unlinks everything below the directory `dir` without following symlinks or leaving it.
Result<void> RemoveTreeAt(int dir, const std::string& shown_path);

}  // namespace sandstream::sandbox
