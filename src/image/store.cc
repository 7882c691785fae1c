// The store's directories, single-layer imports, lookups and collection. Archives are read in
// archive.cc, directory trees in snapshot.cc.
#include "image/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "image/digest.h"
#include "image/import.h"
#include "image/tree.h"
#include "platform/fd.h"

namespace sandstream::image {
namespace {

// mkdir -p of `path` (absolute), then an fd of it.
Result<UniqueFd> MakeDir(const std::string& path, mode_t mode) {
  for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (::mkdir(prefix.c_str(), slash == std::string::npos ? mode : 0755) != 0 &&
        errno != EEXIST) {
      return SysError(ErrorCode::kInternal, "image store: mkdir " + prefix, errno);
    }
    if (slash == std::string::npos) break;
  }
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return SysError(ErrorCode::kInternal, "image store: open " + path, errno);
  return fd;
}

}  // namespace

Result<std::unique_ptr<Store>> Store::Open(std::string root, StoreLimits limits) {
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  if (root.empty() || root[0] != '/') {
    return Error{ErrorCode::kInternal, "image store: the root must be an absolute path"};
  }
  auto blobs = MakeDir(root + "/blobs/sha256", 0755);
  if (!blobs) return std::move(blobs).error();
  auto layers = MakeDir(root + "/layers/sha256", 0755);
  if (!layers) return std::move(layers).error();
  // Staging directories are private: the unpacker relies on nobody else writing there.
  auto tmp = MakeDir(root + "/tmp", 0700);
  if (!tmp) return std::move(tmp).error();
  if (::fchmod(tmp->get(), 0700) != 0) {
    return SysError(ErrorCode::kInternal, "image store: chmod " + root + "/tmp", errno);
  }
  auto pulled = MakeDir(root + "/pulled", 0700);
  if (!pulled) return std::move(pulled).error();
  return std::unique_ptr<Store>(new Store(std::move(root), limits, std::move(*blobs),
                                          std::move(*layers), std::move(*tmp), std::move(*pulled)));
}

std::string Store::PulledName(std::string_view registry, std::string_view digest) {
  return std::string(DigestHex(Sha256Of(std::string(registry) + "\n" + std::string(digest))));
}

