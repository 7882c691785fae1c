// cgroup v1 and v2: finding the daemon's own cgroups, creating a limited cgroup per sandbox,
// reading OOM kills, removing it. Parent side only.
#include "sandbox/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <map>
#include <sstream>
#include <thread>

#include "base/log.h"
#include "platform/fd.h"
#include "platform/proc.h"
#include "platform/signals.h"
#include "sandbox/cpus.h"
#include "sandbox/fault.h"

namespace sandstream::sandbox {
namespace {

constexpr const char* kV1Controllers[] = {"memory", "pids", "cpu"};

int WriteString(const std::string& path, const std::string& value) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return errno;
  ssize_t n = ::write(fd.get(), value.data(), value.size());
  if (n < 0) return errno;
  return 0;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

bool HasWord(const std::string& text, const std::string& word) {
  std::istringstream in(text);
  std::string w;
  while (in >> w) {
    if (w == word) return true;
  }
  return false;
}

struct CgroupMount {
  std::string root;  // the mount's root inside the hierarchy
  std::string mountpoint;
  std::string controllers;  // v1: the hierarchy's controllers as mount options ("cpu,cpuacct")
};

// The controllers among a v1 mount's super options ("rw,cpu,cpuacct" -> "cpu,cpuacct").
std::string ControllersOf(const std::string& super_options) {
  std::string out;
  for (const auto& opt : Split(super_options, ',')) {
    if (opt == "rw" || opt == "ro" || opt == "xattr" || opt == "clone_children" ||
        opt == "noprefix" || opt == "cpuset_v2_mode" || opt.starts_with("release_agent=")) {
      continue;
    }
    out += (out.empty() ? "" : ",") + opt;
  }
  return out;
}

// fstype "cgroup": controller -> mount; fstype "cgroup2": key "".
std::map<std::string, CgroupMount> FindMounts() {
  std::map<std::string, CgroupMount> out;
  auto text = ReadFile("/proc/self/mountinfo");
  if (!text) return out;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    auto pre = Split(line.substr(0, dash), ' ');
    auto post = Split(line.substr(dash + 3), ' ');
    if (pre.size() < 5 || post.size() < 3) continue;
    CgroupMount m{pre[3], pre[4], ControllersOf(post[2])};
    if (post[0] == "cgroup2") {
      out.emplace("", m);
    } else if (post[0] == "cgroup") {
      for (const auto& opt : Split(post[2], ',')) out.emplace(opt, m);
    }
  }
  return out;
}

// Hierarchy controllers ("cpu,cpuacct", or "" for v2) -> the daemon's path in it.
std::map<std::string, std::string> OwnCgroups() {
  std::map<std::string, std::string> out;
  auto text = ReadFile("/proc/self/cgroup");
  if (!text) return out;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    auto first = line.find(':');
    auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    out[line.substr(first + 1, second - first - 1)] = line.substr(second + 1);
  }
  return out;
}

std::string JoinCgroupPath(const CgroupMount& m, const std::string& path) {
  std::string rel = path;
  if (m.root != "/" && rel.rfind(m.root, 0) == 0) rel = rel.substr(m.root.size());
  if (rel == "/") rel.clear();
  return m.mountpoint + rel;
}

std::string OwnPathFor(const std::map<std::string, std::string>& own, const std::string& ctrl) {
  for (const auto& [controllers, path] : own) {
    for (const auto& c : Split(controllers, ',')) {
      if (c == ctrl) return path;
    }
  }
  return "/";
}

std::vector<pid_t> ReadPids(const std::string& dir) {
  std::vector<pid_t> pids;
  auto text = ReadFile(dir + "/cgroup.procs");
  if (!text) return pids;
  std::istringstream in(*text);
  pid_t p;
  while (in >> p) pids.push_back(p);
  return pids;
}

