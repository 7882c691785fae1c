// Checkpoint and restore of a namespace sandbox with CRIU (CHECKPOINT.md): the whole tree
// under its PID 1 with its memory, and its writable layer, written to the sandbox's state
// directory; then made again in the sandbox's cgroups and taken back as after a restart.
//
// CRIU runs as the owner of the sandbox's user namespace (its first host id), keeping the
// daemon's capabilities: so it has every capability over the sandbox's namespaces, as their
// owner, even on a host whose root lacks CAP_SYS_RESOURCE, and the user namespace it makes on
// restore is owned by that id again, which the kernel's per-user counts need. That is CRIU's
// --unprivileged mode, with the changes in scripts/criu/. The daemon prepares what CRIU only
// takes as paths (the layer, a devpts, the init executable, lxcfs's files) in a directory the
// sandbox's ids can reach, and joins the restore to the sandbox's cgroups.
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <linux/magic.h>
#include <linux/sched.h>
#include <linux/securebits.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <linux/openat2.h>
#include <string>
#include <utility>
#include <vector>

#include "base/log.h"
#include "platform/fd.h"
#include "platform/proc.h"
#include "platform/signals.h"
#include "sandbox/criu_images.h"
#include "sandbox/embedded.h"
#include "sandbox/limits_view.h"
#include "sandbox/mounts.h"
#include "sandbox/namespace_sandbox.h"
#include "sandbox/namespace_state.h"

namespace sandstream::sandbox {
namespace {

namespace fs = std::filesystem;

constexpr std::chrono::seconds kCriuTimeout{300};
constexpr std::chrono::seconds kToolTimeout{300};
// Written last: a checkpoint directory without it is one a dying daemon left half written.
constexpr const char* kDoneFile = "checkpoint.done";
// In the state directory from a restore's start until its PID 1 has run its executable again.
constexpr const char* kRestoringFile = "restoring";
// What the restore needs to know that CRIU's images do not say.
constexpr const char* kFactsFile = "sandstream.conf";
// The fd number the layer's directory takes in CRIU at restore.
constexpr int kLayerFd = 5;

// One run of an external tool by the daemon, awaited without blocking it.
struct Tool {
  std::vector<std::string> argv;
  std::vector<std::string> env;
  uid_t owner = 0;  // not 0: runs as this uid (real, effective, saved), keeping its capabilities
  std::vector<std::pair<int, int>> fds;   // (the daemon's fd, its number in the tool)
  std::string log;                        // its stdout and stderr, appended
  const SandboxCgroup* cgroup = nullptr;  // joined before the exec
  std::string step;                       // what errors name
};

// In the child of RunTool's clone: async-signal-safe only.
[[noreturn]] void RunToolInChild(char* const* argv, char* const* envp, uid_t owner,
                                 const std::pair<int, int>* fds, size_t fd_count, int log_fd,
                                 int go_fd) {
  if (go_fd >= 0) {
    char go = 0;
    if (::read(go_fd, &go, 1) != 1) ::_exit(126);  // the parent gave up
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);
  // Each fd to its number: first all above any target, then down to the targets, which dup2
  // leaves inheritable while everything else is marked close-on-exec.
  int moved[8];
  for (size_t i = 0; i < fd_count && i < 8; ++i) {
    moved[i] = ::fcntl(fds[i].first, F_DUPFD, 100);
    if (moved[i] < 0) ::_exit(125);
  }
  const int null = ::open("/dev/null", O_RDONLY);
  if (null < 0 || ::dup2(null, 0) < 0 || ::dup2(log_fd, 1) < 0 || ::dup2(log_fd, 2) < 0) {
    ::_exit(125);
  }
  ::syscall(SYS_close_range, 3, ~0u, CLOSE_RANGE_CLOEXEC);
  for (size_t i = 0; i < fd_count && i < 8; ++i) {
    if (::dup2(moved[i], fds[i].second) < 0) ::_exit(125);
  }
  if (owner != 0) {
    // Every capability it has, inheritable and ambient, so that it keeps them across the exec
    // as a uid other than 0; and no fix-up of them when the uids change.
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    if (::syscall(SYS_capget, &header, data) != 0) ::_exit(124);
    for (auto& d : data) d.inheritable = d.permitted;
    if (::syscall(SYS_capset, &header, data) != 0) ::_exit(124);
    for (int cap = 0; cap < 64; ++cap) {
      if (data[cap / 32].permitted & (1u << (cap % 32))) {
        ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0);
      }
    }
    if (::prctl(PR_SET_SECUREBITS, SECBIT_NO_SETUID_FIXUP, 0, 0, 0) != 0) ::_exit(124);
    if (::syscall(SYS_setresuid, owner, owner, owner) != 0) ::_exit(124);
  }
  ::execve(argv[0], argv, envp);
  ::_exit(127);
}

// The milliseconds each step of a checkpoint or restore took, for the log.
class Steps {
 public:
  void Done(const char* step) {
    const auto now = std::chrono::steady_clock::now();
    text_ +=
        (text_.empty() ? "" : ", ") + std::string(step) + " " +
        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - last_).count()) +
        " ms";
    last_ = now;
  }
  const std::string& text() const { return text_; }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  std::string text_;
};