std::string Store::PulledLayer(const std::string& name) const {
  UniqueFd fd(::openat(pulled_.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return "";
  char buf[128];
  const ssize_t n = ::pread(fd.get(), buf, sizeof buf, 0);
  if (n <= 0) return "";
  std::string diff_id(buf, static_cast<size_t>(n));
  return ValidDigest(diff_id) ? diff_id : "";
}

bool Store::PinLayer(const std::string& diff_id) {
  std::lock_guard lock(mu_);
  pinned_.insert(diff_id);
  return HasLayer(diff_id);
}

void Store::Unpin(const std::string& digest) {
  std::lock_guard lock(mu_);
  if (auto it = pinned_.find(digest); it != pinned_.end()) pinned_.erase(it);
}

std::string Store::LayerPath(std::string_view diff_id) const {
  if (!ValidDigest(diff_id)) return "";
  return root_ + "/layers/sha256/" + std::string(DigestHex(diff_id));
}

bool Store::HasLayer(std::string_view diff_id) const {
  if (!ValidDigest(diff_id)) return false;
  struct stat st{};
  const std::string hex(DigestHex(diff_id));
  return ::fstatat(layers_.get(), hex.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
         S_ISDIR(st.st_mode);
}

Result<std::string> Store::ReadBlob(std::string_view digest) const {
  if (!ValidDigest(digest)) {
    return Error{ErrorCode::kInvalidRequest, "'" + std::string(digest) + "' is not a digest"};
  }
  const std::string hex(DigestHex(digest));
  UniqueFd fd(::openat(blobs_.get(), hex.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    const ErrorCode code = errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kInternal;
    return SysError(code, "blob " + std::string(digest), errno);
  }
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) return SysError(ErrorCode::kInternal, "blob stat", errno);
  FileSource in(fd.get(), 0, static_cast<uint64_t>(st.st_size), "blob " + std::string(digest));
  return ReadAll(in, static_cast<size_t>(st.st_size), "blob " + std::string(digest));
}

Result<LayerRef> Store::ImportLayer(int blob_fd, std::string_view media_type,
                                    std::string_view digest, std::string_view diff_id,
                                    const Progress& progress, Budget* budget) {
  if (!ValidDigest(digest)) {
    return Error{ErrorCode::kInvalidRequest, "layer digest '" + std::string(digest) +
                                                 "' is not a sha256 digest"};
  }
  if (!ValidDigest(diff_id)) {
    return Error{ErrorCode::kInvalidRequest, "layer diff_id '" + std::string(diff_id) +
                                                 "' is not a sha256 digest"};
  }
  const std::string what = "layer " + std::string(digest);
  auto compression = LayerCompression(media_type);
  if (!compression) {
    return Error{compression.error().code, what + ": " + compression.error().message};
  }
  struct stat st{};
  if (::fstat(blob_fd, &st) != 0) return SysError(ErrorCode::kInternal, what + ": stat", errno);
  if (!S_ISREG(st.st_mode)) return Error{ErrorCode::kInternal, what + ": not a regular file"};
  Budget own = NewBudget();
  Import import(*this, progress, budget ? *budget : own);
  const LayerSpec spec{std::string(digest), std::string(diff_id), *compression, what, ""};
  auto ref = import.Layer(blob_fd, 0, static_cast<uint64_t>(st.st_size), spec);
  if (!ref) return ref;
  if (auto ok = import.Commit(); !ok) return std::move(ok).error();
  return ref;
}

Result<UniqueFd> Store::NewArchiveFile() const {
  UniqueFd fd(::openat(tmp_.get(), ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!fd) return SysError(ErrorCode::kInternal, "image store: open an archive file in tmp/", errno);
  return fd;
}

Result<void> Store::Collect(const std::set<std::string>& keep) {
  // Layers go first to tmp/ (one rename, under the lock that imports pin under), then away.
  std::vector<std::string> doomed;
  {
    std::lock_guard lock(mu_);
    auto layers = ListDir(layers_.get());
    if (!layers) {
      return Error{layers.error().code, "image store: layers: " + layers.error().message};
    }
    for (const auto& hex : *layers) {
      const std::string diff_id = "sha256:" + hex;
      if (keep.count(diff_id) || pinned_.count(diff_id)) continue;
      auto name = MakeRandomDir(tmp_.get(), "image store: collect");
      if (!name) return std::move(name).error();
      if (::renameat(layers_.get(), hex.c_str(), tmp_.get(), name->c_str()) != 0) {
        return SysError(ErrorCode::kInternal, "image store: collect layer " + diff_id, errno);
      }
    }
    auto pulled = ListDir(pulled_.get());
    if (!pulled) {
      return Error{pulled.error().code, "image store: pulled: " + pulled.error().message};
    }
    for (const auto& name : *pulled) {
      const std::string diff_id = PulledLayer(name);
      if (!diff_id.empty() && HasLayer(diff_id)) continue;
      if (::unlinkat(pulled_.get(), name.c_str(), 0) != 0 && errno != ENOENT) {
        return SysError(ErrorCode::kInternal, "image store: collect pulled/" + name, errno);
      }
    }
    auto blobs = ListDir(blobs_.get());
    if (!blobs) return Error{blobs.error().code, "image store: blobs: " + blobs.error().message};
    for (const auto& hex : *blobs) {
      if (keep.count("sha256:" + hex)) continue;
      if (::unlinkat(blobs_.get(), hex.c_str(), 0) != 0 && errno != ENOENT) {
        return SysError(ErrorCode::kInternal, "image store: collect blob sha256:" + hex, errno);
      }
    }
    auto tmp = ListDir(tmp_.get());
    if (!tmp) return Error{tmp.error().code, "image store: tmp: " + tmp.error().message};
    for (auto& name : *tmp) {
      if (!staging_.count(name)) doomed.push_back(std::move(name));
    }
    // Ours now: no import will use these names, no other Collect will take them.
    staging_.insert(doomed.begin(), doomed.end());
  }
  Result<void> result;
  for (const auto& name : doomed) {
    if (auto ok = RemoveTree(tmp_.get(), name, "tmp/" + name); !ok && result.ok()) result = ok;
    std::lock_guard lock(mu_);
    staging_.erase(name);
  }
  return result;
}

}  // namespace sandstream::image