// SIGKILL to every process listed in the cgroup. A listed pid may have exited and been reused
// by the time it is signalled: each is pinned with a pidfd and signalled only if that process
// is still in the cgroup, so nothing outside it is ever hit.
// The process group of `pid` as the pid namespace `level` below this process's numbers it (its
// NSpgid field of that index), or with `level` 0 as this one does.
pid_t GroupOf(pid_t pid, int level) {
  if (level == 0) return ::getpgid(pid);
  const std::vector<pid_t> pgids = StatusIds(pid, "NSpgid");
  return static_cast<size_t>(level) < pgids.size() ? pgids[static_cast<size_t>(level)] : -1;
}

void SignalMembers(const std::string& dir, int sig, pid_t pgid, int level = 0) {
  for (pid_t p : ReadPids(dir)) {
    UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, p, 0)));
    if (!pidfd) continue;
    // With the pidfd held, `p` names that process while it lives: check it now.
    if (pgid > 0 && GroupOf(p, level) != pgid) continue;
    const auto procs = ReadPids(dir);
    if (std::find(procs.begin(), procs.end(), p) == procs.end()) continue;
    (void)SignalPidfd(pidfd.get(), sig);
  }
}

void KillMembers(const std::string& dir) {
  SignalMembers(dir, SIGKILL, 0);
}

// A v1 cpuset cgroup starts with no CPUs and no memory nodes, and takes no process until it
// has both: `dir` gets its parent's.
int InheritCpuset(const std::string& dir) {
  const std::string parent = dir.substr(0, dir.rfind('/'));
  for (const char* file : {"/cpuset.cpus", "/cpuset.mems"}) {
    auto own = ReadFile(dir + file);
    if (own && !ParseCpuList(*own).value_or(std::vector<int>{}).empty()) continue;
    auto value = ReadFile(parent + file);
    if (!value) return errno != 0 ? errno : EIO;
    if (int e = WriteString(dir + file, *value); e != 0) return e;
  }
  return 0;
}

constexpr auto kRemoveDeadline = std::chrono::seconds(5);

// rmdir fails with EBUSY while the last processes are still exiting; they die within
// milliseconds of a SIGKILL, so retry briefly and kill again whatever is still listed. For
// start-up and for cgroups that never held a process: it may sleep.
int RemoveCgroupDir(const std::string& dir) {
  using namespace std::chrono;
  const auto deadline = steady_clock::now() + kRemoveDeadline;
  for (int attempt = 0;; ++attempt) {
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return 0;
    if (errno != EBUSY || steady_clock::now() > deadline) return errno;
    KillMembers(dir);
    std::this_thread::sleep_for(microseconds(attempt < 20 ? 100 : 2000));
  }
}

// The same as an Op: the pauses are waits its runner does, not sleeps.
Op<int> RemoveCgroupDirLater(std::string dir) {
  using namespace std::chrono;
  const auto deadline = steady_clock::now() + kRemoveDeadline;
  for (int attempt = 0;; ++attempt) {
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) co_return 0;
    if (errno != EBUSY || steady_clock::now() > deadline) co_return errno;
    KillMembers(dir);
    (void)co_await Sleep(microseconds(attempt < 20 ? 100 : 2000));
  }
}

}  // namespace

SandboxCgroup::SandboxCgroup(CgroupVersion version, std::vector<std::string> dirs,
                             std::vector<UniqueFd> procs, std::string oom_file,
                             std::string freezer_dir)
    : version_(version),
      dirs_(std::move(dirs)),
      procs_(std::move(procs)),
      oom_file_(std::move(oom_file)),
      freezer_dir_(std::move(freezer_dir)) {}

SandboxCgroup::~SandboxCgroup() {
  KillAndForget();
}

void SandboxCgroup::Leave() {
  removed_ = true;
}

void SandboxCgroup::SignalGroup(pid_t pgid, int sig, int level) const {
  // Every process is in every hierarchy: one is enough to find them.
  if (!removed_ && !dirs_.empty()) SignalMembers(dirs_[0], sig, pgid, level);
}

