#include "image/unpack.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <vector>

#include "image/tree.h"

namespace sandstream::image {
namespace {

constexpr char kCapabilityXattr[] = "security.capability";

struct DirMeta {
  uint32_t mode = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  timespec mtime{};
};

timespec MtimeOf(const TarEntry& e) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(e.mtime);
  ts.tv_nsec = static_cast<long>(e.mtime_nsec);
  return ts;
}

std::string_view ParentOf(std::string_view name) {
  const size_t slash = name.rfind('/');
  return slash == std::string_view::npos ? std::string_view() : name.substr(0, slash);
}

std::string_view BaseOf(std::string_view name) {
  const size_t slash = name.rfind('/');
  return slash == std::string_view::npos ? name : name.substr(slash + 1);
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

class Unpacker {
 public:
  Unpacker(int root, const std::string& what, const UnpackLimits& limits)
      : root_(root), what_(what), limits_(limits) {}

  Result<void> Entry(TarReader& tar, const TarEntry& e);
  Result<void> Finish();

 private:
  Error Refuse(const TarEntry& e, std::string_view why) const {
    return Error{ErrorCode::kInvalidRequest,
                 what_ + ": entry " + Quote(e.name) + ": " + std::string(why)};
  }
  Error Sys(const TarEntry& e, std::string_view step, int err) const {
    return SysError(ErrorCode::kInternal, what_ + ": entry " + Quote(e.name) + ": " +
                                              std::string(step), err);
  }
  // The directory `path` beneath the root, made (0755, root's) where missing when `create`.
  Result<UniqueFd> OpenDir(const TarEntry& e, std::string_view path, bool create, int flags);
  // Makes way for `name` (`base` in `parent`): an existing entry goes, unless both it and the
  // new one are directories. Returns whether a directory stays.
  Result<bool> Clear(const TarEntry& e, int parent, const std::string& base,
                     const std::string& name, bool want_dir);
  Result<void> File(TarReader& tar, const TarEntry& e, int parent, const std::string& base);
  Result<void> Hardlink(const TarEntry& e, int parent, const std::string& base,
                        const std::string& name);
  Result<void> Whiteout(const TarEntry& e, std::string_view parent_path, std::string_view target);
  Result<void> Opaque(const TarEntry& e, std::string_view dir);
  Result<void> OwnAndTime(const TarEntry& e, int parent, const std::string& base);

  int root_;
  const std::string& what_;
  UnpackLimits limits_;
  uint64_t entries_ = 0;
  std::map<std::string, DirMeta> dirs_;  // metadata set last: children change a dir's mtime
};

Result<UniqueFd> Unpacker::OpenDir(const TarEntry& e, std::string_view path, bool create,
                                   int flags) {
  if (UniqueFd fd = OpenBeneath(root_, path, flags | O_DIRECTORY)) return fd;
  // One component at a time, to make what is missing and to name what is in the way.
  UniqueFd cur = OpenBeneath(root_, "", O_PATH | O_DIRECTORY);
  if (!cur) return Sys(e, "open the layer's root", errno);
  size_t at = 0;
  while (at < path.size()) {
    size_t slash = path.find('/', at);
    if (slash == std::string_view::npos) slash = path.size();
    const std::string comp(path.substr(at, slash - at));
    const std::string_view prefix = path.substr(0, slash);
    const bool last = slash == path.size();
    at = slash + 1;
    const int want = last ? flags | O_DIRECTORY : O_PATH | O_DIRECTORY;
    UniqueFd next = OpenBeneath(cur.get(), comp, want);
    if (!next && errno == ENOENT && create) {
      if (::mkdirat(cur.get(), comp.c_str(), 0755) != 0 && errno != EEXIST) {
        return Sys(e, "mkdir " + Quote(prefix), errno);
      }
      next = OpenBeneath(cur.get(), comp, want);
    }
    if (!next) {
      const int err = errno;
      // O_NOFOLLOW | O_DIRECTORY on a symlink is ENOTDIR: look at what is there.
      struct stat st{};
      if ((err == ELOOP || err == ENOTDIR) &&
          ::fstatat(cur.get(), comp.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISLNK(st.st_mode)) {
        return Refuse(e, Quote(prefix) + " is a symlink in this layer: nothing is written "
                         "through it");
      }
      if (err == ENOTDIR) return Refuse(e, Quote(prefix) + " is not a directory");
      if (err == ENOENT) return Refuse(e, Quote(prefix) + " is not earlier in this layer");
      return Sys(e, "open " + Quote(prefix), err);
    }
    cur = std::move(next);
  }
  return cur;
}

Result<bool> Unpacker::Clear(const TarEntry& e, int parent, const std::string& base,
                             const std::string& name, bool want_dir) {
  struct stat st{};
  if (::fstatat(parent, base.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return false;
    return Sys(e, "stat", errno);
  }
  if (S_ISDIR(st.st_mode)) {
    if (want_dir) return true;
    if (auto ok = RemoveTree(parent, base, what_ + ": entry " + Quote(e.name)); !ok) {
      return std::move(ok).error();
    }
    // What was below it went with it ('/' + 1 is '0': the range of "name/...").
    dirs_.erase(dirs_.lower_bound(name + "/"), dirs_.lower_bound(name + "0"));
    dirs_.erase(name);
    return false;
  }
  if (::unlinkat(parent, base.c_str(), 0) != 0) return Sys(e, "unlink", errno);
  return false;
}

Result<void> Unpacker::OwnAndTime(const TarEntry& e, int parent, const std::string& base) {
  if (::fchownat(parent, base.c_str(), e.uid, e.gid, AT_SYMLINK_NOFOLLOW) != 0) {
    return Sys(e, "chown", errno);
  }
  const timespec ts[2] = {MtimeOf(e), MtimeOf(e)};
  if (::utimensat(parent, base.c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0) {
    return Sys(e, "set times", errno);
  }
  return Ok{};
}

Result<void> Unpacker::File(TarReader& tar, const TarEntry& e, int parent,
                            const std::string& base) {
  UniqueFd fd(::openat(parent, base.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                       0600));
  if (!fd) return Sys(e, "create", errno);
  std::vector<char> buf(128 * 1024);
  for (;;) {
    auto got = tar.ReadData(buf.data(), buf.size());
    if (!got) return std::move(got).error();
    if (*got == 0) break;
    for (size_t done = 0; done < *got;) {
      const ssize_t n = ::write(fd.get(), buf.data() + done, *got - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Sys(e, "write", errno);
      done += static_cast<size_t>(n);
    }
  }
  // chown before chmod (it clears setuid and setgid) and before the capability (it drops it).
  if (::fchown(fd.get(), e.uid, e.gid) != 0) return Sys(e, "chown", errno);
  if (::fchmod(fd.get(), e.mode) != 0) return Sys(e, "chmod", errno);
  for (const auto& [key, value] : e.xattrs) {
    if (key != kCapabilityXattr) continue;
    if (::fsetxattr(fd.get(), key.c_str(), value.data(), value.size(), 0) != 0) {
      if (errno == EINVAL) return Refuse(e, "a malformed security.capability xattr");
      return Sys(e, "set security.capability", errno);
    }
  }
  const timespec ts[2] = {MtimeOf(e), MtimeOf(e)};
  if (::futimens(fd.get(), ts) != 0) return Sys(e, "set times", errno);
  return Ok{};
}

Result<void> Unpacker::Hardlink(const TarEntry& e, int parent, const std::string& base,
                                const std::string& name) {
  auto target = NormalizeEntryName(e.linkname);
  if (!target) return Refuse(e, "links to " + Quote(e.linkname) + ": " + target.error().message);
  if (target->empty()) return Refuse(e, "links to the layer's root");
  if (*target == name) return Refuse(e, "links to itself");
  const std::string not_earlier = "links to " + Quote(*target) + ", which is not earlier in this "
                                  "layer";
  auto tparent = OpenDir(e, ParentOf(*target), false, O_PATH);
  if (!tparent) {
    if (tparent.error().code == ErrorCode::kInvalidRequest) return Refuse(e, not_earlier);
    return std::move(tparent).error();
  }
  const std::string tbase(BaseOf(*target));
  struct stat st{};
  if (::fstatat(tparent->get(), tbase.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return Refuse(e, not_earlier);
    return Sys(e, "stat the link's target", errno);
  }
  if (S_ISDIR(st.st_mode)) return Refuse(e, "links to a directory");
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return Refuse(e, "links to a whiteout");
  if (auto kept = Clear(e, parent, base, name, false); !kept) return std::move(kept).error();
  // Without AT_SYMLINK_FOLLOW: a link to a symlink is a link to the symlink itself.
  if (::linkat(tparent->get(), tbase.c_str(), parent, base.c_str(), 0) != 0) {
    if (errno == ENOENT) return Refuse(e, not_earlier);
    return Sys(e, "link", errno);
  }
  return Ok{};
}

Result<void> Unpacker::Whiteout(const TarEntry& e, std::string_view parent_path,
                                std::string_view target) {
  if (target.empty() || target == "." || target == "..") {
    return Refuse(e, "a whiteout that names no entry");
  }
  auto parent = OpenDir(e, parent_path, true, O_PATH);
  if (!parent) return std::move(parent).error();
  const std::string t(target);
  struct stat st{};
  // A whiteout hides the layers below only; an entry of this layer by that name stays.
  if (::fstatat(parent->get(), t.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return Ok{};
  if (errno != ENOENT) return Sys(e, "stat", errno);
  // A char device 0:0 is what overlayfs reads as a whiteout in a lower layer.
  if (::mknodat(parent->get(), t.c_str(), S_IFCHR, makedev(0, 0)) != 0) {
    return Sys(e, "mknod whiteout", errno);
  }
  return Ok{};
}

Result<void> Unpacker::Opaque(const TarEntry& e, std::string_view dir) {
  auto fd = OpenDir(e, dir, true, O_RDONLY);
  if (!fd) return std::move(fd).error();
  if (::fsetxattr(fd->get(), kOpaqueXattr, "y", 1, 0) != 0) {
    return Sys(e, std::string("set ") + kOpaqueXattr, errno);
  }
  return Ok{};
}

Result<void> Unpacker::Entry(TarReader& tar, const TarEntry& e) {
  auto normalized = NormalizeEntryName(e.name);
  if (!normalized) return Refuse(e, normalized.error().message);
  const std::string& name = *normalized;
  if (++entries_ > limits_.max_entries) {
    return Error{ErrorCode::kPayloadTooLarge,
                 what_ + ": more than " + std::to_string(limits_.max_entries) +
                     " entries in a layer (max_entries)"};
  }
  if (e.size > limits_.budget->left) {
    return OverBudget(*limits_.budget, what_ + ": entry " + Quote(e.name));
  }
  if (e.type == EntryType::kCharDevice || e.type == EntryType::kBlockDevice) {
    return Refuse(e, std::string("a device node (") +
                         (e.type == EntryType::kCharDevice ? "char " : "block ") +
                         std::to_string(e.dev_major) + ":" + std::to_string(e.dev_minor) +
                         "): device nodes are refused");
  }
  const DirMeta meta{e.mode, e.uid, e.gid, MtimeOf(e)};
  if (name.empty()) {
    if (e.type != EntryType::kDirectory) return Refuse(e, "the layer's root must be a directory");
    dirs_[name] = meta;
    return Ok{};
  }
  const std::string_view parent_path = ParentOf(name);
  for (std::string_view rest = parent_path; !rest.empty();) {
    const size_t slash = rest.find('/');
    const std::string_view comp = rest.substr(0, slash);
    rest.remove_prefix(slash == std::string_view::npos ? rest.size() : slash + 1);
    if (StartsWith(comp, ".wh..wh.")) return Ok{};  // aufs metadata: not part of the tree
    if (StartsWith(comp, kWhiteoutPrefix)) return Refuse(e, "a whiteout used as a directory");
  }
  const std::string base(BaseOf(name));
  if (base == kOpaqueMarker) return Opaque(e, parent_path);
  if (StartsWith(base, ".wh..wh.")) return Ok{};
  if (StartsWith(base, kWhiteoutPrefix)) {
    return Whiteout(e, parent_path, std::string_view(base).substr(4));
  }
  if (e.type == EntryType::kSymlink) {
    if (e.linkname.empty()) return Refuse(e, "a symlink to nothing");
    if (e.linkname.find('\0') != std::string::npos) return Refuse(e, "a symlink target with NUL");
    if (e.linkname.size() > kMaxPathBytes) return Refuse(e, "a symlink target over 4095 bytes");
  }

  auto parent = OpenDir(e, parent_path, true, O_PATH);
  if (!parent) return std::move(parent).error();
  const int pfd = parent->get();
  if (e.type == EntryType::kHardlink) return Hardlink(e, pfd, base, name);
  auto kept = Clear(e, pfd, base, name, e.type == EntryType::kDirectory);
  if (!kept) return std::move(kept).error();
  switch (e.type) {
    case EntryType::kFile: return File(tar, e, pfd, base);
    case EntryType::kDirectory:
      if (!*kept && ::mkdirat(pfd, base.c_str(), 0700) != 0) return Sys(e, "mkdir", errno);
      dirs_[name] = meta;
      return Ok{};
    case EntryType::kSymlink:
      if (::symlinkat(e.linkname.c_str(), pfd, base.c_str()) != 0) return Sys(e, "symlink", errno);
      return OwnAndTime(e, pfd, base);
    case EntryType::kFifo:
      if (::mknodat(pfd, base.c_str(), S_IFIFO | 0600, 0) != 0) return Sys(e, "mkfifo", errno);
      if (auto ok = OwnAndTime(e, pfd, base); !ok) return ok;
      // Follows a symlink by that name, but the FIFO was just made in a directory only this
      // process writes (the staging directory is 0700 and root's).
      if (::fchmodat(pfd, base.c_str(), e.mode, 0) != 0) return Sys(e, "chmod", errno);
      return Ok{};
    case EntryType::kHardlink:
    case EntryType::kCharDevice:
    case EntryType::kBlockDevice: break;
  }
  return Ok{};
}

Result<void> Unpacker::Finish() {
  // Without an entry for it, the root is as a directory made by tar would be.
  if (!dirs_.count("")) {
    UniqueFd fd = OpenBeneath(root_, "", O_RDONLY | O_DIRECTORY);
    if (!fd || ::fchmod(fd.get(), 0755) != 0) {
      return SysError(ErrorCode::kInternal, what_ + ": chmod the layer's root", errno);
    }
  }
  for (const auto& [path, m] : dirs_) {
    UniqueFd fd = OpenBeneath(root_, path, O_RDONLY | O_DIRECTORY);
    const std::string shown = what_ + ": directory " + Quote(path.empty() ? "/" : path);
    if (!fd) return SysError(ErrorCode::kInternal, shown + ": open", errno);
    if (::fchown(fd.get(), m.uid, m.gid) != 0) return SysError(ErrorCode::kInternal, shown, errno);
    if (::fchmod(fd.get(), m.mode) != 0) return SysError(ErrorCode::kInternal, shown, errno);
    const timespec ts[2] = {m.mtime, m.mtime};
    if (::futimens(fd.get(), ts) != 0) return SysError(ErrorCode::kInternal, shown, errno);
  }
  return Ok{};
}

}  // namespace

Result<void> UnpackLayer(TarReader& tar, int root, const std::string& what,
                         const UnpackLimits& limits) {
  Unpacker unpacker(root, what, limits);
  for (;;) {
    auto entry = tar.Next();
    if (!entry) return std::move(entry).error();
    if (!*entry) break;
    if (auto ok = unpacker.Entry(tar, **entry); !ok) return ok;
  }
  return unpacker.Finish();
}

}  // namespace sandstream::image