// What a sandbox that cannot be checkpointed can do instead.
constexpr std::string_view kInstead =
    "; pause it with \"freeze\", fork or snapshot it with \"memory\": false";

// What CRIU cannot take that a sandbox may hold, said the user's way.
constexpr std::pair<const char*, const char*> kKnownFailures[] = {
    {"ctty inheritance",
     "a process holds its terminal's /dev/tty open while another process group is in the "
     "terminal's foreground (an interactive sh, an editor): CRIU cannot restore that; end that "
     "process, or pause with \"freeze\""},
    {"Connected TCP socket",
     "a TCP connection to outside the sandbox is open: pause with \"freeze\""},
};

// Why a tool failed, from its log: the first error line that is not CRIU's probing for the
// iptables tools it can do without (or a known cause, said plainly), else the last line.
std::string Detail(const std::string& path) {
  auto text = ReadFile(path);
  if (!text || text->empty()) return "";
  for (const auto& [needle, plain] : kKnownFailures) {
    if (text->find(needle) != std::string::npos) return plain;
  }
  std::string last;
  std::string error;
  size_t start = 0;
  while (start < text->size()) {
    size_t end = text->find('\n', start);
    if (end == std::string::npos) end = text->size();
    const std::string line = text->substr(start, end - start);
    if (!line.empty()) last = line;
    // Not the probing for tools CRIU does without, not what the patches take another way, not
    // the closing "FAILED".
    if (error.empty() && line.find("Error") != std::string::npos &&
        line.find("tables") == std::string::npos &&
        line.find("kernel/hostname") == std::string::npos &&
        line.find("already assigned") == std::string::npos &&
        line.find("FAILED") == std::string::npos) {
      error = line;
    }
    start = end + 1;
  }
  std::string detail = error.empty() ? last : error;
  if (detail.size() > 300) detail.resize(300);
  return detail;
}

// Runs `t` to its end (or kills it after `timeout`): Ok when it exited 0.
Op<Result<void>> RunTool(const Tool& t, std::chrono::milliseconds timeout) {
  std::vector<char*> argv;
  for (const auto& a : t.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : t.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  UniqueFd log(::open(t.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!log) co_return SysError(ErrorCode::kSandboxSetupFailed, t.step + ": open " + t.log, errno);
  std::optional<Pipe> go;
  if (t.cgroup) {
    auto made = MakePipe(false);
    if (!made) co_return std::move(made).error();
    go = std::move(*made);
  }
  int pidfd = -1;
  clone_args args{};
  args.flags = CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  const pid_t pid = static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
  if (pid == 0) {
    if (go) go->write.reset();
    RunToolInChild(argv.data(), envp.data(), t.owner, t.fds.data(), t.fds.size(), log.get(),
                   go ? go->read.get() : -1);
  }
  if (pid < 0) co_return SysError(ErrorCode::kSandboxSetupFailed, t.step + ": clone3", errno);
  UniqueFd child(pidfd);
  Result<void> joined = Ok{};
  if (go) {
    go->read.reset();
    joined = t.cgroup->Attach(pid);
    const char byte = 1;
    if (joined && ::write(go->write.get(), &byte, 1) != 1) {
      joined = SysError(ErrorCode::kSandboxSetupFailed, t.step + ": start", errno);
    }
    go->write.reset();  // without the byte, the child ends itself
  }
  const bool ended = co_await Readable{child.get(), In(timeout)};
  if (!ended) (void)SignalPidfd(child.get(), SIGKILL);
  siginfo_t info{};
  while (::waitid(P_PIDFD, static_cast<id_t>(child.get()), &info, WEXITED) != 0 && errno == EINTR) {
  }
  if (!joined) co_return std::move(joined).error();
  if (!ended) {
    co_return Error{
        ErrorCode::kSandboxSetupFailed,
        t.step + ": did not finish in " + std::to_string(timeout.count() / 1000) + " s"};
  }
  if (info.si_code == CLD_EXITED && info.si_status == 0) co_return Ok{};
  const std::string how = info.si_code == CLD_EXITED
                              ? "exited with " + std::to_string(info.si_status)
                              : "was killed by " + SignalName(info.si_status);
  co_return Error{ErrorCode::kSandboxSetupFailed, t.step + ": " + t.argv[0] + " " + how};
}

// `error` with the failing tool's own last word, from its log.
Error WithDetail(Error error, const std::string& log) {
  const std::string detail = Detail(log);
  if (!detail.empty()) error.message += " (" + detail + ")";
  return error;
}

Result<void> CopyFile(const std::string& from, const std::string& to, mode_t mode) {
  auto bytes = ReadFile(from);
  if (!bytes) return std::move(bytes).error();
  return WriteFileAtomic(to, *bytes, mode);
}

// "<mnt_id hex>:<inode hex>" of PID 1's fd 4 (the layer), how CRIU names an external file.
Result<std::string> LayerKey(pid_t init) {
  const std::string fd = "/proc/" + std::to_string(init) + "/fd/4";
  auto info = ReadFile("/proc/" + std::to_string(init) + "/fdinfo/4");
  struct stat st {};
  if (!info || ::stat(fd.c_str(), &st) != 0) {
    return SysError(ErrorCode::kSandboxSetupFailed, "checkpoint: PID 1's layer fd", errno);
  }
  const size_t at = info->find("mnt_id:");
  if (at == std::string::npos) {
    return Error{ErrorCode::kSandboxSetupFailed, "checkpoint: PID 1's layer fd has no mnt_id"};
  }
  const unsigned long mnt = std::strtoul(info->c_str() + at + 7, nullptr, 10);
  char key[64];
  std::snprintf(key, sizeof key, "%lx:%lx", mnt, static_cast<unsigned long>(st.st_ino));
  return std::string(key);
}

// The value of `name=` in a facts file; empty if none.
std::string Fact(const std::string& facts, const std::string& name) {
  const std::string prefix = name + "=";
  size_t start = 0;
  while (start < facts.size()) {
    size_t end = facts.find('\n', start);
    if (end == std::string::npos) end = facts.size();
    if (facts.compare(start, prefix.size(), prefix) == 0) {
      return facts.substr(start + prefix.size(), end - start - prefix.size());
    }
    start = end + 1;
  }
  return "";
}

// The mounts a restore made in its stage, and the stage, gone (the sandbox has its own). Never
// recursive: a mount that stayed would be the sandbox's files.
void RemoveStage(const std::string& stage) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(stage, ec)) {
    const std::string path = entry.path().string();
    (void)::umount2(path.c_str(), MNT_DETACH);
    if (::rmdir(path.c_str()) != 0 && errno == ENOTDIR) (void)::unlink(path.c_str());
  }
  (void)::rmdir(stage.c_str());
}