Result<void> SandboxCgroup::Attach(pid_t pid) const {
  const std::string text = std::to_string(pid);
  for (size_t i = 0; i < procs_.size(); ++i) {
    if (::write(procs_[i].get(), text.data(), text.size()) < 0) {
      return SysError(ErrorCode::kSandboxSetupFailed, "cgroup: attach: " + dirs_[i], errno);
    }
  }
  return Ok{};
}

std::vector<int> SandboxCgroup::ProcsFds() const {
  std::vector<int> fds;
  for (const auto& fd : procs_) fds.push_back(fd.get());
  return fds;
}

uint64_t SandboxCgroup::OomKills() const {
  auto text = ReadFile(oom_file_);
  if (!text) return 0;
  std::istringstream in(*text);
  std::string key;
  uint64_t value = 0;
  while (in >> key >> value) {
    if (key == "oom_kill") return value;
  }
  return 0;
}

namespace {

// The value of `key` in a flat keyed file (memory.stat, cpu.stat), or nullopt.
std::optional<uint64_t> KeyedValue(const std::string& text, std::string_view key) {
  std::istringstream in(text);
  std::string name;
  uint64_t value = 0;
  while (in >> name >> value) {
    if (name == key) return value;
  }
  return std::nullopt;
}

std::optional<uint64_t> NumberIn(const std::string& path) {
  auto text = ReadFile(path);
  if (!text) return std::nullopt;
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc() || end == text->data()) return std::nullopt;
  return value;
}

}  // namespace

std::optional<ResourceUsage> SandboxCgroup::Usage() const {
  if (dirs_.empty()) return std::nullopt;
  ResourceUsage u;
  const std::string& memory_dir = dirs_[0];
  auto stat = ReadFile(memory_dir + "/memory.stat");
  if (!stat) return std::nullopt;
  std::optional<uint64_t> charged;
  std::optional<uint64_t> inactive;
  if (version_ == CgroupVersion::kV2) {
    charged = NumberIn(memory_dir + "/memory.current");
    inactive = KeyedValue(*stat, "inactive_file");
    u.cache_bytes = KeyedValue(*stat, "file").value_or(0);
    auto cpu = ReadFile(memory_dir + "/cpu.stat");
    if (cpu) u.cpu_usec = KeyedValue(*cpu, "usage_usec").value_or(0);
  } else {
    charged = NumberIn(memory_dir + "/memory.usage_in_bytes");
    inactive = KeyedValue(*stat, "total_inactive_file");
    u.cache_bytes = KeyedValue(*stat, "total_cache").value_or(0);
    // cpuacct: its own hierarchy or joined with cpu ("cpu,cpuacct"), whichever dir has it.
    for (const std::string& dir : dirs_) {
      if (auto ns = NumberIn(dir + "/cpuacct.usage")) {
        u.cpu_usec = *ns / 1000;
        break;
      }
    }
  }
  if (!charged) return std::nullopt;
  u.memory_bytes = *charged - std::min(*charged, inactive.value_or(0));
  return u;
}

std::vector<pid_t> SandboxCgroup::Pids() const {
  // In v1 every hierarchy holds the same processes; pids is the one that must be complete.
  if (dirs_.empty()) return {};
  return ReadPids(dirs_[version_ == CgroupVersion::kV1 ? 1 : 0]);
}

Op<Result<void>> SandboxCgroup::Remove() {
  if (removed_) co_return Ok{};
  removed_ = true;
  procs_.clear();
  if (version_ == CgroupVersion::kV2 && !dirs_.empty()) {
    (void)WriteString(dirs_[0] + "/cgroup.kill", "1");
  }
  for (const auto& dir : dirs_) KillMembers(dir);
  (void)Thaw();  // a frozen process takes its SIGKILL once it runs again
  Result<void> result = Ok{};
  for (const auto& dir : dirs_) {
    const int err = co_await RemoveCgroupDirLater(dir);
    if (err != 0 && result.ok()) {
      result = SysError(ErrorCode::kInternal, "cgroup: rmdir: " + dir, err);
    }
  }
  co_return result;
}

