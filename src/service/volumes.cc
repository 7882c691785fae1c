#include "service/volumes.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include <boost/json.hpp>

#include "base/async.h"
#include "base/ids.h"
#include "base/log.h"
#include "platform/unique_fd.h"
#include "sandbox/runtime.h"

extern char** environ;

namespace sandstream {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

constexpr const char* kImage = "/volume.img";
constexpr const char* kMount = "/fs";

// mkfs.ext4 on `image`, its root directory the sandbox user's (1000), no blocks kept for root
// (a sandbox's root is no host's), its error output in the error.
Result<void> MakeFilesystem(const std::string& image) {
  const std::string owner = "root_owner=" + std::to_string(sandbox::kSandboxUserId) + ":" +
                            std::to_string(sandbox::kSandboxUserId);
  const char* argv[] = {"mkfs.ext4",   "-q", "-F",         "-m",          "0",    "-E",
                        owner.c_str(), "-L", "sandstream", image.c_str(), nullptr};
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0)
    return SysError(ErrorCode::kInternal, "volume: pipe", errno);
  UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), 2);
  // mkfs lives in sbin, which a daemon's PATH may lack.
  std::vector<std::string> env_text = {"PATH=/usr/sbin:/sbin:/usr/bin:/bin", "LC_ALL=C"};
  std::vector<char*> env;
  env.reserve(env_text.size() + 1);
  for (auto& e : env_text) env.push_back(e.data());
  env.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, "/usr/sbin/mkfs.ext4", &actions, nullptr,
                               const_cast<char**>(argv), env.data());
  posix_spawn_file_actions_destroy(&actions);
  write_end.reset();
  if (rc != 0) return SysError(ErrorCode::kInternal, "volume: run mkfs.ext4", rc);
  std::string output;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(read_end.get(), buf, sizeof buf);
    if (n > 0 && output.size() < 4096) output.append(buf, static_cast<size_t>(n));
    if (n > 0 || (n < 0 && errno == EINTR)) continue;
    break;
  }
  int status = 0;
  pid_t waited = -1;
  do {
    waited = ::waitpid(pid, &status, 0);
  } while (waited < 0 && errno == EINTR);
  if (waited < 0) return SysError(ErrorCode::kInternal, "volume: wait for mkfs.ext4", errno);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    while (!output.empty() && output.back() == '\n') output.pop_back();
    return Error{ErrorCode::kInternal, "volume: mkfs.ext4 failed: " + output};
  }
  return Ok{};
}