// Every directory from `dir` up that this makes is 0711: CRIU's restored tasks resolve paths
// below it as the sandbox's root.
Result<void> MakeSearchable(const std::string& dir) {
  std::vector<fs::path> made;
  for (fs::path p = dir; !p.empty() && p != p.root_path(); p = p.parent_path()) {
    if (fs::exists(p)) break;
    made.push_back(p);
  }
  for (auto it = made.rbegin(); it != made.rend(); ++it) {
    if (::mkdir(it->c_str(), 0711) != 0 && errno != EEXIST) {
      return SysError(ErrorCode::kSandboxSetupFailed, "restore: mkdir " + it->string(), errno);
    }
    ::chmod(it->c_str(), 0711);
  }
  return Ok{};
}

// The lxcfs files a sandbox may show, as CRIU's keys for them (one per kViewFiles entry).
std::string ViewKey(size_t i) {
  return "view-" + std::to_string(i);
}

// CRIU's environment: where it keeps what it found out about the kernel (criu.kdat), which
// takes it milliseconds to find out again, shared by every run (they all run with the daemon's
// capabilities). CRIU keeps it only on a tmpfs, emptied with the kernel at a reboot: where
// /run is not one, a small one of its own is mounted there. Without it, CRIU only takes longer.
std::string CriuRuntimeDir(const std::string& restore_dir) {
  const std::string dir = restore_dir + "/.criu";
  if (::mkdir(dir.c_str(), 0700) != 0 && errno == ENOENT) {
    (void)MakeSearchable(restore_dir);
    (void)::mkdir(dir.c_str(), 0700);
  }
  struct statfs fs {};
  if (::statfs(dir.c_str(), &fs) == 0 && fs.f_type != TMPFS_MAGIC &&
      ::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              "size=1m,nr_inodes=64,mode=0700") != 0) {
    log::Warn("CRIU's cache directory could not be a tmpfs",
              {{"path", dir}, {"error", std::strerror(errno)}});
  }
  return "XDG_RUNTIME_DIR=" + dir;
}

// The files of a checkpoint a sandbox made from it links to (not its logs, which each writes).
bool IsImageFile(const std::string& name) {
  return name.ends_with(".img") || name == "init" || name == "layer.tar" || name == kFactsFile;
}

// `from` at `to`: a hard link, so that every sandbox made from one checkpoint reads the same
// pages (the page cache's once); a copy where the two are on different filesystems.
Result<void> LinkOrCopy(const std::string& from, const std::string& to) {
  if (::link(from.c_str(), to.c_str()) == 0) return Ok{};
  if (errno != EXDEV) return SysError(ErrorCode::kSandboxSetupFailed, "restore: link " + to, errno);
  std::error_code ec;
  if (!fs::copy_file(from, to, ec)) {
    return Error{ErrorCode::kSandboxSetupFailed, "restore: copy " + to + ": " + ec.message()};
  }
  return Ok{};
}

