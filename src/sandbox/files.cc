// SandboxFs: path resolution confined to the sandbox's root, and the file operations on top.
#include "sandbox/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/fsuid.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <linux/openat2.h>

namespace sandstream::sandbox {
namespace {

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

// Switches this thread's filesystem ids for the duration of one operation. Changing the fsuid
// away from 0 also drops CAP_DAC_OVERRIDE and friends, so the kernel checks permissions as
// that user would see them inside; switching back restores them.
class ActAs {
 public:
  explicit ActAs(std::optional<uint32_t> id) : active_(id.has_value()) {
    if (!active_) return;
    old_gid_ = ::setfsgid(*id);
    old_uid_ = ::setfsuid(*id);
  }
  ~ActAs() {
    if (!active_) return;
    ::setfsuid(old_uid_);
    ::setfsgid(old_gid_);
  }
  ActAs(const ActAs&) = delete;
  ActAs& operator=(const ActAs&) = delete;

 private:
  bool active_;
  int old_uid_ = 0;
  int old_gid_ = 0;
};

Error FsError(std::string_view op, const std::string& path, int err) {
  ErrorCode code = ErrorCode::kInvalidRequest;
  switch (err) {
    case ENOENT:
      code = ErrorCode::kNotFound;
      break;
    case EEXIST:
    case ENOTEMPTY:
    case EBUSY:
      code = ErrorCode::kConflict;
      break;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      code = ErrorCode::kPayloadTooLarge;
      break;
    case ENOMEM:
    case EIO:
    case EBADF:
      code = ErrorCode::kInternal;
      break;
    default:
      break;
  }
  Error e = SysError(code, std::string("files: ") + std::string(op) + " " + path, err);
  if (err == ELOOP) e.message += " (a /proc magic link, or too many symlinks)";
  if (err == ENOTEMPTY) e.message += " (delete it with recursive)";
  return e;
}

// /proc, /sys and cgroup files are kernel interfaces, not the sandbox's files: the daemon, with
// its host privileges, must not read or write them on the sandbox's behalf.
Result<void> CheckServed(int fd, const std::string& path) {
  struct statfs sf {};
  if (::fstatfs(fd, &sf) != 0) return FsError("statfs", path, errno);
  const auto type = static_cast<unsigned long>(sf.f_type);
  if (type == PROC_SUPER_MAGIC || type == SYSFS_MAGIC || type == CGROUP_SUPER_MAGIC ||
      type == CGROUP2_SUPER_MAGIC || type == DEBUGFS_MAGIC || type == SECURITYFS_MAGIC) {
    return Error{ErrorCode::kInvalidRequest,
                 "files: " + path +
                     " is on a kernel filesystem (/proc, /sys), which the files "
                     "API does not serve"};
  }
  return Ok{};
}

FileType TypeOf(mode_t mode) {
  if (S_ISREG(mode)) return FileType::kFile;
  if (S_ISDIR(mode)) return FileType::kDirectory;
  if (S_ISLNK(mode)) return FileType::kSymlink;
  return FileType::kOther;
}

std::string BaseName(const std::string& normalized) {
  if (normalized == "/") return "/";
  return normalized.substr(normalized.rfind('/') + 1);
}

std::string ParentOf(const std::string& normalized) {
  const size_t slash = normalized.rfind('/');
  return slash == 0 ? "/" : normalized.substr(0, slash);
}

FileInfo InfoFrom(const std::string& path, const struct stat& st) {
  FileInfo info;
  info.path = path;
  info.name = BaseName(path);
  info.type = TypeOf(st.st_mode);
  info.size = static_cast<uint64_t>(st.st_size);
  info.mtime_ms = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
  info.mode = st.st_mode & 07777;
  info.uid = st.st_uid;
  info.gid = st.st_gid;
  return info;
}

std::string ChildPath(const std::string& dir, std::string_view name) {
  return dir == "/" ? "/" + std::string(name) : dir + "/" + std::string(name);
}

// Opens what an O_PATH fd names, for real I/O: the permission check happens here, as the
// current filesystem ids, on exactly the inode resolution found.
Result<UniqueFd> Reopen(int path_fd, int flags, const std::string& path) {
  const std::string proc = "/proc/self/fd/" + std::to_string(path_fd);
  UniqueFd fd(::open(proc.c_str(), flags | O_CLOEXEC | O_NOCTTY));
  if (fd) return fd;
  Error e = FsError("open", path, errno);
  // O_NONBLOCK and a lease: the kernel has asked its holder to let go, and did not wait.
  if (errno == EWOULDBLOCK && (flags & O_NONBLOCK)) {
    e.code = ErrorCode::kConflict;
    e.message += " (a process in the sandbox holds a lease on it; try again later)";
  }
  return e;
}

}  // namespace

std::string_view FileTypeName(FileType type) {
  switch (type) {
    case FileType::kFile:
      return "file";
    case FileType::kDirectory:
      return "directory";
    case FileType::kSymlink:
      return "symlink";
    case FileType::kOther:
      return "other";
  }
  return "other";
}

Result<std::string> NormalizeSandboxPath(std::string_view path) {
  if (path.empty() || path[0] != '/') {
    return Error{ErrorCode::kInvalidRequest, "path must be absolute: '" + std::string(path) + "'"};
  }
  if (path.find('\0') != std::string_view::npos) {
    return Error{ErrorCode::kInvalidRequest, "path must not contain NUL bytes"};
  }
  if (path.size() > 4096)
    return Error{ErrorCode::kInvalidRequest, "path is longer than 4096 bytes"};
  std::vector<std::string_view> parts;
  while (!path.empty()) {
    const size_t slash = path.find('/');
    const std::string_view part = path.substr(0, slash);
    path.remove_prefix(slash == std::string_view::npos ? path.size() : slash + 1);
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (parts.empty()) {
        return Error{ErrorCode::kInvalidRequest, "path climbs above the sandbox's root with '..'"};
      }
      parts.pop_back();
      continue;
    }
    parts.push_back(part);
  }
  std::string out;
  for (const auto& p : parts) {
    out += '/';
    out += p;
  }
  return out.empty() ? std::string("/") : out;
}