void SandboxCgroup::KillAndForget() {
  if (removed_) return;
  removed_ = true;
  procs_.clear();
  if (version_ == CgroupVersion::kV2 && !dirs_.empty()) {
    (void)WriteString(dirs_[0] + "/cgroup.kill", "1");
  }
  for (const auto& dir : dirs_) KillMembers(dir);
  (void)Thaw();
  for (const auto& dir : dirs_) ::rmdir(dir.c_str());
}

namespace {

// The freezer's file and the words it takes, by version.
struct FreezerFiles {
  std::string state;  // written to freeze or thaw; read back for the state (v1)
  std::string frozen;
  std::string thawed;
};

FreezerFiles FreezerOf(CgroupVersion version, const std::string& dir) {
  if (version == CgroupVersion::kV1) return {dir + "/freezer.state", "FROZEN", "THAWED"};
  return {dir + "/cgroup.freeze", "1", "0"};
}

// v1: freezer.state says FREEZING until every task stopped, then FROZEN. v2: cgroup.freeze is
// what was asked; cgroup.events' `frozen 1` says it is done.
bool KernelSaysFrozen(CgroupVersion version, const std::string& dir) {
  if (version == CgroupVersion::kV1) {
    auto state = ReadFile(dir + "/freezer.state");
    return state && state->starts_with("FROZEN");
  }
  auto events = ReadFile(dir + "/cgroup.events");
  return events && events->find("frozen 1") != std::string::npos;
}

}  // namespace

Op<Result<void>> SandboxCgroup::Freeze(Deadline deadline) {
  if (freezer_dir_.empty()) {
    co_return Error{ErrorCode::kNotImplemented,
                    "freeze: this host's cgroups have no freezer (cgroup v1 without a freezer "
                    "hierarchy)"};
  }
  const FreezerFiles files = FreezerOf(version_, freezer_dir_);
  if (int e = InjectedFault() ? EIO : WriteString(files.state, files.frozen); e != 0) {
    co_return SysError(ErrorCode::kInternal, "freeze: write " + files.state, e);
  }
  using namespace std::chrono;
  for (int attempt = 0; !KernelSaysFrozen(version_, freezer_dir_); ++attempt) {
    if (steady_clock::now() > deadline) {
      (void)WriteString(files.state, files.thawed);
      co_return Error{ErrorCode::kInternal,
                      "freeze: " + freezer_dir_ +
                          ": its processes did not all stop in time (one in uninterruptible "
                          "sleep, such as a read of a slow disk); thawed again"};
    }
    (void)co_await Sleep(microseconds(attempt < 50 ? 100 : 2000));
  }
  co_return Ok{};
}

Result<void> SandboxCgroup::Thaw() {
  if (freezer_dir_.empty()) return Ok{};
  const FreezerFiles files = FreezerOf(version_, freezer_dir_);
  if (int e = WriteString(files.state, files.thawed); e != 0 && e != ENOENT) {
    return SysError(ErrorCode::kInternal, "thaw: write " + files.state, e);
  }
  return Ok{};
}

bool SandboxCgroup::Frozen() const {
  if (freezer_dir_.empty()) return false;
  if (version_ == CgroupVersion::kV1) {
    auto state = ReadFile(freezer_dir_ + "/freezer.state");
    return state && !state->starts_with("THAWED");
  }
  auto asked = ReadFile(freezer_dir_ + "/cgroup.freeze");
  return asked && asked->starts_with("1");
}