// A user namespace whose ids [inside, inside + count) are the host's [outside, ...), and whose
// 0 is the host's 0: for an idmapped mount that shows a tree's files, owned by the first range,
// as owned by the second, and lets the host's root make files in it.
Result<UniqueFd> ShiftingUserns(uint32_t inside, uint32_t outside, uint32_t count) {
  auto pipe = MakePipe(false);
  if (!pipe) return std::move(pipe).error();
  int pidfd = -1;
  clone_args args{};
  args.flags = CLONE_NEWUSER | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  const pid_t pid = static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
  if (pid == 0) {
    // Only to hold the namespace until the parent has opened it.
    pipe->write.reset();
    char byte;
    (void)!::read(pipe->read.get(), &byte, 1);
    ::_exit(0);
  }
  if (pid < 0)
    return SysError(ErrorCode::kSandboxSetupFailed, "restore: clone a user namespace", errno);
  UniqueFd child(pidfd);
  pipe->read.reset();
  const std::string map = "0 0 1\n" + std::to_string(inside) + " " + std::to_string(outside) + " " +
                          std::to_string(count) + "\n";
  const std::string proc = "/proc/" + std::to_string(pid);
  Result<void> written = Ok{};
  for (const char* file : {"/uid_map", "/gid_map"}) {
    UniqueFd f(::open((proc + file).c_str(), O_WRONLY | O_CLOEXEC));
    if (!f || ::write(f.get(), map.data(), map.size()) != static_cast<ssize_t>(map.size())) {
      written =
          SysError(ErrorCode::kSandboxSetupFailed, std::string("restore: write ") + file, errno);
      break;
    }
  }
  UniqueFd userns;
  if (written) {
    userns.reset(::open((proc + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC));
    if (!userns)
      written = SysError(ErrorCode::kSandboxSetupFailed, "restore: open the user namespace", errno);
  }
  pipe->write.reset();  // the child ends
  siginfo_t info{};
  while (::waitid(P_PIDFD, static_cast<id_t>(child.get()), &info, WEXITED) != 0 && errno == EINTR) {
  }
  if (!written) return std::move(written).error();
  return userns;
}

// `root`'s file `path` (a regular file below it, reached through no link) with every `from`
// replaced by `to`; nothing when it is not there.
Result<void> ReplaceInFile(int root, const char* path, const std::string& from,
                           const std::string& to) {
  open_how how{};
  how.flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  UniqueFd f(static_cast<int>(::syscall(SYS_openat2, root, path, &how, sizeof how)));
  if (!f) {
    if (errno == ENOENT || errno == ELOOP || errno == EXDEV) return Ok{};
    return SysError(ErrorCode::kSandboxSetupFailed, std::string("restore: open /") + path, errno);
  }
  struct stat st {};
  constexpr off_t kMaxSize = 1 << 20;
  if (::fstat(f.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > kMaxSize) return Ok{};
  std::string text(static_cast<size_t>(st.st_size), '\0');
  const ssize_t n = ::pread(f.get(), text.data(), text.size(), 0);
  if (n < 0)
    return SysError(ErrorCode::kSandboxSetupFailed, std::string("restore: read /") + path, errno);
  text.resize(static_cast<size_t>(n));
  bool changed = false;
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
    changed = true;
  }
  if (!changed) return Ok{};
  if (::ftruncate(f.get(), 0) != 0 ||
      ::pwrite(f.get(), text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    return SysError(ErrorCode::kSandboxSetupFailed, std::string("restore: write /") + path, errno);
  }
  return Ok{};
}

}  // namespace

void NamespaceSandbox::ContinueCutCheckpoint() const {
  if (HasCheckpoint() || !fs::exists(CheckpointDir())) return;
  auto cgroup = state_->cgroups->Open(id_);
  if (!cgroup) return;
  log::Warn("a checkpoint was cut short; the sandbox runs on", {{"sandbox", id_}});
  for (pid_t pid : (*cgroup)->Pids()) ::kill(pid, SIGCONT);
  (*cgroup)->Leave();
}

void RemoveRestoreStage(const std::string& restore_dir, const std::string& id) {
  const std::string stage = restore_dir + "/" + id;
  if (::access(stage.c_str(), F_OK) != 0) return;
  log::Info("removing a restore's leftover stage", {{"path", stage}});
  RemoveStage(stage);
}

bool NamespaceSandbox::HasCheckpoint() const {
  return ::access((CheckpointDir() + "/" + kDoneFile).c_str(), F_OK) == 0;
}

Result<void> NamespaceSandbox::CheckpointPossible() const {
  const std::string& criu = state_->options.criu;
  if (criu.empty() || ::access(criu.c_str(), X_OK) != 0) {
    return Error{ErrorCode::kNotImplemented,
                 "checkpoint: CRIU is not installed at '" + criu +
                     "' (scripts/install-criu builds it; the config's `criu` names it)"};
  }
  if (destroyed_ || checkpointed_ || !init_pidfd_) {
    return Error{ErrorCode::kConflict, "checkpoint: the sandbox has no running PID 1"};
  }
  if (layered_) {
    return Error{ErrorCode::kNotImplemented,
                 "checkpoint: a sandbox of an image template or a snapshot (an overlay root) "
                 "cannot be checkpointed yet" +
                     std::string(kInstead)};
  }
  if (has_volumes_) {
    return Error{ErrorCode::kNotImplemented,
                 "checkpoint: a sandbox with volumes cannot be checkpointed yet (CRIU does not "
                 "restore idmapped mounts)" +
                     std::string(kInstead)};
  }
  if (egress_slot_) {
    return Error{ErrorCode::kNotImplemented,
                 "checkpoint: a sandbox with network \"egress\" cannot be checkpointed yet (its "
                 "veth pair does not restore)" +
                     std::string(kInstead)};
  }
  std::string exe(256, '\0');
  const ssize_t n =
      ::readlink(("/proc/" + std::to_string(init_pid_) + "/exe").c_str(), exe.data(), exe.size());
  if (!spawner_.is_init() || n <= 0 || exe.substr(0, static_cast<size_t>(n)) != kInitPathInside) {
    return Error{ErrorCode::kNotImplemented,
                 "checkpoint: this sandbox was created by an earlier build of sandstreamd, whose "
                 "PID 1 cannot be checkpointed" +
                     std::string(kInstead)};
  }
  return Ok{};
}

Op<Result<void>> NamespaceSandbox::Checkpoint() {
  co_return co_await Dump(CheckpointDir(), false, true);
}

Op<Result<void>> NamespaceSandbox::CheckpointTo(std::string dir, bool durable) {
  co_return co_await Dump(dir, true, durable);
}

Op<Result<void>> NamespaceSandbox::Dump(const std::string& images, bool leave_running,
                                        bool durable) {
  if (auto possible = CheckpointPossible(); !possible) co_return std::move(possible).error();
  const uid_t owner = *ids_first_;
  std::error_code ec;
  fs::remove_all(images, ec);
  if (::mkdir(images.c_str(), 0700) != 0 || ::chown(images.c_str(), owner, owner) != 0) {
    co_return SysError(ErrorCode::kSandboxSetupFailed, "checkpoint: mkdir " + images, errno);
  }
  auto key = LayerKey(init_pid_);
  if (!key) co_return std::move(key).error();
  const std::string pid = std::to_string(init_pid_);
  Steps steps;
  // The keeper's connection is a socket of the host's, which CRIU cannot take: the daemon lets
  // go of it (PID 1 keeps everything for the next connection) and connects again after.
  spawner_.Leave();
  Tool dump;
  dump.step = "checkpoint: criu dump";
  dump.argv = {state_->options.criu, "dump", "--unprivileged", "-t", pid, "-D", images, "-o",
               "dump.log", "--network-lock", "skip", "--leave-stopped",
               // Connections between the sandbox's own processes (its network is its own) and
               // file locks (SQLite's, a package manager's) are part of what it was doing.
               "--tcp-established", "--file-locks",
               // What the sandbox binds from the host is found at the same host paths at restore;
               // what the daemon gives again has a key.
               "--external", "mnt[]", "--external", "mnt[/dev/shm]:shm", "--external",
               "mnt[/dev/pts]:pts", "--external", std::string("mnt[") + kInitPathInside + "]:init",
               "--external", "file[" + *key + "]"};
  if (limits_view_) {
    for (size_t i = 0; i < std::size(kViewFiles); ++i) {
      dump.argv.push_back("--external");
      dump.argv.push_back(std::string("mnt[/") + kViewFiles[i] + "]:" + ViewKey(i));
    }
  }
  dump.env = {CriuRuntimeDir(state_->options.restore_dir)};
  dump.owner = owner;
  dump.log = images + "/criu.out";
  Result<void> dumped = co_await RunTool(dump, kCriuTimeout);
  steps.Done("criu dump");
  // Stopped where they were, until the layer is copied: it is then what their memory knows.
  Result<void> saved = dumped;
  if (saved) {
    Tool tar;
    tar.step = "checkpoint: save the writable layer";
    tar.argv = {
        "/bin/tar",        "-C",  "/proc/" + pid + "/fd/4", "--xattrs", "--xattrs-include=*",
        "--numeric-owner", "-cf", images + "/layer.tar",    "."};
    tar.log = images + "/tar.out";
    saved = co_await RunTool(tar, kToolTimeout);
    if (!saved) saved = WithDetail(std::move(saved).error(), tar.log);
    steps.Done("layer");
  } else {
    saved = WithDetail(std::move(saved).error(), images + "/dump.log");
  }
  if (saved) saved = CopyFile("/proc/" + pid + "/exe", images + "/init", 0555);
  if (saved) {
    // The ids the layer's files and the user namespace's maps are in, and the sandbox's id, which
    // its hostname and /etc/hosts say: a sandbox made from this with others changes them.
    const std::string facts = "layer=" + *key + "\nview=" + (limits_view_ ? "1" : "0") +
                              "\nids=" + std::to_string(owner) + "\nid=" + id_ + "\n";
    saved = WriteFileAtomic(images + "/" + kFactsFile, facts, 0600);
  }
  if (saved && durable) {
    // On disk before the sandbox is gone: it survives the host's crash from here on.
    Tool sync;
    sync.step = "checkpoint: sync";
    sync.argv = {"/bin/sync", "-f", images + "/layer.tar"};
    sync.log = images + "/sync.out";
    saved = co_await RunTool(sync, kToolTimeout);
    steps.Done("sync");
  }
  if (saved) saved = WriteFileAtomic(images + "/" + kDoneFile, "", 0600);
  if (saved) log::Info("checkpoint written", {{"sandbox", id_}, {"steps", steps.text()}});
  if (!saved || leave_running) {
    // Nothing was ended: the tree goes on where it stopped, and the keeper is connected again.
    if (dumped && cgroup_) {
      for (pid_t p : cgroup_->Pids()) ::kill(p, SIGCONT);
    }
    if (auto keeper = co_await EnsureKeeper(); !keeper) {
      log::Warn("the keeper did not answer after a checkpoint",
                {{"sandbox", id_}, {"error", keeper.error().message}});
      if (saved) saved = std::move(keeper).error();
    }
    co_return saved;
  }
  checkpointed_ = true;
  KillInit();
  (void)co_await Readable{init_pidfd_.get(), In(std::chrono::milliseconds(2000))};
  ReapInit();
  init_pidfd_.reset();
  init_pid_ = -1;
  co_return Ok{};
}

Op<Result<void>> NamespaceSandbox::StartFromCheckpoint(const std::string& from) {
  const std::string& criu = state_->options.criu;
  if (criu.empty() || ::access(criu.c_str(), X_OK) != 0) {
    co_return Error{ErrorCode::kNotImplemented, "restore: CRIU is not installed at '" + criu + "'"};
  }
  if (layered_ || has_volumes_) {
    co_return Error{ErrorCode::kNotImplemented,
                    "restore: a sandbox with an overlay root or volumes cannot be made from a "
                    "checkpoint yet"};
  }
  if (::access((from + "/" + kDoneFile).c_str(), F_OK) != 0) {
    co_return Error{ErrorCode::kNotFound, "restore: no whole checkpoint in " + from};
  }
  const uid_t owner = *ids_first_;
  const auto fail = [](const std::string& step, int err) {
    return SysError(ErrorCode::kSandboxSetupFailed, step, err);
  };
  if (::mkdir(dir_.c_str(), 0700) != 0) {
    co_return fail("state: mkdir: " + dir_, errno);
  }
  if (::mkdir((dir_ + "/root").c_str(), 0755) != 0 || ::chown(dir_.c_str(), owner, owner) != 0) {
    co_return fail("state: " + dir_, errno);
  }
  const std::string images = CheckpointDir();
  if (::mkdir(images.c_str(), 0700) != 0 || ::chown(images.c_str(), owner, owner) != 0) {
    co_return fail("restore: mkdir " + images, errno);
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(from, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || !IsImageFile(name)) continue;
    // CRIU reads some in the user namespace it makes, where the ids of the sandbox that wrote
    // them are no one's: readable by others, which only the sandboxes' owners, root, reach
    // (both directories are theirs alone).
    if (::chmod(entry.path().c_str(), 0644) != 0) co_return fail("restore: chmod " + name, errno);
    if (auto r = LinkOrCopy(entry.path().string(), images + "/" + name); !r) co_return r;
  }
  if (ec)
    co_return Error{ErrorCode::kSandboxSetupFailed, "restore: list " + from + ": " + ec.message()};
  auto facts = ReadFile(images + "/" + kFactsFile);
  if (!facts) co_return std::move(facts).error();
  if (auto r = AdoptImages(*facts); !r) co_return r;
  if (auto r = WriteFileAtomic(images + "/" + kDoneFile, "", 0600); !r) co_return r;
  checkpointed_ = true;
  co_return co_await Restore();
}

Result<void> NamespaceSandbox::AdoptImages(const std::string& facts) {
  const std::string images = CheckpointDir();
  const uint32_t from_ids =
      static_cast<uint32_t>(std::strtoul(Fact(facts, "ids").c_str(), nullptr, 10));
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(images, ec)) {
    const std::string name = entry.path().filename().string();
    const bool userns = name.starts_with("userns-");
    if (!name.ends_with(".img") || (!userns && !name.starts_with("utsns-"))) continue;
    auto image = ReadFile(entry.path().string());
    if (!image) return std::move(image).error();
    Result<std::string> made =
        userns ? ShiftUsernsImage(*image, from_ids, *ids_first_, state_->options.host_id_range)
               : RenameUtsImage(*image, id_);
    if (!made) return Error{ErrorCode::kSandboxSetupFailed, "restore: " + made.error().message};
    // A file of its own in place of the link, as if it had written it.
    if (auto r = WriteFileAtomic(entry.path().string(), *made, 0600); !r) return r;
    if (::chown(entry.path().c_str(), *ids_first_, *ids_first_) != 0) {
      return SysError(ErrorCode::kSandboxSetupFailed, "restore: chown " + name, errno);
    }
  }
  if (ec)
    return Error{ErrorCode::kSandboxSetupFailed, "restore: list " + images + ": " + ec.message()};
  return Ok{};
}