bool IsMountRoot(const std::string& path) {
  struct statx stx {};
  return ::statx(AT_FDCWD, path.c_str(), AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &stx) == 0 &&
         (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
         (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

// The loop device an earlier daemon attached to `image` (a sandbox may still mount its
// filesystem), open: mounting that device again gives the same filesystem, where a second
// device would give a second, corrupting, one. Matched by the image's device and inode (its
// path may read otherwise now), and held open until mounted, so it cannot be freed and given
// to another image meanwhile.
std::optional<std::pair<std::string, UniqueFd>> AttachedLoop(const std::string& image) {
  struct stat st {};
  if (::stat(image.c_str(), &st) != 0) return std::nullopt;
  DIR* dir = ::opendir("/sys/block");
  if (!dir) return std::nullopt;
  std::optional<std::pair<std::string, UniqueFd>> found;
  while (dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (!name.starts_with("loop")) continue;
    std::string device = "/dev/" + name;
    UniqueFd loop(::open(device.c_str(), O_RDONLY | O_CLOEXEC));
    loop_info64 info{};
    if (!loop || ::ioctl(loop.get(), LOOP_GET_STATUS64, &info) != 0) continue;  // unbound
    if (info.lo_device == st.st_dev && info.lo_inode == st.st_ino) {
      found.emplace(std::move(device), std::move(loop));
      break;
    }
  }
  ::closedir(dir);
  return found;
}

// A free loop device attached to `image`, released when its filesystem is unmounted.
Result<UniqueFd> AttachLoop(const std::string& image, std::string* device) {
  UniqueFd file(::open(image.c_str(), O_RDWR | O_CLOEXEC));
  if (!file) return SysError(ErrorCode::kInternal, "volume: open " + image, errno);
  UniqueFd control(::open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (!control) return SysError(ErrorCode::kInternal, "volume: open /dev/loop-control", errno);
  int err = 0;
  // Another process may take the free device between the two calls: asked again.
  for (int attempt = 0; attempt < 16; ++attempt) {
    const int n = ::ioctl(control.get(), LOOP_CTL_GET_FREE);
    if (n < 0) return SysError(ErrorCode::kInternal, "volume: loop: get free device", errno);
    *device = "/dev/loop" + std::to_string(n);
    UniqueFd loop(::open(device->c_str(), O_RDWR | O_CLOEXEC));
    if (!loop) return SysError(ErrorCode::kInternal, "volume: open " + *device, errno);
    loop_config config{};
    config.fd = static_cast<uint32_t>(file.get());
    config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
    if (::ioctl(loop.get(), LOOP_CONFIGURE, &config) == 0) return loop;
    err = errno;
    if (err != EBUSY) break;
  }
  return SysError(ErrorCode::kInternal, "volume: loop: attach " + image, err);
}

// The volume in `dir` mounted at dir/fs, unless it is.
Result<void> Mount(const std::string& dir) {
  const std::string target = dir + kMount;
  if (IsMountRoot(target)) return Ok{};
  const std::string image = dir + kImage;
  std::string device;
  UniqueFd loop;  // held until mounted: the autoclear device goes with its last holder
  if (auto attached = AttachedLoop(image)) {
    device = std::move(attached->first);
    loop = std::move(attached->second);
  } else {
    auto made = AttachLoop(image, &device);
    if (!made) return std::move(made).error();
    loop = std::move(*made);
  }
  if (::mount(device.c_str(), target.c_str(), "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, nullptr) !=
      0) {
    return SysError(ErrorCode::kInternal, "volume: mount " + device + " at " + target, errno);
  }
  return Ok{};
}

void Unmount(const std::string& dir) {
  const std::string target = dir + kMount;
  // Detached: a file the daemon still serves from it keeps it until closed; sandboxes hold
  // mounts of their own.
  if (IsMountRoot(target) && ::umount2(target.c_str(), MNT_DETACH) != 0) {
    log::Warn("volume: unmount failed", {{"path", target}, {"errno", std::to_string(errno)}});
  }
}

Result<void> Make(const std::string& dir, int64_t size_mb) {
  if (::mkdir(dir.c_str(), 0700) != 0) {
    return SysError(ErrorCode::kInternal, "volume: mkdir " + dir, errno);
  }
  const std::string image = dir + kImage;
  {
    UniqueFd file(::open(image.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600));
    if (!file) return SysError(ErrorCode::kInternal, "volume: create " + image, errno);
    if (::ftruncate(file.get(), static_cast<off_t>(size_mb) << 20) != 0) {
      return SysError(ErrorCode::kInternal, "volume: size " + image, errno);
    }
  }
  if (auto r = MakeFilesystem(image); !r) return r;
  if (::mkdir((dir + kMount).c_str(), 0700) != 0) {
    return SysError(ErrorCode::kInternal, "volume: mkdir " + dir + kMount, errno);
  }
  if (auto r = Mount(dir); !r) return r;
  // A volume starts empty: e2fsck makes lost+found again if it ever needs one.
  (void)::rmdir((dir + kMount + "/lost+found").c_str());
  return Ok{};
}

void Remove(const std::string& dir) {
  Unmount(dir);
  ::unlink((dir + kImage).c_str());
  ::rmdir((dir + kMount).c_str());
  ::rmdir(dir.c_str());
}

std::string Text(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->as_string()) : std::string();
}

}  // namespace

Volumes::Volumes(std::string dir, const std::string& node_id, Store& store,
                 const QuotaLedger& quotas, asio::thread_pool& pool)
    : dir_(std::move(dir)),
      id_prefix_(node_id.empty() ? "vol_" : "vol_" + node_id + "_"),
      store_(store),
      quotas_(quotas),
      pool_(pool) {}

bool Volumes::ValidName(std::string_view name) {
  if (name.empty() || name.size() > 63 || name.starts_with("vol_")) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return false;
    }
  }
  return name != "." && name != "..";
}

json::object Volumes::Json(const Volume& v) {
  return {{"id", v.id},
          {"name", v.name},
          {"tenant", v.tenant.empty() ? json::value(nullptr) : json::value(v.tenant)},
          {"size_mb", v.size_mb},
          {"created_at", FormatRfc3339(v.created_at)}};
}

void Volumes::Load() {
  if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) {
    log::Error("volumes: cannot make their directory",
               {{"path", dir_}, {"errno", std::to_string(errno)}});
  }
  auto rows = store_.Volumes();
  if (!rows) {
    log::Error("volumes: cannot read them", {{"error", rows.error().message}});
    return;
  }
  std::set<std::string, std::less<>> recorded;
  bool all_read = true;  // else no directory is taken for an orphan
  for (const std::string& row : *rows) {
    boost::system::error_code ec;
    json::value v = json::parse(row, ec);
    if (ec || !v.is_object()) {
      all_read = false;
      continue;
    }
    const json::object& o = v.as_object();
    Volume vol{Text(o, "id"), Text(o, "name"), Text(o, "tenant"), 0,
               ParseRfc3339(Text(o, "created_at")).value_or(SystemTime{})};
    if (const json::value* s = o.if_contains("size_mb"); s && s->is_int64()) {
      vol.size_mb = s->as_int64();
    }
    if (vol.id.empty()) {
      all_read = false;
      continue;
    }
    recorded.insert(vol.id);
    if (auto r = Mount(DirOf(vol.id)); !r) {
      // Kept: its data is on disk, and the next start tries again; meanwhile a sandbox or a
      // request for it hears that it is not mounted (Root).
      log::Error("volume cannot be mounted", {{"volume", vol.id}, {"error", r.error().message}});
    } else {
      vol.mounted = true;
    }
    volumes_.emplace(vol.id, std::move(vol));
  }
  // What a daemon that died making or deleting a volume left without a record.
  DIR* dir = all_read ? ::opendir(dir_.c_str()) : nullptr;
  if (dir) {
    std::vector<std::string> orphans;
    while (dirent* e = ::readdir(dir)) {
      const std::string name = e->d_name;
      if (name.starts_with("vol_") && !recorded.contains(name)) orphans.push_back(name);
    }
    ::closedir(dir);
    for (const std::string& id : orphans) {
      log::Warn("removing a volume left half made or half deleted", {{"volume", id}});
      Remove(DirOf(id));
    }
  }
}