Result<SandboxFs> SandboxFs::Open(const std::string& root, std::optional<uint32_t> host_id) {
  // As the daemon: /proc/<pid>/root needs ptrace-level access to the sandbox's PID 1.
  UniqueFd fd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return SysError(ErrorCode::kInternal, "files: open sandbox root " + root, errno);
  return SandboxFs(std::move(fd), host_id);
}

Result<UniqueFd> SandboxFs::Resolve(const std::string& normalized, int flags) const {
  const std::string rel = normalized == "/" ? "." : normalized.substr(1);
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.mode = (flags & O_CREAT) ? 0644 : 0;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  for (int attempt = 0;; ++attempt) {
    const long fd = ::syscall(SYS_openat2, root_.get(), rel.c_str(), &how, sizeof how);
    if (fd >= 0) {
      UniqueFd opened(static_cast<int>(fd));
      if (auto ok = CheckServed(opened.get(), normalized); !ok) return std::move(ok).error();
      return opened;
    }
    // EAGAIN: a rename raced with the lookup; the kernel asks for a retry.
    if (errno == EAGAIN && attempt < 8) continue;
    return FsError("open", normalized, errno);
  }
}

Result<void> SandboxFs::MkdirAll(const std::string& normalized) const {
  std::string prefix;
  size_t pos = 1;
  while (pos <= normalized.size()) {
    size_t slash = normalized.find('/', pos);
    if (slash == std::string::npos) slash = normalized.size();
    prefix = normalized.substr(0, slash);
    pos = slash + 1;
    auto existing = Resolve(prefix, O_PATH | O_DIRECTORY);
    if (existing) continue;
    if (existing.error().code != ErrorCode::kNotFound) return std::move(existing).error();
    auto parent = Resolve(ParentOf(prefix), O_PATH | O_DIRECTORY);
    if (!parent) return std::move(parent).error();
    if (::mkdirat(parent->get(), BaseName(prefix).c_str(), 0755) != 0 && errno != EEXIST) {
      return FsError("mkdir", prefix, errno);
    }
  }
  return Ok{};
}