Result<void> NamespaceSandbox::RenameInLayer(const std::string& root, const std::string& from_id) {
  UniqueFd dir(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return SysError(ErrorCode::kSandboxSetupFailed, "restore: open " + root, errno);
  for (const char* file : {"etc/hostname", "etc/hosts"}) {
    if (auto r = ReplaceInFile(dir.get(), file, from_id, id_); !r) return r;
  }
  return Ok{};
}

Result<void> NamespaceSandbox::AdoptCheckpoint() {
  // Opened already by a Reattach that found no PID 1 (a SandboxCgroup removes its directories
  // when it goes: that one is kept).
  if (!cgroup_) {
    auto cgroup = state_->cgroups->Open(id_);
    if (!cgroup) cgroup = state_->cgroups->Create(id_, limits_, *Slot());
    if (!cgroup) return std::move(cgroup).error();
    cgroup_ = std::move(*cgroup);
  }
  for (pid_t pid : cgroup_->Pids()) ::kill(pid, SIGKILL);
  spawner_.Leave();
  init_pidfd_.reset();
  init_pid_ = -1;
  adopted_.clear();
  checkpointed_ = true;
  return Ok{};
}

Op<Result<void>> NamespaceSandbox::Restore() {
  if (!checkpointed_) co_return Ok{};
  const std::string images = CheckpointDir();
  auto facts = ReadFile(images + "/" + kFactsFile);
  if (!HasCheckpoint() || !facts) {
    co_return Error{ErrorCode::kNotFound, "restore: no whole checkpoint in " + images};
  }
  if (state_->options.criu.empty() || ::access(state_->options.criu.c_str(), X_OK) != 0) {
    co_return Error{ErrorCode::kNotImplemented,
                    "restore: CRIU is not installed at '" + state_->options.criu + "'"};
  }
  const uid_t owner = *ids_first_;
  const std::string stage = state_->options.restore_dir + "/" + id_;
  if (auto r = MakeSearchable(state_->options.restore_dir); !r) co_return std::move(r).error();
  RemoveStage(stage);
  if (::mkdir(stage.c_str(), 0711) != 0) {
    co_return SysError(ErrorCode::kSandboxSetupFailed, "restore: mkdir " + stage, errno);
  }
  struct StageGuard {
    std::string path;
    ~StageGuard() { RemoveStage(path); }
  } guard{stage};
  Steps steps;
  const auto fail = [&](const std::string& step, int err) {
    return SysError(ErrorCode::kSandboxSetupFailed, "restore: " + step, err);
  };

  // The writable layer, a tmpfs as the sandbox had, with the files it held.
  const std::string layer = stage + "/layer";
  const int64_t mb = WritableMb(limits_);
  const std::string layer_options =
      "size=" + std::to_string(mb) + "m,nr_inodes=" + std::to_string(mb * 256) +
      ",mode=0755,uid=" + std::to_string(owner) + ",gid=" + std::to_string(owner);
  if (::mkdir(layer.c_str(), 0755) != 0 ||
      ::mount("tmpfs", layer.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, layer_options.c_str()) != 0) {
    co_return fail("mount the writable layer", errno);
  }
  // Its files were owned by the ids of the sandbox the checkpoint was taken of: through an
  // idmapped mount that shows this one's as those, they are written as this one's.
  const uint32_t layer_ids =
      static_cast<uint32_t>(std::strtoul(Fact(*facts, "ids").c_str(), nullptr, 10));
  UniqueFd shifted;
  if (layer_ids != owner) {
    auto userns = ShiftingUserns(owner, layer_ids, state_->options.host_id_range);
    if (!userns) co_return std::move(userns).error();
    shifted.reset(static_cast<int>(
        ::open_tree(AT_FDCWD, layer.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)));
    mount_attr attr{};
    attr.attr_set = MOUNT_ATTR_IDMAP;
    attr.userns_fd = static_cast<uint64_t>(userns->get());
    if (!shifted || ::mount_setattr(shifted.get(), "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
      co_return fail("idmap the writable layer", errno);
    }
  }
  Tool untar;
  untar.step = "restore: the writable layer";
  untar.argv = {"/bin/tar",
                "-C",
                shifted ? "/proc/self/fd/3" : layer,
                "--xattrs",
                "--xattrs-include=*",
                "--numeric-owner",
                "-xpf",
                images + "/layer.tar"};
  if (shifted) untar.fds = {{shifted.get(), 3}};
  untar.log = images + "/tar.out";
  if (auto r = co_await RunTool(untar, kToolTimeout); !r) {
    co_return WithDetail(std::move(r).error(), untar.log);
  }
  shifted.reset();
  steps.Done("layer");
  if (const std::string from_id = Fact(*facts, "id"); !from_id.empty() && from_id != id_) {
    if (auto r = RenameInLayer(layer + "/root", from_id); !r) co_return r;
  }
  // Its terminals' filesystem, a new devpts instance with the same options.
  const std::string pts = stage + "/pts";
  const std::string pts_options =
      "newinstance,ptmxmode=0666,mode=0620,gid=" + std::to_string(owner + kTtyGroupId) +
      ",max=" + std::to_string(kPtysPerSandbox);
  if (::mkdir(pts.c_str(), 0755) != 0 ||
      ::mount("devpts", pts.c_str(), "devpts", MS_NOSUID | MS_NOEXEC, pts_options.c_str()) != 0) {
    co_return fail("mount devpts", errno);
  }
  // Its ptmx belongs to the root of the user namespace that mounted it: the sandbox's, as when
  // the sandbox mounted its own (a terminal's master is restored with that owner).
  if (::chown((pts + "/ptmx").c_str(), owner, owner) != 0) co_return fail("chown ptmx", errno);
  // The very executable PID 1 ran, for its memory's file-backed pages; the sandbox binds it
  // from here for as long as it runs (and checkpoints it again from here): one file per
  // executable, shared by every sandbox restored from it.
  auto executable = ReadFile(images + "/init");
  if (!executable) co_return std::move(executable).error();
  const std::string init = state_->options.restore_dir + "/" + InitExecutableName(*executable);
  if (::access(init.c_str(), F_OK) != 0) {
    if (auto r = WriteFileAtomic(init, *executable, 0555); !r) co_return std::move(r).error();
  }
  std::vector<std::string> views;
  if (Fact(*facts, "view") == "1") {
    if (!state_->view) co_return Error{ErrorCode::kSandboxSetupFailed, "restore: lxcfs is gone"};
    auto files = co_await state_->view->Files();
    if (!files) co_return std::move(files).error();
    for (size_t i = 0; i < files->size(); ++i) {
      const std::string at = stage + "/" + ViewKey(i);
      UniqueFd created(::open(at.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0444));
      if (!created ||
          ::move_mount((*files)[i].get(), "", AT_FDCWD, at.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0) {
        co_return fail("lxcfs file " + at, errno);
      }
      views.push_back("mnt[" + ViewKey(i) + "]:" + at);
    }
  }
  if (!cgroup_) {
    auto made = state_->cgroups->Create(id_, limits_, *Slot());
    if (!made) co_return std::move(made).error();
    cgroup_ = std::move(*made);
  }
  UniqueFd layer_fd(::open(layer.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!layer_fd) co_return fail("open the writable layer", errno);
  Tool restore;
  restore.step = "restore: criu restore";
  restore.argv = {state_->options.criu,
                  "restore",
                  "--unprivileged",
                  "-D",
                  images,
                  "-o",
                  "restore.log",
                  "--root",
                  layer + "/root",
                  "--restore-detached",
                  "--pidfile",
                  stage + "/pidfile",
                  "--network-lock",
                  "skip",
                  "--tcp-established",
                  "--file-locks",
                  "--external",
                  "mnt[]",
                  "--external",
                  "mnt[shm]:" + layer + "/shm",
                  "--external",
                  "mnt[pts]:" + pts,
                  "--external",
                  "mnt[init]:" + init,
                  "--inherit-fd",
                  "fd[" + std::to_string(kLayerFd) + "]:file[" + Fact(*facts, "layer") + "]"};
  for (const auto& view : views) {
    restore.argv.push_back("--external");
    restore.argv.push_back(view);
  }
  restore.env = {CriuRuntimeDir(state_->options.restore_dir)};
  restore.owner = owner;
  restore.fds = {{layer_fd.get(), kLayerFd}};
  restore.cgroup = cgroup_.get();
  restore.log = images + "/criu.out";
  // Until PID 1 has run its executable again: a daemon that dies before has the next one do it.
  if (auto r = WriteFileAtomic(dir_ + "/" + kRestoringFile, "", 0600); !r) {
    co_return std::move(r).error();
  }
  steps.Done("stage");
  if (auto r = co_await RunTool(restore, kCriuTimeout); !r) {
    (void)::unlink((dir_ + "/" + kRestoringFile).c_str());
    co_return WithDetail(std::move(r).error(), images + "/restore.log");
  }
  steps.Done("criu restore");
  // PID 1 runs again: from here on the sandbox is not checkpointed, whatever follows.
  (void)::unlink((images + "/" + kDoneFile).c_str());
  checkpointed_ = false;
  Result<void> reattached = co_await ReattachKeeper();
  steps.Done("keeper");
  if (reattached) reattached = co_await FinishRestore();
  if (!reattached) {
    KillInit();
    co_return Error{ErrorCode::kSandboxSetupFailed,
                    "restore: the restored keeper: " + reattached.error().message};
  }
  steps.Done("PID 1 again");
  log::Info("checkpoint restored", {{"sandbox", id_}, {"steps", steps.text()}});
  co_return Ok{};
}

bool NamespaceSandbox::RestoreUnfinished() const {
  return ::access((dir_ + "/" + kRestoringFile).c_str(), F_OK) == 0;
}

Op<Result<void>> NamespaceSandbox::FinishRestore() {
  // PID 1 runs its executable again, in place: restored, its memory was made by CRIU in the
  // host's user namespace, which would leave its children's /proc files out of their
  // namespace's reach and its next checkpoint refused.
  UniqueFd exe(::open(("/proc/" + std::to_string(init_pid_) + "/root" + kInitPathInside).c_str(),
                      O_PATH | O_CLOEXEC));
  if (!exe)
    co_return SysError(ErrorCode::kSandboxSetupFailed, "restore: open PID 1's executable", errno);
  if (auto again = co_await spawner_.Upgrade(exe.get()); !again) co_return again;
  (void)ExemptFromOomKiller(init_pid_);
  (void)::unlink((dir_ + "/" + kRestoringFile).c_str());
  // Its disk is free again; a failed restore keeps the images for inspection.
  std::error_code ec;
  fs::remove_all(CheckpointDir(), ec);
  co_return Ok{};
}

}  // namespace sandstream::sandbox
