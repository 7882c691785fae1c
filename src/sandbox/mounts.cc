// Root filesystem plans: the base template (host system directories read-only, a sized tmpfs
// for everything writable) or a template directory under an overlay, then /tmp, /proc, /dev.
#include "sandbox/mounts.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <linux/openat2.h>
#include <set>

#include "platform/fd.h"
#include "sandbox/child_report.h"
#include "sandbox/embedded.h"
#include "sandbox/fault.h"
#include "sandbox/limits_view.h"

namespace sandstream::sandbox {
namespace {

constexpr const char* kTopLevel[] = {"/usr",   "/bin",   "/sbin",  "/lib",
                                     "/lib32", "/lib64", "/libx32"};
constexpr const char* kEtcDirs[] = {"alternatives", "ssl",       "ca-certificates",
                                    "ld.so.conf.d", "profile.d", "perl",
                                    "terminfo",     "fonts",     "xdg"};
constexpr const char* kEtcFiles[] = {"ld.so.cache",    "ld.so.conf", "profile",    "bash.bashrc",
                                     "inputrc",        "protocols",  "services",   "mime.types",
                                     "debian_version", "os-release", "shells",     "host.conf",
                                     "gai.conf",       "localtime",  "timezone",   "resolv.conf",
                                     "mailcap",        "magic",      "environment"};
constexpr const char* kDevices[] = {"null", "zero", "full", "random", "urandom", "tty"};
// Host-wide kernel state, hidden as Docker and Podman hide it (moby's maskedPaths and more).
constexpr const char* kMaskedProc[] = {
    "kallsyms",     "kcore",       "keys",          "key-users",     "timer_list",
    "timer_stats",  "sched_debug", "latency_stats", "sysrq-trigger", "interrupts",
    "slabinfo",     "kpagecount",  "kpageflags",    "kpagecgroup",   "vmallocinfo",
    "pagetypeinfo", "acpi",        "asound",        "scsi"};
// Host-wide settings and hardware, read-only (moby's readonlyPaths).
constexpr const char* kReadOnlyProc[] = {"sys", "irq", "bus", "fs"};

std::string PasswdFile() {
  return "root:x:0:0:root:/root:/bin/bash\n"
         "user:x:1000:1000:user:/workspace:/bin/bash\n"
         "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
}

std::string GroupFile() {
  return "root:x:0:\ntty:x:5:\nusers:x:100:\nuser:x:1000:\nnogroup:x:65534:\n";
}

std::string HostsFile(const std::string& hostname) {
  return "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + hostname +
         "\n";
}

class PlanBuilder {
 public:
  explicit PlanBuilder(RootPlan* plan) : plan_(plan) {}

  void Add(MountOp op, const std::string& path, const std::string& label, std::string source = {},
           std::string options = {}, mode_t mode = 0755, uid_t owner = 0, unsigned long flags = 0) {
    plan_->steps.push_back(MountStep{op, path, std::move(source), std::move(options), flags, mode,
                                     owner, owner, label});
  }

  MountStep& Last() { return plan_->steps.back(); }
  void Keep(const std::string& path) { plan_->keep = path; }