Result<OpenedFile> SandboxFs::OpenRead(std::string_view path) const {
  auto norm = NormalizeSandboxPath(path);
  if (!norm) return std::move(norm).error();
  ActAs as(host_id_);
  auto handle = Resolve(*norm, O_PATH);
  if (!handle) return std::move(handle).error();
  struct stat st {};
  if (::fstat(handle->get(), &st) != 0) return FsError("stat", *norm, errno);
  if (S_ISDIR(st.st_mode)) {
    return Error{ErrorCode::kInvalidRequest,
                 "files: " + *norm + " is a directory (list it instead)"};
  }
  if (!S_ISREG(st.st_mode)) {
    return Error{ErrorCode::kInvalidRequest, "files: " + *norm + " is not a regular file"};
  }
  auto fd = Reopen(handle->get(), O_RDONLY | O_NONBLOCK, *norm);
  if (!fd) return std::move(fd).error();
  return OpenedFile{std::move(*fd), InfoFrom(*norm, st), false};
}

Result<size_t> OpenedFile::Read(char* buf, size_t size) const {
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, size);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) return FsError("read", info.path, errno);
  }
}

Error WriteError(const std::string& path, int err) {
  Error e = FsError("write", path, err);
  if (e.code == ErrorCode::kPayloadTooLarge) e.message += " (the sandbox's disk is full)";
  return e;
}