namespace {

// Makes `path` (absolute in its hierarchy, under `top`) and every cgroup on the way, writing
// `enable` to the subtree_control of `top` and each one made (v2: every ancestor hands the
// controllers down); `enable` empty for v1.
Result<std::string> MakeAbsoluteParent(const std::string& top, const std::string& path,
                                       const std::string& enable) {
  std::string at = top;
  auto hand_down = [&enable](const std::string& dir) -> Result<void> {
    if (enable.empty()) return Ok{};
    if (int e = WriteString(dir + "/cgroup.subtree_control", enable); e != 0) {
      return SysError(ErrorCode::kInternal, "cgroup: enable controllers: " + dir, e);
    }
    return Ok{};
  };
  for (const auto& part : Split(path, '/')) {
    if (part.empty()) continue;
    if (auto handed = hand_down(at); !handed) return std::move(handed).error();
    at += "/" + part;
    if (::mkdir(at.c_str(), 0755) != 0 && errno != EEXIST) {
      return SysError(ErrorCode::kInternal, "cgroup: mkdir " + at, errno);
    }
  }
  if (auto handed = hand_down(at); !handed) return std::move(handed).error();
  return at;
}

// The subtree_control line that hands a v2 cgroup's controllers to its children: memory, pids
// and cpu, and cpuset where it has it; empty when one of the three is missing.
std::string V2Controllers(const std::string& dir) {
  auto controllers = ReadFile(dir + "/cgroup.controllers");
  if (!controllers || !HasWord(*controllers, "memory") || !HasWord(*controllers, "pids") ||
      !HasWord(*controllers, "cpu")) {
    return "";
  }
  return HasWord(*controllers, "cpuset") ? "+memory +pids +cpu +cpuset" : "+memory +pids +cpu";
}

// The sandboxes' parent below the daemon's own v2 cgroup `self`: `self/name`, with `enable`
// handed down to it. v2 lets no cgroup with processes hand controllers down, so the daemon
// moves itself into a leaf beside it (`self/name.daemon`); when others share `self` too (a
// login shell), it moves back and says so.
Result<std::string> NestedParent(const std::string& self, const std::string& name,
                                 const std::string& enable) {
  int err = WriteString(self + "/cgroup.subtree_control", enable);
  if (err == EBUSY) {
    const std::string leaf = self + "/" + name + ".daemon";
    if (::mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) {
      return SysError(ErrorCode::kInternal, "cgroup: mkdir " + leaf, errno);
    }
    const std::string pid = std::to_string(::getpid());
    if (int e = WriteString(leaf + "/cgroup.procs", pid); e != 0) {
      return SysError(ErrorCode::kInternal, "cgroup: move daemon to " + leaf, e);
    }
    err = WriteString(self + "/cgroup.subtree_control", enable);
    if (err == EBUSY) {
      (void)WriteString(self + "/cgroup.procs", pid);
      ::rmdir(leaf.c_str());
      return SysError(ErrorCode::kInternal,
                      "cgroup: " + self + " holds processes besides the daemon", err);
    }
  }
  if (err != 0) return SysError(ErrorCode::kInternal, "cgroup: enable controllers: " + self, err);
  const std::string parent = self + "/" + name;
  if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) {
    return SysError(ErrorCode::kInternal, "cgroup: mkdir " + parent, errno);
  }
  if (int e = WriteString(parent + "/cgroup.subtree_control", enable); e != 0) {
    return SysError(ErrorCode::kInternal, "cgroup: enable controllers: " + parent, e);
  }
  return parent;
}

}  // namespace