 private:
  RootPlan* plan_;
};

// The one tmpfs that holds everything the sandbox writes: the root (base) or the overlay's
// upper layer, and /dev/shm. Its pages are memory the OOM killer cannot free, so it is sized
// inside the memory limit; its inodes are kernel memory, charged to the sandbox too, so there
// are at most as many as 4 KiB blocks.
void AddWritableLayer(PlanBuilder& b, const SandboxSpec& spec) {
  const int64_t mb = WritableMb(spec.limits);
  b.Add(MountOp::kMkdir, "layer", "mounts: mkdir: layer");
  b.Add(MountOp::kTmpfs, "layer", "mounts: tmpfs: layer", {},
        "size=" + std::to_string(mb) + "m,nr_inodes=" + std::to_string(mb * 256) + ",mode=0755", 0,
        0, MS_NOSUID | MS_NODEV);
  b.Add(MountOp::kMkdir, "layer/shm", "mounts: mkdir: layer/shm", {}, {}, 01777);
}

// /sys holds only what shows a sandbox its limits: its cgroups, from inside its cgroup
// namespace, read-only (its processes have no capability and seccomp denies every mount call,
// so none can make them writable), never the host's cgroupfs.
void AddSys(PlanBuilder& b, const HostSystem& host, const std::string& root,
            const std::vector<int>& view_fds) {
  const std::string sys = root + "/sys";
  constexpr unsigned long kNothingToRun = MS_NOSUID | MS_NODEV | MS_NOEXEC;
  b.Add(MountOp::kMkdir, sys, "mounts: mkdir: /sys", {}, {}, 0555);
  b.Add(MountOp::kTmpfs, sys, "mounts: tmpfs: /sys", {}, "size=64k,nr_inodes=256,mode=0555", 0, 0,
        kNothingToRun);
  const std::string cgroup = sys + "/fs/cgroup";
  b.Add(MountOp::kMkdir, sys + "/fs", "mounts: mkdir: /sys/fs", {}, {}, 0555);
  b.Add(MountOp::kMkdir, cgroup, "mounts: mkdir: /sys/fs/cgroup", {}, {}, 0555);
  const bool v1 = !host.cgroup_fs.empty() && !host.cgroup_fs[0].dir.empty();
  if (v1) {
    // As Docker lays v1 out: a tmpfs holding a mount point per hierarchy.
    b.Add(MountOp::kTmpfs, cgroup, "mounts: tmpfs: /sys/fs/cgroup", {},
          "size=64k,nr_inodes=256,mode=0755", 0, 0, kNothingToRun);
  }
  for (const auto& fs : host.cgroup_fs) {
    const std::string at = fs.dir.empty() ? cgroup : cgroup + "/" + fs.dir;
    const std::string inside = "/sys/fs/cgroup" + (fs.dir.empty() ? "" : "/" + fs.dir);
    if (!fs.dir.empty()) b.Add(MountOp::kMkdir, at, "mounts: mkdir: " + inside, {}, {}, 0555);
    b.Add(MountOp::kCgroup, at, "mounts: " + fs.fstype + ": " + inside, fs.fstype, fs.options, 0, 0,
          MS_RDONLY | kNothingToRun);
    for (const auto& link : fs.links) {
      b.Add(MountOp::kSymlink, cgroup + "/" + link, "mounts: symlink: /sys/fs/cgroup/" + link,
            fs.dir);
    }
  }
  if (v1) b.Add(MountOp::kSeal, cgroup, "mounts: read-only: /sys/fs/cgroup");
  // lxcfs's CPU count (glibc's get_nprocs reads it), over a file of the sandbox's own.
  for (size_t i = 0; i < view_fds.size(); ++i) {
    const std::string name = kViewFiles[i];
    if (!name.starts_with("sys/")) continue;
    for (size_t at = 4; (at = name.find('/', at)) != std::string::npos; ++at) {
      b.Add(MountOp::kMkdir, root + "/" + name.substr(0, at),
            "mounts: mkdir: /" + name.substr(0, at), {}, {}, 0555);
    }
    b.Add(MountOp::kWriteFile, root + "/" + name, "mounts: create: /" + name, {}, {}, 0444);
    b.Add(MountOp::kAttach, root + "/" + name, "mounts: lxcfs: /" + name);
    b.Last().fd = view_fds[i];
  }
  b.Add(MountOp::kSeal, sys, "mounts: read-only: /sys");
}

// /tmp, /proc, /dev and /sys: the same for every template.
void AddRuntimeMounts(PlanBuilder& b, const HostSystem& host, const std::string& root,
                      const std::vector<int>& view_fds, int init_fd) {
  b.Add(MountOp::kMkdir, root + "/tmp", "mounts: mkdir: /tmp", {}, {}, 01777);
  b.Add(MountOp::kMkdir, root + "/proc", "mounts: mkdir: /proc", {}, {}, 0555);
  b.Add(MountOp::kProc, root + "/proc", "mounts: proc: /proc");
  for (const char* name : kMaskedProc) {
    b.Add(MountOp::kMask, root + "/proc/" + name, std::string("mounts: mask: /proc/") + name);
  }
  for (const char* name : kReadOnlyProc) {
    b.Add(MountOp::kReadOnly, root + "/proc/" + name,
          std::string("mounts: read-only: /proc/") + name);
  }
  // lxcfs's answers from the sandbox's limits over the host's totals.
  for (size_t i = 0; i < view_fds.size(); ++i) {
    const std::string name = kViewFiles[i];
    if (!name.starts_with("proc/")) continue;
    b.Add(MountOp::kAttach, root + "/" + name, "mounts: lxcfs: /" + name);
    b.Last().fd = view_fds[i];
  }

  const std::string dev = root + "/dev";
  b.Add(MountOp::kMkdir, dev, "mounts: mkdir: /dev");
  b.Add(MountOp::kTmpfs, dev, "mounts: tmpfs: /dev", {}, "size=64k,nr_inodes=256,mode=0755", 0, 0,
        MS_NOSUID | MS_NOEXEC);
  for (const char* name : kDevices) {
    const std::string inside = std::string("/dev/") + name;
    b.Add(MountOp::kWriteFile, root + inside, "mounts: create: " + inside, {}, {}, 0666);
    b.Add(MountOp::kBindDevice, root + inside, "mounts: bind-dev: " + inside, inside);
  }
  if (init_fd >= 0) {
    const std::string init = root + kInitPathInside;
    b.Add(MountOp::kWriteFile, init, "mounts: create: " + std::string(kInitPathInside), {}, {},
          0555);
    b.Add(MountOp::kAttach, init, "mounts: bind: " + std::string(kInitPathInside));
    b.Last().fd = init_fd;
  }
  b.Add(MountOp::kMkdir, dev + "/pts", "mounts: mkdir: /dev/pts");
  b.Add(MountOp::kDevpts, dev + "/pts", "mounts: devpts: /dev/pts", {},
        "newinstance,ptmxmode=0666,mode=0620,gid=" + std::to_string(kTtyGroupId) +
            ",max=" + std::to_string(kPtysPerSandbox),
        0, 0, MS_NOSUID | MS_NOEXEC);
  b.Add(MountOp::kSymlink, dev + "/ptmx", "mounts: symlink: /dev/ptmx", "pts/ptmx");
  b.Add(MountOp::kMkdir, dev + "/shm", "mounts: mkdir: /dev/shm", {}, {}, 01777);
  b.Add(MountOp::kBind, dev + "/shm", "mounts: bind: /dev/shm", "layer/shm");
  b.Add(MountOp::kSymlink, dev + "/fd", "mounts: symlink: /dev/fd", "/proc/self/fd");
  b.Add(MountOp::kSymlink, dev + "/stdin", "mounts: symlink: /dev/stdin", "/proc/self/fd/0");
  b.Add(MountOp::kSymlink, dev + "/stdout", "mounts: symlink: /dev/stdout", "/proc/self/fd/1");
  b.Add(MountOp::kSymlink, dev + "/stderr", "mounts: symlink: /dev/stderr", "/proc/self/fd/2");
  AddSys(b, host, root, view_fds);
}

// The sandbox's template layers under an overlay at `root`, its writable layer the upper one
// (`upper_mode`: the root directory's mode, where no layer sets it). PID 1 keeps the layer
// open: snapshots read its upper directory.
void AddOverlay(PlanBuilder& b, const std::string& root, const SandboxSpec& spec,
                const std::vector<int>& layer_fds, mode_t upper_mode) {
  const std::string layer = "layer";
  b.Add(MountOp::kMkdir, layer + "/upper", "mounts: mkdir: layer/upper", {}, {}, upper_mode);
  b.Add(MountOp::kMkdir, layer + "/work", "mounts: mkdir: layer/work");
  b.Add(MountOp::kMkdir, layer + "/lower", "mounts: mkdir: layer/lower", {}, {}, 0700);
  b.Keep(layer);
  // Overlay takes its lower layers as paths of this mount namespace: each idmapped layer is
  // attached under layer/lower, and listed topmost first.
  std::string lowers;
  for (size_t i = 0; i < layer_fds.size(); ++i) {
    const std::string at = layer + "/lower/" + std::to_string(i);
    b.Add(MountOp::kMkdir, at, "mounts: mkdir: " + at, {}, {}, 0700);
    b.Add(MountOp::kAttach, at, "mounts: attach: " + spec.layers[i]);
    b.Last().fd = layer_fds[i];
    lowers = at + (lowers.empty() ? "" : ":") + lowers;
  }
  b.Add(
      MountOp::kOverlay, root, "mounts: overlay: " + spec.template_name, {},
      "lowerdir=" + lowers + ",upperdir=" + layer + "/upper,workdir=" + layer + "/work,userxattr");
}

void AddBaseRoot(PlanBuilder& b, const HostSystem& host, const std::string& root,
                 const SandboxSpec& spec, const std::vector<int>& layer_fds) {
  // `/` is sticky and writable for everyone, like /tmp: it is the sandbox's own tmpfs, and agents
  // expect `git clone URL /work` to work as `user`. The system directories stay read-only.
  AddWritableLayer(b, spec);
  if (layer_fds.empty()) {
    b.Add(MountOp::kMkdir, "layer/root", "mounts: mkdir: layer/root", {}, {}, 01777);
    b.Add(MountOp::kBind, root, "mounts: bind: /", "layer/root");
    b.Keep("layer");
  } else {
    // A snapshot of a base sandbox: what it wrote, under the writable layer, with the host's
    // system over it as for any base sandbox. What the steps below write replaces its copy
    // (they name this sandbox, and the host's files go with the host's libraries).
    AddOverlay(b, root, spec, layer_fds, 01777);
  }
  const bool replace = !layer_fds.empty();
  for (const auto& dir : host.dirs) {
    b.Add(MountOp::kMkdir, root + dir, "mounts: mkdir: " + dir);
    b.Add(MountOp::kBindReadOnly, root + dir, "mounts: bind-ro: " + dir, dir);
  }
  for (const auto& [path, target] : host.links) {
    b.Add(MountOp::kSymlink, root + path, "mounts: symlink: " + path, target);
    b.Last().replace = replace;
  }
  const std::string etc = root + "/etc";
  b.Add(MountOp::kMkdir, etc, "mounts: mkdir: /etc");
  for (const auto& [name, content] : host.etc_files) {
    if (name == "resolv.conf" && !spec.resolv_conf.empty()) continue;
    b.Add(MountOp::kWriteFile, etc + "/" + name, "mounts: write: /etc/" + name, content, {}, 0644);
    b.Last().replace = replace;
  }
  if (!spec.resolv_conf.empty()) {
    b.Add(MountOp::kWriteFile, etc + "/resolv.conf", "mounts: write: /etc/resolv.conf",
          spec.resolv_conf, {}, 0644);
    b.Last().replace = replace;
  }
  for (const auto& [name, target] : host.etc_links) {
    b.Add(MountOp::kSymlink, etc + "/" + name, "mounts: symlink: /etc/" + name, target);
    b.Last().replace = replace;
  }
  for (const auto& name : host.etc_dirs) {
    b.Add(MountOp::kMkdir, etc + "/" + name, "mounts: mkdir: /etc/" + name);
    b.Add(MountOp::kBindReadOnly, etc + "/" + name, "mounts: bind-ro: /etc/" + name,
          "/etc/" + name);
  }
  const std::pair<const char*, std::string> generated[] = {
      {"passwd", PasswdFile()},
      {"group", GroupFile()},
      {"hosts", HostsFile(spec.id)},
      {"hostname", spec.id + "\n"},
      {"nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"},
  };
  for (const auto& [name, content] : generated) {
    b.Add(MountOp::kWriteFile, etc + "/" + name, std::string("mounts: write: /etc/") + name,
          content, {}, 0644);
    b.Last().replace = replace;
  }
  b.Add(MountOp::kMkdir, root + "/root", "mounts: mkdir: /root", {}, {}, 0700);
  b.Add(MountOp::kMkdir, root + "/run", "mounts: mkdir: /run");
  b.Add(MountOp::kMkdir, root + "/var", "mounts: mkdir: /var");
  b.Add(MountOp::kMkdir, root + "/var/tmp", "mounts: mkdir: /var/tmp", {}, {}, 01777);
}

void AddTemplateRoot(PlanBuilder& b, const std::string& root, const SandboxSpec& spec,
                     const std::vector<int>& layer_fds) {
  // The writable layer is a sized tmpfs: cheap to drop and a disk quota at once.
  const std::string layer = "layer";
  AddWritableLayer(b, spec);
  AddOverlay(b, root, spec, layer_fds, 0755);
  // Files of the template that must name this sandbox; bound over, so that they do so even
  // where the template's /etc is read-only to the sandbox's root.
  std::vector<std::pair<const char*, std::string>> own = {{"hostname", spec.id + "\n"},
                                                          {"hosts", HostsFile(spec.id)}};
  if (!spec.resolv_conf.empty()) own.emplace_back("resolv.conf", spec.resolv_conf);
  for (const auto& [name, content] : own) {
    const std::string file = layer + "/" + name;
    b.Add(MountOp::kWriteFile, file, std::string("mounts: write: layer/") + name, content, {},
          0644);
    b.Add(MountOp::kBindFile, root + "/etc/" + name, std::string("mounts: bind: /etc/") + name,
          file);
  }
}

// Each volume at its path: the directories on the way made where missing (inside the root, as
// root, 0755), then its mount attached there; the way there on the root's own mount, through
// no link (a template's link could lead it over /dev/pts, where the daemon opens ptmx).
void AddVolumes(PlanBuilder& b, const std::string& root, const SandboxSpec& spec,
                const std::vector<int>& volume_fds) {
  for (size_t i = 0; i < spec.volumes.size() && i < volume_fds.size(); ++i) {
    const std::string& path = spec.volumes[i].path;
    for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
      const std::string dir = path.substr(0, slash);
      b.Add(MountOp::kMkdir, root + dir, "volume: mkdir: " + dir);
      b.Last().strict = true;
      b.Last().client_path = true;
      if (slash == std::string::npos) break;
    }
    b.Add(MountOp::kAttach, root + path, "volume: attach: " + path);
    b.Last().fd = volume_fds[i];
    b.Last().strict = true;
    b.Last().client_path = true;
  }
}

// --- child side: raw syscalls only ---

[[noreturn]] void Fail(const MountStep& step, int report_fd) {
  ReportAndExit(report_fd, step.label.c_str(), errno);
}

// False when `path` does not exist (a step that applies only to what exists skips it).
bool Exists(const MountStep& s, struct stat* st, int report_fd) {
  if (::stat(s.path.c_str(), st) == 0) return true;
  if (errno != ENOENT) Fail(s, report_fd);
  return false;
}

void BindReadOnly(const MountStep& s, const char* source, int report_fd) {
  const char* path = s.path.c_str();
  if (::mount(source, path, nullptr, MS_BIND | MS_REC, nullptr) != 0) Fail(s, report_fd);
  // mount_setattr changes only the named flags; a MS_REMOUNT would have to restate
  // every flag locked by the user namespace (relatime, nosuid...) or fail with EPERM.
  struct mount_attr attr {};
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (::mount_setattr(AT_FDCWD, path, AT_RECURSIVE, &attr, sizeof attr) != 0) Fail(s, report_fd);
}

// Where a step creates something (a directory, a file, a symlink): the directory to create it
// in and its name there. A path under the new root is resolved inside it, every symlink on the
// way as if the root were `/` (RESOLVE_IN_ROOT): a template's tree is a tenant's (an image, a
// snapshot), and its links lead wherever it likes on the host, where the setup must never
// write. Other paths are the daemon's own (the sandbox's directory, its layer), taken as they
// are. The directory is closed by the caller unless it is AT_FDCWD.
struct Place {
  int dir = AT_FDCWD;
  const char* name = nullptr;
};

Place PlaceOf(const MountStep& s, const std::string& new_root, int report_fd) {
  const char* path = s.path.c_str();
  const size_t root_len = new_root.size();
  if (s.path.size() <= root_len + 1 || s.path.compare(0, root_len, new_root) != 0 ||
      path[root_len] != '/') {
    return {AT_FDCWD, path};
  }
  const char* rel = path + root_len + 1;
  const char* slash = std::strrchr(rel, '/');
  const int root = ::open(new_root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) Fail(s, report_fd);
  if (slash == nullptr) return {root, rel};
  // No allocation in the child: the parent's path is copied to the stack.
  char parent[PATH_MAX];
  const auto len = static_cast<size_t>(slash - rel);
  if (len >= sizeof parent) {
    errno = ENAMETOOLONG;
    Fail(s, report_fd);
  }
  std::memcpy(parent, rel, len);
  parent[len] = '\0';
  struct open_how how {};
  how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  if (s.strict) how.resolve |= RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV;
  // RESOLVE_IN_ROOT answers EAGAIN when a ".." in a link meets a rename or mount elsewhere on
  // the host meanwhile: tried again, a few times.
  int dir = -1;
  for (int attempt = 0; attempt < 16; ++attempt) {
    dir = static_cast<int>(::syscall(SYS_openat2, root, parent, &how, sizeof how));
    if (dir >= 0 || errno != EAGAIN) break;
  }
  if (dir < 0) Fail(s, report_fd);
  ::close(root);
  return {dir, slash + 1};
}

// A step with `replace` first removes what is there (a file or a link, never a directory).
void Unlink(const MountStep& s, const Place& at, int report_fd) {
  if (s.replace && ::unlinkat(at.dir, at.name, 0) != 0 && errno != ENOENT) Fail(s, report_fd);
}

void RunStep(const MountStep& s, const std::string& new_root, int report_fd) {
  if (InjectedFault()) Fail(s, report_fd);
  const char* path = s.path.c_str();
  switch (s.op) {
    case MountOp::kTmpfs:
      if (::mount("tmpfs", path, "tmpfs", s.flags, s.options.c_str()) != 0) Fail(s, report_fd);
      return;
    case MountOp::kAttach: {
      // Resolved in the new root like a mkdir; the last component is never followed (no
      // MOVE_MOUNT_T_SYMLINKS), so a template's link there cannot send a volume elsewhere.
      const Place at = PlaceOf(s, new_root, report_fd);
      if (::move_mount(s.fd, "", at.dir, at.name, MOVE_MOUNT_F_EMPTY_PATH) != 0) {
        Fail(s, report_fd);
      }
      if (at.dir != AT_FDCWD) ::close(at.dir);
      ::close(s.fd);
      return;
    }
    case MountOp::kOverlay:
      if (::mount("overlay", path, "overlay", 0, s.options.c_str()) != 0) Fail(s, report_fd);
      return;
    case MountOp::kProc:
      if (::mount("proc", path, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
        Fail(s, report_fd);
      }
      return;
    case MountOp::kCgroup:
      if (::mount(s.source.c_str(), path, s.source.c_str(), s.flags,
                  s.options.empty() ? nullptr : s.options.c_str()) != 0) {
        Fail(s, report_fd);
      }
      return;
    case MountOp::kSeal: {
      struct mount_attr attr {};
      attr.attr_set = MOUNT_ATTR_RDONLY;
      if (::mount_setattr(AT_FDCWD, path, 0, &attr, sizeof attr) != 0) Fail(s, report_fd);
      return;
    }
    case MountOp::kDevpts:
      if (::mount("devpts", path, "devpts", s.flags, s.options.c_str()) != 0) Fail(s, report_fd);
      return;
    case MountOp::kBindReadOnly:
      BindReadOnly(s, s.source.c_str(), report_fd);
      return;
    case MountOp::kReadOnly: {
      struct stat st;
      if (Exists(s, &st, report_fd)) BindReadOnly(s, path, report_fd);
      return;
    }
    case MountOp::kMask: {
      struct stat st;
      if (!Exists(s, &st, report_fd)) return;
      const int rc = S_ISDIR(st.st_mode) ? ::mount("tmpfs", path, "tmpfs",
                                                   MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                                                   "size=4k,mode=0555")
                                         : ::mount("/dev/null", path, nullptr, MS_BIND, nullptr);
      if (rc != 0) Fail(s, report_fd);
      return;
    }
    case MountOp::kBind:
    case MountOp::kBindDevice:
      if (::mount(s.source.c_str(), path, nullptr, MS_BIND, nullptr) != 0) Fail(s, report_fd);
      return;
    case MountOp::kBindFile: {
      struct stat st;
      if (!Exists(s, &st, report_fd)) return;
      if (::mount(s.source.c_str(), path, nullptr, MS_BIND, nullptr) != 0) Fail(s, report_fd);
      return;
    }
    case MountOp::kMkdir: {
      const Place at = PlaceOf(s, new_root, report_fd);
      if (::mkdirat(at.dir, at.name, s.mode) != 0) {
        if (errno != EEXIST) Fail(s, report_fd);
      } else if ((s.uid != 0 || s.gid != 0) &&
                 ::fchownat(at.dir, at.name, s.uid, s.gid, AT_SYMLINK_NOFOLLOW) != 0) {
        Fail(s, report_fd);
      }
      if (at.dir != AT_FDCWD) ::close(at.dir);
      return;
    }
    case MountOp::kSymlink: {
      const Place at = PlaceOf(s, new_root, report_fd);
      Unlink(s, at, report_fd);
      if (::symlinkat(s.source.c_str(), at.dir, at.name) != 0) Fail(s, report_fd);
      if (at.dir != AT_FDCWD) ::close(at.dir);
      return;
    }
    case MountOp::kWriteFile: {
      const Place at = PlaceOf(s, new_root, report_fd);
      Unlink(s, at, report_fd);
      int fd =
          ::openat(at.dir, at.name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, s.mode);
      if (fd < 0) Fail(s, report_fd);
      if (at.dir != AT_FDCWD) ::close(at.dir);
      size_t done = 0;
      while (done < s.source.size()) {
        ssize_t n = ::write(fd, s.source.data() + done, s.source.size() - done);
        if (n < 0) {
          if (errno == EINTR) continue;
          Fail(s, report_fd);
        }
        done += static_cast<size_t>(n);
      }
      if (s.uid != 0 && ::fchown(fd, s.uid, s.gid) != 0) Fail(s, report_fd);
      ::close(fd);
      return;
    }
  }
}

}  // namespace

HostSystem HostSystem::Scan() {
  HostSystem host;
  struct stat st;
  for (const char* path : kTopLevel) {
    if (::lstat(path, &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      ssize_t n = ::readlink(path, target, sizeof target - 1);
      if (n > 0) host.links.emplace_back(path, std::string(target, static_cast<size_t>(n)));
    } else if (S_ISDIR(st.st_mode)) {
      host.dirs.emplace_back(path);
    }
  }
  std::set<std::string> wanted_dirs(std::begin(kEtcDirs), std::end(kEtcDirs));
  if (DIR* d = ::opendir("/etc")) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      // Interpreter configuration (/etc/python3.11 ...) that their stdlib expects.
      if (name.rfind("python", 0) == 0) wanted_dirs.insert(name);
    }
    ::closedir(d);
  }
  for (const auto& name : wanted_dirs) {
    const std::string path = "/etc/" + name;
    if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) host.etc_dirs.push_back(name);
  }
  for (const char* name : kEtcFiles) {
    const std::string path = std::string("/etc/") + name;
    if (::lstat(path.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
      if (n > 0) host.etc_links.emplace_back(name, std::string(target, static_cast<size_t>(n)));
    } else if (S_ISREG(st.st_mode) && st.st_size <= (1 << 20)) {
      if (auto content = ReadFile(path)) host.etc_files.emplace_back(name, std::move(*content));
    }
  }
  return host;
}

