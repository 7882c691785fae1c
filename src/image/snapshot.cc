// Store::LayerFromDirectory: a layer of a directory tree that a sandbox may still be changing.
// The tree is walked in name order, never through a symlink, and written twice at once: as the
// canonical tar that names the layer (hashed, not kept) and as the copy that becomes it. A
// sparse file's holes stay holes in the copy (the tar, as any tar, spells them out as zeros).
#include <fcntl.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "image/digest.h"
#include "image/import.h"
#include "image/store.h"
#include "image/tar.h"
#include "image/tree.h"
#include "image/unpack.h"

namespace sandstream::image {
namespace {

constexpr uint32_t kNobody = 65534;

// Hashes the tar and counts it against the budget.
class HashSink : public Sink {
 public:
  explicit HashSink(Budget& budget) : budget_(budget) {}
  Result<void> Write(std::string_view data) override {
    if (data.size() > budget_.left) return OverBudget(budget_, "snapshot");
    budget_.left -= data.size();
    hash_.Update(data);
    bytes_ += data.size();
    return Ok{};
  }
  std::string Digest() const { return hash_.Digest(); }
  uint64_t bytes() const { return bytes_; }

 private:
  Budget& budget_;
  Sha256 hash_;
  uint64_t bytes_ = 0;
};

std::string Join(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : dir + "/" + name;
}

class Snapshot {
 public:
  Snapshot(int src, int dst, uint32_t uid_base, uint32_t uid_count, uint64_t max_entries,
           uint64_t max_file_bytes, Budget& budget)
      : src_(src),
        dst_(dst),
        uid_base_(uid_base),
        uid_count_(uid_count),
        max_entries_(max_entries),
        max_file_bytes_(max_file_bytes),
        sink_(budget),
        tar_(sink_) {}

  Result<void> Dir(const std::string& path);
  Result<void> Finish() { return tar_.Finish(); }
  std::string Digest() const { return sink_.Digest(); }
  uint64_t bytes() const { return sink_.bytes(); }

 private:
  uint32_t Shift(uint32_t id) const {
    return id >= uid_base_ && id - uid_base_ < uid_count_ ? id - uid_base_ : kNobody;
  }
  Error Bad(const std::string& path, std::string_view why) const {
    return Error{ErrorCode::kInvalidRequest, "snapshot: " + Quote(path) + ": " + std::string(why)};
  }
  Error Changed(const std::string& path) const {
    return Error{ErrorCode::kConflict,
                 "snapshot: " + Quote(path) + " changed while it was read; try again"};
  }
  Error Sys(const std::string& path, std::string_view step, int err) const {
    return SysError(ErrorCode::kInternal, "snapshot: " + Quote(path) + ": " + std::string(step),
                    err);
  }
  TarEntry Header(const std::string& name, EntryType type, const struct stat& st) const {
    TarEntry e;
    e.name = name;
    e.type = type;
    e.mode = st.st_mode & 07777;
    e.uid = Shift(st.st_uid);
    e.gid = Shift(st.st_gid);
    e.mtime = st.st_mtim.tv_sec;
    return e;
  }
  // A whiteout or opaque marker: a fixed header, so that it hashes the same however made.
  Result<void> Marker(const std::string& name) {
    TarEntry e;
    e.name = name;
    return tar_.WriteHeader(e);
  }
  Result<void> Metadata(int fd, const TarEntry& e, const std::string& path) {
    if (::fchown(fd, e.uid, e.gid) != 0) return Sys(path, "chown", errno);
    if (::fchmod(fd, e.mode) != 0) return Sys(path, "chmod", errno);
    const timespec ts[2] = {{e.mtime, 0}, {e.mtime, 0}};
    if (::futimens(fd, ts) != 0) return Sys(path, "set times", errno);
    return Ok{};
  }
  Result<void> Subdir(int sdir, int ddir, const std::string& path, const std::string& name);
  Result<void> File(int sdir, int ddir, const std::string& path, const std::string& name);
  Result<void> Other(int sdir, int ddir, const std::string& dir, const std::string& name,
                     const struct stat& st);
  // `size` bytes of `in` into the tar and into `out`, holes skipped in `out`.
  Result<void> Copy(int in, int out, uint64_t size, const std::string& path);