void Volumes::UnmountAll() {
  for (const auto& [id, v] : volumes_) Unmount(DirOf(id));
}

const Volume* Volumes::ByName(std::string_view tenant, std::string_view name) const {
  for (const auto& [id, v] : volumes_) {
    if (v.tenant == tenant && v.name == name) return &v;
  }
  return nullptr;
}

const Volume* Volumes::Find(std::string_view tenant, bool admin,
                            std::string_view id_or_name) const {
  const Volume* v = nullptr;
  if (auto it = volumes_.find(id_or_name); it != volumes_.end()) {
    if (admin || it->second.tenant == tenant) v = &it->second;
  } else {
    v = ByName(tenant, id_or_name);
  }
  // One being deleted is gone already for anything new.
  return v && !deleting_.contains(v->id) ? v : nullptr;
}

std::vector<const Volume*> Volumes::List(std::string_view tenant, bool admin) const {
  std::vector<const Volume*> out;
  for (const auto& [id, v] : volumes_) {
    if ((admin || v.tenant == tenant) && !deleting_.contains(id)) out.push_back(&v);
  }
  std::sort(out.begin(), out.end(),
            [](const Volume* a, const Volume* b) { return a->created_at < b->created_at; });
  return out;
}

int64_t Volumes::StorageMb(std::string_view tenant) const {
  int64_t used = 0;
  for (const auto& [id, v] : volumes_) {
    if (v.tenant == tenant) used += v.size_mb;
  }
  for (const auto& [key, size_mb] : making_) {
    if (key.first == tenant) used += size_mb;
  }
  return used;
}