int64_t WritableMb(const Limits& limits) {
  const int64_t headroom = std::max<int64_t>(limits.memory_mb / 4, 32);
  return std::max<int64_t>(1, std::min(limits.disk_mb, limits.memory_mb - headroom));
}

RootPlan BuildRootPlan(const HostSystem& host, const SandboxSpec& spec,
                       const std::string& sandbox_dir, const std::vector<int>& layer_fds,
                       const std::vector<int>& view_fds, const std::vector<int>& volume_fds,
                       int init_fd) {
  RootPlan plan;
  plan.new_root = "root";
  plan.pivot_label = "mounts: pivot_root: " + sandbox_dir + "/root";
  PlanBuilder b(&plan);
  if (spec.layers.empty() || spec.host_base) {
    AddBaseRoot(b, host, plan.new_root, spec, layer_fds);
  } else {
    AddTemplateRoot(b, plan.new_root, spec, layer_fds);
  }
  b.Add(MountOp::kMkdir, plan.new_root + "/workspace", "mounts: mkdir: /workspace", {}, {}, 0755,
        spec.user_uid);
  b.Last().gid = spec.user_gid;
  // /home/user, the user's home on E2B's templates, where code written for them keeps files.
  b.Add(MountOp::kMkdir, plan.new_root + "/home", "mounts: mkdir: /home", {}, {}, 0755);
  b.Add(MountOp::kMkdir, plan.new_root + "/home/user", "mounts: mkdir: /home/user", {}, {}, 0755,
        spec.user_uid);
  b.Last().gid = spec.user_gid;
  AddRuntimeMounts(b, host, plan.new_root, view_fds, init_fd);
  AddVolumes(b, plan.new_root, spec, volume_fds);
  return plan;
}