  int src_;
  int dst_;
  uint32_t uid_base_;
  uint32_t uid_count_;
  uint64_t max_entries_;
  uint64_t max_file_bytes_;
  uint64_t entries_ = 0;
  uint64_t file_bytes_ = 0;  // the files' sizes so far, holes included
  HashSink sink_;
  TarWriter tar_;
  std::map<std::pair<dev_t, ino_t>, std::string> linked_;  // files with more links: first name
};

Result<void> Snapshot::Dir(const std::string& dir) {
  std::vector<std::string> names;
  {
    UniqueFd fd = OpenBeneath(src_, dir, O_RDONLY | O_DIRECTORY);
    if (!fd) return errno == ENOENT || errno == ELOOP ? Changed(dir) : Sys(dir, "open", errno);
    auto listed = ListDir(fd.get());
    if (!listed) return Sys(dir, "list", errno);
    names = std::move(*listed);
  }
  std::sort(names.begin(), names.end());
  // Open again after each subdirectory: no chain of fds as deep as the tree.
  UniqueFd sdir, ddir;
  for (const auto& name : names) {
    const std::string path = Join(dir, name);
    // Room for a directory's "/" and a whiteout's ".wh.": the tar names stay within the limit.
    if (path.size() + 4 > kMaxPathBytes) return Bad(path, "path longer than 4091 bytes");
    if (name.rfind(kWhiteoutPrefix, 0) == 0) {
      return Bad(path, "a name starting \".wh.\", which layers keep for whiteouts");
    }
    if (!sdir) sdir = OpenBeneath(src_, dir, O_PATH | O_DIRECTORY);
    if (!ddir) ddir = OpenBeneath(dst_, dir, O_PATH | O_DIRECTORY);
    if (!sdir) return Changed(dir);
    if (!ddir) return Sys(dir, "open the copy", errno);
    struct stat st{};
    if (::fstatat(sdir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // gone since the listing
      return Sys(path, "stat", errno);
    }
    if (S_ISSOCK(st.st_mode)) continue;  // a tar cannot hold one
    if (++entries_ > max_entries_) {
      return Error{ErrorCode::kPayloadTooLarge, "snapshot: more than " +
                                                    std::to_string(max_entries_) +
                                                    " entries (max_entries)"};
    }
    Result<void> ok;
    if (S_ISDIR(st.st_mode)) {
      ok = Subdir(sdir.get(), ddir.get(), path, name);
      sdir.reset();
      ddir.reset();
    } else if (S_ISREG(st.st_mode)) {
      ok = File(sdir.get(), ddir.get(), path, name);
    } else {
      ok = Other(sdir.get(), ddir.get(), dir, name, st);
    }
    if (!ok) return ok;
  }
  return Ok{};
}

Result<void> Snapshot::Subdir(int sdir, int ddir, const std::string& path,
                              const std::string& name) {
  TarEntry e;
  bool opaque = false;
  {
    UniqueFd fd = OpenBeneath(sdir, name, O_RDONLY | O_DIRECTORY);
    if (!fd) return Changed(path);
    struct stat st{};
    if (::fstat(fd.get(), &st) != 0) return Sys(path, "stat", errno);
    e = Header(path + "/", EntryType::kDirectory, st);
    for (const char* key : {kOpaqueXattr, "trusted.overlay.opaque"}) {
      char value[2];
      opaque = opaque || (::fgetxattr(fd.get(), key, value, sizeof value) == 1 && value[0] == 'y');
    }
  }
  if (auto ok = tar_.WriteHeader(e); !ok) return ok;
  if (::mkdirat(ddir, name.c_str(), 0700) != 0) return Sys(path, "mkdir", errno);
  if (opaque) {
    if (auto ok = Marker(path + "/" + kOpaqueMarker); !ok) return ok;
  }
  if (auto ok = Dir(path); !ok) return ok;
  UniqueFd copy = OpenBeneath(dst_, path, O_RDONLY | O_DIRECTORY);
  if (!copy) return Sys(path, "open the copy", errno);
  if (opaque && ::fsetxattr(copy.get(), kOpaqueXattr, "y", 1, 0) != 0) {
    return Sys(path, "set opaque", errno);
  }
  return Metadata(copy.get(), e, path);
}

Result<void> Snapshot::File(int sdir, int ddir, const std::string& path, const std::string& name) {
  // O_NONBLOCK: a FIFO swapped in since the stat must not hang the walk.
  UniqueFd in(::openat(sdir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!in) return errno == ENOENT || errno == ELOOP ? Changed(path) : Sys(path, "open", errno);
  struct stat st{};
  if (::fstat(in.get(), &st) != 0) return Sys(path, "stat", errno);
  if (!S_ISREG(st.st_mode)) return Changed(path);
  if (st.st_nlink > 1) {
    const auto key = std::make_pair(st.st_dev, st.st_ino);
    if (auto it = linked_.find(key); it != linked_.end()) {
      TarEntry e = Header(path, EntryType::kHardlink, st);
      e.linkname = it->second;
      if (auto ok = tar_.WriteHeader(e); !ok) return ok;
      const size_t slash = it->second.rfind('/');
      const std::string& first = it->second;
      UniqueFd tdir = OpenBeneath(dst_, slash == std::string::npos ? "" : first.substr(0, slash),
                                  O_PATH | O_DIRECTORY);
      const std::string tbase = slash == std::string::npos ? first : first.substr(slash + 1);
      if (!tdir || ::linkat(tdir.get(), tbase.c_str(), ddir, name.c_str(), 0) != 0) {
        return Sys(path, "link", errno);
      }
      return Ok{};
    }
    linked_.emplace(key, path);
  }
  TarEntry e = Header(path, EntryType::kFile, st);
  e.size = static_cast<uint64_t>(st.st_size);
  file_bytes_ += e.size;
  if (file_bytes_ > max_file_bytes_) {
    return Error{ErrorCode::kPayloadTooLarge,
                 "snapshot: the sandbox's files add up to more than " +
                     std::to_string(max_file_bytes_ >> 20) +
                     " MiB, its disk_mb (sparse files count at their full size) at " + Quote(path)};
  }
  // security.capability only; a v3 one names the root it is for, shifted like the owners.
  char cap[sizeof(vfs_ns_cap_data)];
  const ssize_t cap_len = ::fgetxattr(in.get(), "security.capability", cap, sizeof cap);
  if (cap_len > 0) {
    if (static_cast<size_t>(cap_len) == sizeof(vfs_ns_cap_data)) {
      vfs_ns_cap_data data;
      std::memcpy(&data, cap, sizeof data);
      if ((data.magic_etc & VFS_CAP_REVISION_MASK) == VFS_CAP_REVISION_3) {
        data.rootid = Shift(data.rootid);
        std::memcpy(cap, &data, sizeof data);
      }
    }
    e.xattrs.emplace_back("security.capability", std::string(cap, static_cast<size_t>(cap_len)));
  }
  if (auto ok = tar_.WriteHeader(e); !ok) return ok;
  UniqueFd out(::openat(ddir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                        0600));
  if (!out) return Sys(path, "create the copy", errno);
  if (auto ok = Copy(in.get(), out.get(), e.size, path); !ok) return ok;
  if (auto ok = tar_.Pad(e.size); !ok) return ok;
  if (::fchown(out.get(), e.uid, e.gid) != 0) return Sys(path, "chown", errno);
  if (::fchmod(out.get(), e.mode) != 0) return Sys(path, "chmod", errno);
  for (const auto& [key, value] : e.xattrs) {
    if (::fsetxattr(out.get(), key.c_str(), value.data(), value.size(), 0) != 0) {
      return Sys(path, "set " + key, errno);
    }
  }
  const timespec ts[2] = {{e.mtime, 0}, {e.mtime, 0}};
  if (::futimens(out.get(), ts) != 0) return Sys(path, "set times", errno);
  return Ok{};
}

Result<void> Snapshot::Copy(int in, int out, uint64_t size, const std::string& path) {
  static const std::vector<char> kZeros(128 * 1024, '\0');
  std::vector<char> buf(128 * 1024);
  // The copy is as long as the file from the start: what is never written stays a hole.
  if (::ftruncate(out, static_cast<off_t>(size)) != 0) return Sys(path, "size the copy", errno);
  for (uint64_t at = 0; at < size;) {
    // The next data at or after `at` (the file's end when only a hole is left); a filesystem
    // that cannot tell says the data goes on to the end.
    off_t data = ::lseek(in, static_cast<off_t>(at), SEEK_DATA);
    if (data < 0 && errno == ENXIO) data = static_cast<off_t>(size);
    if (data < 0) return Sys(path, "seek data", errno);
    const uint64_t data_at = std::min<uint64_t>(static_cast<uint64_t>(data), size);
    for (; at < data_at;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(data_at - at, kZeros.size()));
      if (auto ok = tar_.WriteData(std::string_view(kZeros.data(), n)); !ok) return ok;
      at += n;
    }
    if (at == size) break;
    off_t hole = ::lseek(in, static_cast<off_t>(at), SEEK_HOLE);
    if (hole < 0 && errno == ENXIO) return Changed(path);  // shorter than it was
    if (hole < 0) return Sys(path, "seek hole", errno);
    const uint64_t end = std::min<uint64_t>(static_cast<uint64_t>(hole), size);
    if (end <= at) return Changed(path);
    while (at < end) {
      const ssize_t n =
          ::pread(in, buf.data(), std::min<uint64_t>(end - at, buf.size()), static_cast<off_t>(at));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Sys(path, "read", errno);
      if (n == 0) return Changed(path);  // shorter than it was
      const std::string_view chunk(buf.data(), static_cast<size_t>(n));
      if (auto ok = tar_.WriteData(chunk); !ok) return ok;
      for (size_t done = 0; done < chunk.size();) {
        const ssize_t w =
            ::pwrite(out, chunk.data() + done, chunk.size() - done, static_cast<off_t>(at + done));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return Sys(path, "write the copy", errno);
        done += static_cast<size_t>(w);
      }
      at += static_cast<uint64_t>(n);
    }
  }
  return Ok{};
}

Result<void> Snapshot::Other(int sdir, int ddir, const std::string& dir, const std::string& name,
                             const struct stat& st) {
  const std::string path = Join(dir, name);
  if (S_ISCHR(st.st_mode) && st.st_rdev == 0) {
    if (auto ok = Marker(Join(dir, kWhiteoutPrefix + name)); !ok) return ok;
    if (::mknodat(ddir, name.c_str(), S_IFCHR, 0) != 0) return Sys(path, "mknod whiteout", errno);
    return Ok{};
  }
  TarEntry e;
  if (S_ISLNK(st.st_mode)) {
    e = Header(path, EntryType::kSymlink, st);
    std::string target(kMaxPathBytes + 1, '\0');
    const ssize_t n = ::readlinkat(sdir, name.c_str(), target.data(), target.size());
    if (n < 0) {
      return errno == ENOENT || errno == EINVAL ? Changed(path) : Sys(path, "readlink", errno);
    }
    if (n == 0 || static_cast<size_t>(n) > kMaxPathBytes) {
      return Bad(path, "an unusable link target");
    }
    target.resize(static_cast<size_t>(n));
    e.linkname = target;
    if (::symlinkat(target.c_str(), ddir, name.c_str()) != 0) return Sys(path, "symlink", errno);
  } else if (S_ISFIFO(st.st_mode)) {
    e = Header(path, EntryType::kFifo, st);
    if (::mknodat(ddir, name.c_str(), S_IFIFO | 0600, 0) != 0) return Sys(path, "mkfifo", errno);
    // Follows a symlink by that name, but the copy is in a directory only this process writes.
    if (::fchmodat(ddir, name.c_str(), e.mode, 0) != 0) return Sys(path, "chmod", errno);
  } else {
    return Bad(path, "a device node: layers hold none");
  }
  if (auto ok = tar_.WriteHeader(e); !ok) return ok;
  if (::fchownat(ddir, name.c_str(), e.uid, e.gid, AT_SYMLINK_NOFOLLOW) != 0) {
    return Sys(path, "chown", errno);
  }
  const timespec ts[2] = {{e.mtime, 0}, {e.mtime, 0}};
  if (::utimensat(ddir, name.c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0) {
    return Sys(path, "set times", errno);
  }
  return Ok{};
}

}  // namespace

Result<LayerRef> Store::LayerFromDirectory(const std::string& dir, uint32_t uid_base,
                                           uint32_t uid_count, uint64_t max_file_bytes) {
  UniqueFd src(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!src) return SysError(ErrorCode::kInternal, "snapshot: open " + dir, errno);
  auto staged = StagedTree::Make(*this, "snapshot");
  if (!staged) return std::move(staged).error();
  Budget budget = NewBudget();
  Snapshot snapshot(src.get(), (*staged)->fd(), uid_base, uid_count, limits_.max_entries,
                    max_file_bytes, budget);
  if (auto ok = snapshot.Dir(""); !ok) return std::move(ok).error();
  if (auto ok = snapshot.Finish(); !ok) return std::move(ok).error();
  if (::fchmod((*staged)->fd(), 0755) != 0) {
    return SysError(ErrorCode::kInternal, "snapshot: chmod", errno);
  }
  const std::string diff_id = snapshot.Digest();
  const bool present = PinLayer(diff_id);
  Result<void> committed;
  if (!present) {
    if (::syncfs((*staged)->fd()) != 0) {
      committed = SysError(ErrorCode::kInternal, "snapshot: syncfs", errno);
    } else {
      committed = (*staged)->Commit(layers_.get(), std::string(DigestHex(diff_id)));
    }
  }
  Unpin(diff_id);
  if (!committed) return std::move(committed).error();
  return LayerRef{diff_id, diff_id, snapshot.bytes()};
}

}  // namespace sandstream::image