Result<Cgroups> Cgroups::Detect(const std::string& parent_name) {
  const auto mounts = FindMounts();
  const auto own = OwnCgroups();
  Cgroups cg;
  // "/name": that cgroup of each hierarchy, outside the daemon's own.
  const bool absolute = parent_name.starts_with('/');

  if (auto v2 = mounts.find(""); v2 != mounts.end() && own.count("")) {
    const std::string top = JoinCgroupPath(v2->second, "/");
    const auto under = [&cg](const std::string& parent, const std::string& enable) {
      cg.v2_cpuset_ = HasWord(enable, "+cpuset");
      cg.version_ = CgroupVersion::kV2;
      cg.parents_ = {parent};
      cg.fs_mounts_ = {{"", "cgroup2", "", {}}};
      return cg;
    };
    if (absolute) {
      if (const std::string enable = V2Controllers(top); !enable.empty()) {
        auto parent = MakeAbsoluteParent(top, parent_name, enable);
        if (!parent) return std::move(parent).error();
        return under(*parent, enable);
      }
    } else {
      std::string self = JoinCgroupPath(v2->second, own.at(""));
      // A daemon started again from the leaf an earlier one moved itself into (NestedParent)
      // nests the sandboxes where that one did, so that it finds them.
      if (const std::string leaf = "/" + parent_name + ".daemon"; self.ends_with(leaf)) {
        self.resize(self.size() - leaf.size());
      }
      const std::string enable = V2Controllers(self);
      Result<std::string> nested =
          enable.empty()
              ? Result<std::string>(
                    Error{ErrorCode::kInternal, "cgroup: " + self + " lacks memory, pids or cpu"})
              : NestedParent(self, parent_name, enable);
      if (nested) return under(*nested, enable);
      // A login session's scope on a systemd host: cpu not delegated to it, or the shell that
      // started the daemon in it too. The sandboxes go below the hierarchy's root, as Docker's
      // cgroupfs driver puts its containers (root may make cgroups there).
      if (const std::string root = V2Controllers(top); !root.empty()) {
        log::Warn("cgroup: sandboxes cannot nest below the daemon's cgroup; they go below the root",
                  {{"why", nested.error().message}, {"parent", "/" + parent_name}});
        auto parent = MakeAbsoluteParent(top, "/" + parent_name, root);
        if (!parent) return std::move(parent).error();
        return under(*parent, root);
      }
      if (!enable.empty()) return std::move(nested).error();
    }
  }

  // memory, pids and cpu are needed; cpuset (nproc), cpuacct (the CPU time a sandbox's
  // /proc/stat shows) and freezer (pausing a sandbox) are used where the host has them, each in
  // a hierarchy of its own.
  std::vector<std::string> controllers(std::begin(kV1Controllers), std::end(kV1Controllers));
  std::vector<std::string> mountpoints;
  for (const char* optional : {"cpuset", "cpuacct", "freezer"}) {
    auto m = mounts.find(optional);
    if (m == mounts.end()) continue;
    bool shared = false;
    for (const auto& c : controllers) {
      auto it = mounts.find(c);
      shared = shared || (it != mounts.end() && it->second.mountpoint == m->second.mountpoint);
    }
    if (shared) continue;
    const std::string name = optional;
    (name == "cpuset"    ? cg.cpuset_
     : name == "cpuacct" ? cg.cpuacct_
                         : cg.freezer_) = static_cast<int>(controllers.size());
    controllers.push_back(optional);
  }
  for (const auto& ctrl : controllers) {
    auto m = mounts.find(ctrl);
    if (m == mounts.end()) {
      return Error{ErrorCode::kInternal,
                   "cgroup: no cgroup v2 controllers and no v1 " + ctrl + " hierarchy"};
    }
    std::string parent;
    if (absolute) {
      const std::string top = JoinCgroupPath(m->second, "/");
      auto made = MakeAbsoluteParent(top, parent_name, "");
      if (!made) return std::move(made).error();
      parent = *made;
      if (ctrl == "cpuset") {
        for (std::string at = top; at != parent;) {
          at = parent.substr(0, parent.find('/', at.size() + 1));
          if (int e = InheritCpuset(at); e != 0) {
            return SysError(ErrorCode::kInternal, "cgroup: cpuset of " + at, e);
          }
        }
      }
    } else {
      parent = JoinCgroupPath(m->second, OwnPathFor(own, ctrl)) + "/" + parent_name;
      if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) {
        return SysError(ErrorCode::kInternal, "cgroup: mkdir " + parent, errno);
      }
      if (ctrl == "cpuset") {
        if (int e = InheritCpuset(parent); e != 0) {
          return SysError(ErrorCode::kInternal, "cgroup: cpuset of " + parent, e);
        }
      }
    }
    cg.parents_.push_back(parent);
    // Inside, each hierarchy is mounted where Docker puts it: /sys/fs/cgroup/<its controllers>,
    // with a link per controller of a shared one (cpu -> cpu,cpuacct).
    if (std::find(mountpoints.begin(), mountpoints.end(), m->second.mountpoint) ==
        mountpoints.end()) {
      mountpoints.push_back(m->second.mountpoint);
      CgroupFsMount fs{m->second.controllers, "cgroup", m->second.controllers, {}};
      for (const auto& c : Split(m->second.controllers, ',')) {
        if (c != fs.dir && !c.starts_with("name=")) fs.links.push_back(c);
      }
      cg.fs_mounts_.push_back(std::move(fs));
    }
  }
  cg.version_ = CgroupVersion::kV1;
  return cg;
}