Result<void> OpenedFile::Write(std::string_view data) const {
  while (!data.empty()) {
    const ssize_t n = ::write(fd.get(), data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return WriteError(info.path, errno);
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Ok{};
}

Result<OpenedFile> SandboxFs::OpenWrite(std::string_view path, std::optional<uint32_t> mode,
                                        bool parents) const {
  auto norm = NormalizeSandboxPath(path);
  if (!norm) return std::move(norm).error();
  if (*norm == "/") return Error{ErrorCode::kInvalidRequest, "files: / is a directory"};
  ActAs as(host_id_);
  if (parents) {
    if (auto ok = MkdirAll(ParentOf(*norm)); !ok) return std::move(ok).error();
  }
  auto parent = Resolve(ParentOf(*norm), O_PATH | O_DIRECTORY);
  if (!parent) return std::move(parent).error();
  bool created = false;
  auto handle = Resolve(*norm, O_PATH);
  if (!handle && handle.error().code == ErrorCode::kNotFound) {
    // O_EXCL: what we create is new, so a failed upload can remove it without losing data.
    handle = Resolve(*norm, O_WRONLY | O_CREAT | O_EXCL | O_NONBLOCK);
    created = handle.ok();
  }
  if (!handle) return std::move(handle).error();
  struct stat st {};
  if (::fstat(handle->get(), &st) != 0) return FsError("stat", *norm, errno);
  if (S_ISDIR(st.st_mode))
    return Error{ErrorCode::kInvalidRequest, "files: " + *norm + " is a directory"};
  if (!S_ISREG(st.st_mode)) {
    return Error{ErrorCode::kInvalidRequest, "files: " + *norm + " is not a regular file"};
  }
  UniqueFd fd;
  if (created) {
    fd = std::move(*handle);
  } else {
    auto reopened = Reopen(handle->get(), O_WRONLY | O_TRUNC | O_NONBLOCK, *norm);
    if (!reopened) return std::move(reopened).error();
    fd = std::move(*reopened);
  }
  // Blocking from here: a regular file never blocks, and writes must not come back short.
  ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  if (mode && ::fchmod(fd.get(), *mode & 07777) != 0) return FsError("chmod", *norm, errno);
  if (::fstat(fd.get(), &st) != 0) return FsError("stat", *norm, errno);
  return OpenedFile{std::move(fd), InfoFrom(*norm, st), created};
}

Result<FileInfo> SandboxFs::SetAttributes(std::string_view path, std::optional<uint32_t> uid,
                                          std::optional<uint32_t> gid,
                                          std::optional<uint32_t> mode) const {
  auto norm = NormalizeSandboxPath(path);
  if (!norm) return std::move(norm).error();
  ActAs as(host_id_);
  auto handle = Resolve(*norm, O_PATH | O_NOFOLLOW);
  if (!handle) return std::move(handle).error();
  if ((uid || gid) &&
      ::fchownat(handle->get(), "", uid ? *uid : static_cast<uid_t>(-1),
                 gid ? *gid : static_cast<gid_t>(-1), AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) {
    return FsError("chown", *norm, errno);
  }
  struct stat st {};
  if (::fstat(handle->get(), &st) != 0) return FsError("stat", *norm, errno);
  if (mode) {
    if (S_ISLNK(st.st_mode)) {
      return Error{ErrorCode::kInvalidRequest, "files: " + *norm + " is a symlink (no mode)"};
    }
    // An O_PATH descriptor takes no fchmod; its /proc link does, as the file itself.
    const std::string link = "/proc/self/fd/" + std::to_string(handle->get());
    if (::chmod(link.c_str(), *mode & 07777) != 0) return FsError("chmod", *norm, errno);
    if (::fstat(handle->get(), &st) != 0) return FsError("stat", *norm, errno);
  }
  return InfoFrom(*norm, st);
}

Result<FileInfo> SandboxFs::Stat(std::string_view path) const {
  auto norm = NormalizeSandboxPath(path);
  if (!norm) return std::move(norm).error();
  ActAs as(host_id_);
  auto handle = Resolve(*norm, O_PATH);
  if (!handle) return std::move(handle).error();
  struct stat st {};
  if (::fstat(handle->get(), &st) != 0) return FsError("stat", *norm, errno);
  return InfoFrom(*norm, st);
}

Result<std::vector<FileInfo>> SandboxFs::List(std::string_view path, size_t limit,
                                              bool* truncated) const {
  *truncated = false;
  auto norm = NormalizeSandboxPath(path);
  if (!norm) return std::move(norm).error();
  ActAs as(host_id_);
  auto handle = Resolve(*norm, O_PATH);
  if (!handle) return std::move(handle).error();
  struct stat st {};
  if (::fstat(handle->get(), &st) != 0) return FsError("stat", *norm, errno);
  if (!S_ISDIR(st.st_mode)) {
    return Error{ErrorCode::kInvalidRequest, "files: " + *norm + " is not a directory"};
  }
  auto fd = Reopen(handle->get(), O_RDONLY | O_DIRECTORY, *norm);
  if (!fd) return std::move(fd).error();
  const int dir_fd = fd->get();
  DIR* dir = ::fdopendir(fd->release());
  if (!dir) return FsError("list", *norm, errno);
  std::vector<FileInfo> out;
  while (dirent* e = ::readdir(dir)) {
    const std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    if (out.size() >= limit) {
      *truncated = true;
      break;
    }
    struct stat est {};
    if (::fstatat(dir_fd, e->d_name, &est, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
    FileInfo info = InfoFrom(ChildPath(*norm, name), est);
    if (S_ISLNK(est.st_mode)) {
      char target[4096];
      const ssize_t n = ::readlinkat(dir_fd, e->d_name, target, sizeof target);
      if (n > 0) info.link_target.assign(target, static_cast<size_t>(n));
    }
    out.push_back(std::move(info));
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end(),
            [](const FileInfo& a, const FileInfo& b) { return a.name < b.name; });
  return out;
}

Result<FileInfo> SandboxFs::Mkdir(std::string_view path, uint32_t mode, bool parents) const {
  auto norm = NormalizeSandboxPath(path);
  if (!norm) return std::move(norm).error();
  ActAs as(host_id_);
  if (parents) {
    if (auto ok = MkdirAll(*norm); !ok) return std::move(ok).error();
  } else {
    if (*norm == "/") return FsError("mkdir", *norm, EEXIST);
    auto parent = Resolve(ParentOf(*norm), O_PATH | O_DIRECTORY);
    if (!parent) return std::move(parent).error();
    if (::mkdirat(parent->get(), BaseName(*norm).c_str(), 0755) != 0) {
      return FsError("mkdir", *norm, errno);
    }
  }
  auto handle = Resolve(*norm, O_PATH | O_DIRECTORY);
  if (!handle) return std::move(handle).error();
  // fchmod needs a real fd; mkdirat's mode would be cut by the umask.
  auto fd = Reopen(handle->get(), O_RDONLY | O_DIRECTORY, *norm);
  if (fd && ::fchmod(fd->get(), mode & 07777) != 0) return FsError("chmod", *norm, errno);
  struct stat st {};
  if (::fstat(handle->get(), &st) != 0) return FsError("stat", *norm, errno);
  return InfoFrom(*norm, st);
}

Result<void> RemoveTreeAt(int dir_fd, const std::string& shown_path) {
  const int copy = ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return FsError("delete", shown_path, errno);
  DIR* dir = ::fdopendir(copy);
  if (!dir) {
    ::close(copy);
    return FsError("delete", shown_path, errno);
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(dir)) {
    const std::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  ::closedir(dir);
  for (const auto& name : names) {
    const std::string child = ChildPath(shown_path, name);
    struct stat st {};
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      // O_NOFOLLOW | O_DIRECTORY: a directory swapped for a symlink meanwhile is not entered.
      UniqueFd sub(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub) return FsError("delete", child, errno);
      if (auto ok = RemoveTreeAt(sub.get(), child); !ok) return ok;
      if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0)
        return FsError("delete", child, errno);
    } else if (::unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT) {
      return FsError("delete", child, errno);
    }
  }
  return Ok{};
}

Result<void> SandboxFs::Remove(std::string_view path, bool recursive) const {
  auto norm = NormalizeSandboxPath(path);
  if (!norm) return std::move(norm).error();
  if (*norm == "/") return Error{ErrorCode::kInvalidRequest, "files: the root cannot be deleted"};
  ActAs as(host_id_);
  auto parent = Resolve(ParentOf(*norm), O_PATH | O_DIRECTORY);
  if (!parent) return std::move(parent).error();
  const std::string name = BaseName(*norm);
  struct stat st {};
  if (::fstatat(parent->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return FsError("delete", *norm, errno);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(parent->get(), name.c_str(), 0) != 0) return FsError("delete", *norm, errno);
    return Ok{};
  }
  if (recursive) {
    UniqueFd dir(
        ::openat(parent->get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir) return FsError("delete", *norm, errno);
    if (auto ok = RemoveTreeAt(dir.get(), *norm); !ok) return ok;
  }
  if (::unlinkat(parent->get(), name.c_str(), AT_REMOVEDIR) != 0) {
    return FsError("delete", *norm, errno);
  }
  return Ok{};
}

Result<FileInfo> SandboxFs::Move(std::string_view from, std::string_view to, bool overwrite) const {
  auto src = NormalizeSandboxPath(from);
  if (!src) return std::move(src).error();
  auto dst = NormalizeSandboxPath(to);
  if (!dst) return std::move(dst).error();
  if (*src == "/" || *dst == "/")
    return Error{ErrorCode::kInvalidRequest, "files: the root cannot be moved"};
  ActAs as(host_id_);
  auto src_parent = Resolve(ParentOf(*src), O_PATH | O_DIRECTORY);
  if (!src_parent) return std::move(src_parent).error();
  auto dst_parent = Resolve(ParentOf(*dst), O_PATH | O_DIRECTORY);
  if (!dst_parent) return std::move(dst_parent).error();
  const unsigned flags = overwrite ? 0 : RENAME_NOREPLACE;
  if (::renameat2(src_parent->get(), BaseName(*src).c_str(), dst_parent->get(),
                  BaseName(*dst).c_str(), flags) != 0) {
    return FsError("move " + *src + " to", *dst, errno);
  }
  struct stat st {};
  if (::fstatat(dst_parent->get(), BaseName(*dst).c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return FsError("stat", *dst, errno);
  }
  return InfoFrom(*dst, st);
}

Result<void> SandboxFs::Symlink(std::string_view target, std::string_view path) const {
  auto norm = NormalizeSandboxPath(path);
  if (!norm) return std::move(norm).error();
  if (*norm == "/") return FsError("symlink", *norm, EEXIST);
  ActAs as(host_id_);
  if (auto ok = MkdirAll(ParentOf(*norm)); !ok) return ok;
  auto parent = Resolve(ParentOf(*norm), O_PATH | O_DIRECTORY);
  if (!parent) return std::move(parent).error();
  if (::symlinkat(std::string(target).c_str(), parent->get(), BaseName(*norm).c_str()) != 0) {
    return FsError("symlink", *norm, errno);
  }
  return Ok{};
}

Result<int> SandboxFs::AddWatch(int inotify_fd, std::string_view path, uint32_t mask) const {
  auto norm = NormalizeSandboxPath(path);
  if (!norm) return std::move(norm).error();
  ActAs as(host_id_);
  auto handle = Resolve(*norm, O_PATH | O_DIRECTORY);
  if (!handle) return std::move(handle).error();
  // inotify takes a path: our own fd's /proc link names exactly the resolved directory.
  const std::string proc = "/proc/self/fd/" + std::to_string(handle->get());
  const int wd = ::inotify_add_watch(inotify_fd, proc.c_str(), mask);
  if (wd >= 0) return wd;
  if (errno == ENOSPC) {
    return SysError(ErrorCode::kQuotaExceeded,
                    "files: watch " + *norm +
                        ": the host's inotify watches "
                        "(fs.inotify.max_user_watches) are used up",
                    errno);
  }
  return FsError("watch", *norm, errno);
}

Result<UniqueFd> SandboxFs::OpenDirectory(std::string_view path) const {
  auto norm = NormalizeSandboxPath(path);
  if (!norm) return std::move(norm).error();
  ActAs as(host_id_);
  auto handle = Resolve(*norm, O_PATH | O_DIRECTORY);
  if (!handle) return std::move(handle).error();
  return Reopen(handle->get(), O_RDONLY | O_DIRECTORY, *norm);
}

namespace {
constexpr uint32_t kWatchMask = IN_CREATE | IN_DELETE | IN_MODIFY | IN_MOVED_FROM | IN_MOVED_TO |
                                IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;
}  // namespace

Result<FileWatch> FileWatch::Start(const SandboxFs& fs, std::string_view path, bool recursive,
                                   size_t max_watches) {
  auto norm = NormalizeSandboxPath(path);
  if (!norm) return std::move(norm).error();
  FileWatch w;
  w.fd_.reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!w.fd_ && errno == EMFILE) {
    return SysError(ErrorCode::kQuotaExceeded,
                    "files: watch " + *norm +
                        ": the host's inotify instances "
                        "(fs.inotify.max_user_instances) are used up",
                    errno);
  }
  if (!w.fd_) return SysError(ErrorCode::kInternal, "files: inotify_init1", errno);
  w.root_path_ = *norm;
  w.recursive_ = recursive;
  w.max_watches_ = max_watches;
  auto wd = fs.AddWatch(w.fd_.get(), *norm, kWatchMask);
  if (!wd) return std::move(wd).error();
  w.root_wd_ = *wd;
  w.watches_.emplace(*wd, *norm);
  if (recursive) w.Queue(*norm, true);
  while (w.scanning()) w.Scan(fs);
  if (w.limit_reached_) {
    return Error{ErrorCode::kInvalidRequest, "files: more than " + std::to_string(max_watches) +
                                                 " directories under " + *norm +
                                                 " to watch; watch a smaller tree"};
  }
  return w;
}

Result<UniqueFd> FileWatch::DupFd() const {
  UniqueFd fd(::fcntl(fd_.get(), F_DUPFD_CLOEXEC, 0));
  if (!fd) return SysError(ErrorCode::kInternal, "files: watch " + root_path_ + ": dup", errno);
  return fd;
}

void FileWatch::Queue(std::string path, bool watched) {
  // Counting what waits as watched already keeps the queue as bounded as the watches.
  if (watches_.size() + pending_.size() >= max_watches_ && !watched) {
    limit_reached_ = true;
    return;
  }
  pending_.push_back(PendingDir{std::move(path), watched});
}

void FileWatch::Scan(const SandboxFs& fs) {
  for (size_t steps = 0; steps < kScanEntries; ++steps) {
    if (!listing_) {
      if (pending_.empty()) return;
      PendingDir next = std::move(pending_.front());
      pending_.pop_front();
      if (!next.watched) {
        // Gone meanwhile, or not a directory (DT_UNKNOWN): nothing to watch.
        auto wd = fs.AddWatch(fd_.get(), next.path, kWatchMask);
        if (!wd) continue;
        watches_[*wd] = next.path;
      }
      auto fd = fs.OpenDirectory(next.path);
      if (!fd) continue;
      DIR* dir = ::fdopendir(fd->get());
      if (!dir) continue;
      (void)fd->release();
      listing_.emplace(Listing{std::move(next.path), std::unique_ptr<DIR, DirCloser>(dir)});
      continue;
    }
    const dirent* e = ::readdir(listing_->dir.get());
    if (!e) {
      listing_.reset();
      continue;
    }
    const std::string_view name = e->d_name;
    if (name == "." || name == ".." || (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN)) continue;
    Queue(ChildPath(listing_->path, name), false);
  }
}

FileWatch::Batch FileWatch::Drain() {
  Batch batch;
  std::vector<FileEvent>& out = batch.events;
  // Moves come as MOVED_FROM then MOVED_TO with one cookie; pair them within a read.
  std::vector<std::pair<uint32_t, size_t>> pending_from;
  alignas(inotify_event) char buf[kDrainBytes];
  const ssize_t n = ::read(fd_.get(), buf, sizeof buf);
  if (n < 0 && errno == EINTR) batch.more = true;
  if (n <= 0) return batch;
  // The kernel stops filling at the first event that does not fit: room left for the largest
  // possible one means the queue was empty.
  batch.more = static_cast<size_t>(n) > sizeof buf - (sizeof(inotify_event) + NAME_MAX + 1);
  for (ssize_t off = 0; off < n;) {
    const auto* ev = reinterpret_cast<const inotify_event*>(buf + off);
    off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
    if (ev->mask & IN_Q_OVERFLOW) {
      out.push_back(FileEvent{"overflow", root_path_, {}, false});
      continue;
    }
    if (ev->mask & IN_IGNORED) {
      watches_.erase(ev->wd);
      if (ev->wd == root_wd_) batch.gone = true;
      continue;
    }
    const auto dir = watches_.find(ev->wd);
    if (dir == watches_.end()) continue;
    const bool is_dir = (ev->mask & IN_ISDIR) != 0;
    if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
      if (ev->wd == root_wd_) batch.gone = true;
      continue;
    }
    const std::string name = ev->len > 0 ? std::string(ev->name) : std::string();
    const std::string path = ChildPath(dir->second, name);
    if (ev->mask & IN_MOVED_FROM) {
      pending_from.emplace_back(ev->cookie, out.size());
      out.push_back(FileEvent{"delete", path, {}, is_dir});
      continue;
    }
    if (ev->mask & IN_MOVED_TO) {
      auto from = std::find_if(pending_from.begin(), pending_from.end(),
                               [&](const auto& p) { return p.first == ev->cookie; });
      if (from != pending_from.end()) {
        FileEvent& moved = out[from->second];
        moved.type = "move";
        moved.from = moved.path;
        moved.path = path;
        pending_from.erase(from);
      } else {
        out.push_back(FileEvent{"create", path, {}, is_dir});
      }
    } else if (ev->mask & IN_CREATE) {
      out.push_back(FileEvent{"create", path, {}, is_dir});
    } else if (ev->mask & IN_DELETE) {
      out.push_back(FileEvent{"delete", path, {}, is_dir});
    } else if (ev->mask & IN_MODIFY) {
      // One write is one event; a burst of writes to one file is reported once per read.
      if (!out.empty() && out.back().type == "modify" && out.back().path == path) continue;
      out.push_back(FileEvent{"modify", path, {}, is_dir});
    }
    if (recursive_ && is_dir && (ev->mask & (IN_CREATE | IN_MOVED_TO))) Queue(path, false);
  }
  return batch;
}

}  // namespace sandstream::sandbox