int BuildRootInChild(const RootPlan& plan, int report_fd) {
  // On systemd hosts / is shared: without this, the sandbox's mounts would propagate out.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    ReportAndExit(report_fd, "mounts: make / private", errno);
  }
  ::umask(0);
  for (const auto& step : plan.steps) RunStep(step, plan.new_root, report_fd);
  int keep = -1;
  if (!plan.keep.empty()) {
    keep = ::open(plan.keep.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (InjectedFault() || keep < 0) ReportAndExit(report_fd, "mounts: keep layer", errno);
  }
  if (::chdir(plan.new_root.c_str()) != 0)
    ReportAndExit(report_fd, plan.pivot_label.c_str(), errno);
  // pivot_root(".", ".") stacks the old root on the new one; detaching "." then drops it,
  // with no put_old directory to create and remove.
  if (::syscall(SYS_pivot_root, ".", ".") != 0) {
    ReportAndExit(report_fd, plan.pivot_label.c_str(), errno);
  }
  if (::umount2(".", MNT_DETACH) != 0) ReportAndExit(report_fd, "mounts: detach old root", errno);
  if (::chdir("/") != 0) ReportAndExit(report_fd, "mounts: chdir /", errno);
  ::umask(022);
  return keep;
}

const MountStep* RootPlan::Find(std::string_view reported) const {
  constexpr size_t kCut = sizeof(ChildFailure::step) - 1;  // ReportAndExit keeps this much
  for (const MountStep& step : steps) {
    if (std::string_view(step.label).substr(0, kCut) == reported) return &step;
  }
  return nullptr;
}

}  // namespace sandstream::sandbox