Result<std::unique_ptr<SandboxCgroup>> Cgroups::Create(const std::string& id, const Limits& limits,
                                                       uint32_t slot) const {
  std::vector<std::string> dirs;
  auto fail = [&](const std::string& what, int err) -> Error {
    for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) (void)RemoveCgroupDir(*it);
    return SysError(ErrorCode::kSandboxSetupFailed, "cgroup: " + what, err);
  };
  for (const auto& parent : parents_) {
    const std::string dir = parent + "/" + id;
    if (InjectedFault() || ::mkdir(dir.c_str(), 0755) != 0) return fail("mkdir: " + dir, errno);
    dirs.push_back(dir);
  }

  const int64_t memory = limits.memory_mb * 1024 * 1024;
  // The sandbox's processes and its PID 1, which is its keeper too (spawner.h).
  const int64_t pids = limits.pids;
  const int64_t period = 100000;
  const int64_t quota = limits.cpu_percent * period / 100;
  std::vector<std::pair<std::string, std::string>> settings;
  std::string oom_file;
  if (version_ == CgroupVersion::kV1) {
    // memsw is memory plus swap, so equal to the limit: no swap (it may only follow the limit).
    settings = {{dirs[0] + "/memory.limit_in_bytes", std::to_string(memory)},
                {dirs[0] + "/memory.memsw.limit_in_bytes", std::to_string(memory)},
                {dirs[1] + "/pids.max", std::to_string(pids)},
                {dirs[2] + "/cpu.cfs_period_us", std::to_string(period)},
                {dirs[2] + "/cpu.cfs_quota_us", std::to_string(quota)}};
    oom_file = dirs[0] + "/memory.oom_control";
  } else {
    // No memory.oom.group: an OOM kill takes one process, as on v1, and the sandbox lives on.
    settings = {{dirs[0] + "/memory.max", std::to_string(memory)},
                {dirs[0] + "/memory.swap.max", "0"},
                {dirs[0] + "/pids.max", std::to_string(pids)},
                {dirs[0] + "/cpu.max", std::to_string(quota) + " " + std::to_string(period)}};
    oom_file = dirs[0] + "/memory.events";
  }
  // Its CPUs: the parent's, or fewer where the cpu limit is below their count.
  const int cpuset = version_ == CgroupVersion::kV1 ? cpuset_ : (v2_cpuset_ ? 0 : -1);
  if (cpuset >= 0) {
    const std::string& parent = parents_[static_cast<size_t>(cpuset)];
    auto available = ReadFile(
        parent + (version_ == CgroupVersion::kV1 ? "/cpuset.cpus" : "/cpuset.cpus.effective"));
    if (!available) return fail("read " + parent + "/cpuset.cpus", errno);
    auto cpus = ParseCpuList(*available);
    if (!cpus) return fail("parse " + parent + "/cpuset.cpus", EINVAL);
    const std::string dir = dirs[static_cast<size_t>(cpuset)];
    const std::vector<int> picked = PickCpus(*cpus, limits.cpu_percent, slot);
    if (version_ == CgroupVersion::kV1) {
      auto mems = ReadFile(parent + "/cpuset.mems");
      if (!mems) return fail("read " + parent + "/cpuset.mems", errno);
      settings.emplace_back(dir + "/cpuset.cpus", FormatCpuList(picked));
      settings.emplace_back(dir + "/cpuset.mems", *mems);
    } else if (picked.size() < cpus->size()) {
      settings.emplace_back(dir + "/cpuset.cpus", FormatCpuList(picked));
    }
  }
  for (const auto& [file, value] : settings) {
    int err = InjectedFault() ? EIO : WriteString(file, value);
    // The swap files are absent without swap accounting; nothing to limit then.
    if (err == ENOENT &&
        (file.ends_with("memory.swap.max") || file.ends_with("memory.memsw.limit_in_bytes"))) {
      continue;
    }
    if (err != 0) return fail("write " + file, err);
  }

  auto opened = OpenDirs(dirs);
  if (!opened) {
    for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) (void)RemoveCgroupDir(*it);
  }
  return opened;
}