Result<void> Volumes::CheckQuota(std::string_view tenant, int64_t adding_mb) const {
  const Tenant* t = quotas_.TenantOf(tenant);
  if (!t || t->quotas.volume_storage_mb <= 0) return Ok{};
  const int64_t used = StorageMb(tenant);
  if (used + adding_mb > t->quotas.volume_storage_mb) {
    return Error{ErrorCode::kQuotaExceeded,
                 "tenant '" + std::string(tenant) + "' would pass its quota volume_storage_mb " +
                     std::to_string(t->quotas.volume_storage_mb) + " (" +
                     std::to_string(used + adding_mb) + " MiB with this volume)"};
  }
  return Ok{};
}

asio::awaitable<Result<const Volume*>> Volumes::Create(std::string name, std::string tenant,
                                                       int64_t size_mb) {
  if (ByName(tenant, name) || making_.contains({tenant, name})) {
    co_return Error{ErrorCode::kConflict, "a volume named '" + name + "' exists"};
  }
  if (auto r = CheckQuota(tenant, size_mb); !r) co_return std::move(r).error();
  Volume vol{NewId(id_prefix_), std::move(name), std::move(tenant), size_mb, SystemNow()};
  const std::pair<std::string, std::string> key{vol.tenant, vol.name};
  making_.emplace(key, size_mb);
  const std::string dir = DirOf(vol.id);
  auto make = [dir, size_mb]() -> Result<void> {
    Result<void> made = Make(dir, size_mb);
    if (!made) Remove(dir);
    return made;
  };
  Result<void> made = co_await OffThread(pool_, std::move(make));
  making_.erase(key);
  if (!made) co_return std::move(made).error();
  if (auto r = store_.PutVolume(vol.id, json::serialize(Json(vol))); !r) {
    auto remove = [dir] {
      Remove(dir);
      return true;
    };
    co_await OffThread(pool_, std::move(remove));
    co_return std::move(r).error();
  }
  vol.mounted = true;
  auto [it, inserted] = volumes_.emplace(vol.id, std::move(vol));
  log::Info("volume created",
            {{"volume", it->first}, {"size_mb", std::to_string(it->second.size_mb)}});
  co_return &it->second;
}

void Volumes::Unpin(const std::string& id) {
  auto it = pins_.find(id);
  if (it != pins_.end() && --it->second <= 0) pins_.erase(it);
}

asio::awaitable<Result<void>> Volumes::Delete(std::string id, std::string used_by) {
  auto it = volumes_.find(id);
  if (it == volumes_.end() || deleting_.contains(id)) {
    co_return Error{ErrorCode::kNotFound, "no volume '" + id + "'"};
  }
  if (!used_by.empty() || pins_.contains(id)) {
    co_return Error{ErrorCode::kConflict,
                    "volume '" + it->second.name + "' is mounted by sandbox " +
                        (used_by.empty() ? std::string("being created") : "'" + used_by + "'") +
                        "; delete the sandbox first"};
  }
  deleting_.insert(id);
  if (auto r = store_.DeleteVolume(id); !r) {
    deleting_.erase(id);
    co_return std::move(r).error();
  }
  auto remove = [dir = DirOf(id)] {
    Remove(dir);
    return true;
  };
  co_await OffThread(pool_, std::move(remove));
  deleting_.erase(id);
  volumes_.erase(id);
  log::Info("volume deleted", {{"volume", id}});
  co_return Ok{};
}

std::string Volumes::MountPath(const Volume& v) const {
  return DirOf(v.id) + kMount;
}

Result<std::string> Volumes::Root(const Volume& v) const {
  if (!v.mounted) {
    return Error{ErrorCode::kUnavailable, "volume '" + v.name +
                                              "' is not mounted on this node: it could not be "
                                              "at the daemon's start (its log says why)"};
  }
  return MountPath(v);
}

Result<VolumeUsage> Volumes::UsageOf(const std::string& mount_path) {
  struct statfs st {};
  if (!IsMountRoot(mount_path)) {
    return Error{ErrorCode::kUnavailable, "volume is not mounted on this node (see the log)"};
  }
  if (::statfs(mount_path.c_str(), &st) != 0) {
    return SysError(ErrorCode::kInternal, "volume: statfs " + mount_path, errno);
  }
  const auto block = static_cast<uint64_t>(st.f_bsize);
  return VolumeUsage{(st.f_blocks - st.f_bfree) * block, st.f_blocks * block};
}

}  // namespace sandstream