std::vector<std::string> Cgroups::DirsOf(const std::string& id) const {
  std::vector<std::string> dirs;
  for (const auto& parent : parents_) dirs.push_back(parent + "/" + id);
  return dirs;
}

Result<std::unique_ptr<SandboxCgroup>> Cgroups::OpenDirs(std::vector<std::string> dirs) const {
  std::string freezer;
  if (version_ == CgroupVersion::kV2) {
    freezer = dirs[0];
  } else if (freezer_ >= 0) {
    freezer = dirs[static_cast<size_t>(freezer_)];
  }
  std::vector<UniqueFd> procs;
  for (size_t i = 0; i < dirs.size();) {
    const std::string file = dirs[i] + "/cgroup.procs";
    UniqueFd fd(::open(file.c_str(), O_WRONLY | O_CLOEXEC));
    // A sandbox of a daemon that did not use the cpuset or cpuacct hierarchy has none there.
    if (!fd && errno == ENOENT && i >= std::size(kV1Controllers) &&
        version_ == CgroupVersion::kV1) {
      if (dirs[i] == freezer) freezer.clear();
      dirs.erase(dirs.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    if (!fd) return SysError(ErrorCode::kSandboxSetupFailed, "cgroup: open " + file, errno);
    procs.push_back(std::move(fd));
    ++i;
  }
  std::string oom_file =
      dirs[0] + (version_ == CgroupVersion::kV1 ? "/memory.oom_control" : "/memory.events");
  return std::make_unique<SandboxCgroup>(version_, std::move(dirs), std::move(procs),
                                         std::move(oom_file), std::move(freezer));
}

Result<std::unique_ptr<SandboxCgroup>> Cgroups::Open(const std::string& id) const {
  return OpenDirs(DirsOf(id));
}

void Cgroups::CleanupLeftovers(const std::vector<std::string>& keep) const {
  for (const auto& parent : parents_) {
    DIR* d = ::opendir(parent.c_str());
    if (d == nullptr) continue;
    std::vector<std::string> children;
    while (dirent* e = ::readdir(d)) {
      if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
      if (std::find(keep.begin(), keep.end(), e->d_name) != keep.end()) continue;
      children.push_back(parent + "/" + e->d_name);
    }
    ::closedir(d);
    for (const auto& dir : children) {
      log::Info("removing leftover sandbox cgroup", {{"path", dir}});
      if (version_ == CgroupVersion::kV2) (void)WriteString(dir + "/cgroup.kill", "1");
      KillMembers(dir);
      // A sandbox left frozen takes its SIGKILLs once thawed.
      (void)WriteString(
          dir + (version_ == CgroupVersion::kV2 ? "/cgroup.freeze" : "/freezer.state"),
          version_ == CgroupVersion::kV2 ? "0" : "THAWED");
      if (int err = RemoveCgroupDir(dir); err != 0) {
        log::Warn("cannot remove leftover cgroup", {{"path", dir}, {"errno", ErrnoName(err)}});
      }
    }
  }
}

}  // namespace sandstream::sandbox
