// NamespaceRuntime: creating a sandbox (the parent's side of the clone, in order; the child's is
// init_setup.cc), killing its processes through its PID 1, and tearing everything down.
#include "sandbox/namespace_runtime.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <sstream>
#include <system_error>
#include <utility>
#include <vector>

#include "base/log.h"
#include "platform/fd.h"
#include "platform/signals.h"
#include "sandbox/cgroup.h"
#include "sandbox/child_report.h"
#include "sandbox/embedded.h"
#include "sandbox/fault.h"
#include "sandbox/init_setup.h"
#include "sandbox/limits_view.h"
#include "sandbox/mounts.h"
#include "sandbox/net.h"
#include "sandbox/seccomp.h"
#include "sandbox/spawn.h"
#include "sandbox/spawner.h"
#include "sandbox/thread_op.h"
#include "sandbox/userns.h"

namespace sandstream::sandbox {

namespace fs = std::filesystem;

struct NamespaceRuntime::State {
  explicit State(NamespaceRuntimeOptions o)
      : options(std::move(o)),
        ids(options.host_id_base, options.host_id_range, options.max_sandboxes) {}

  NamespaceRuntimeOptions options;
  HostSystem host;
  std::optional<Cgroups> cgroups;
  SeccompProgram seccomp;         // default profile
  SeccompProgram seccomp_userns;  // the same, nested user namespaces allowed
  UniqueFd init_exe;
  UniqueFd spawner_exe;
  int64_t nofile_hard = 0;
  UniqueFd host_netns;  // the daemon's own network namespace, to come back to (Socket)
  std::unique_ptr<LimitsView> view;  // null: sandboxes see the host's /proc/meminfo ...
  // Sandboxes let go alive for the next daemon: lxcfs must outlive this one for them.
  size_t released = 0;

  std::mutex mu;  // guards ids and dying
  IdRangePool ids;
  // Pidfds of killed inits that could not be reaped yet: PID 1 stays until the daemon has
  // reaped its own children in that namespace.
  std::vector<UniqueFd> dying;

  void Dying(UniqueFd pidfd) {
    std::lock_guard lock(mu);
    dying.push_back(std::move(pidfd));
  }

  void ReapDying() {
    std::lock_guard lock(mu);
    std::erase_if(dying, [](const UniqueFd& fd) {
      siginfo_t info{};
      return ::waitid(P_PIDFD, static_cast<id_t>(fd.get()), &info, WEXITED | WNOHANG) == 0 &&
             info.si_pid != 0;
    });
  }
};

namespace {

constexpr uint64_t kCloneFlags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET |
                                 CLONE_NEWUTS | CLONE_NEWIPC;
constexpr int kReadyTimeoutMs = 10000;
constexpr int kKillTimeoutMs = 5000;
// A veth pair and a table take about a millisecond; far longer means the kernel is stuck.
constexpr std::chrono::seconds kNetTimeout{30};

// A sandbox id names its state directory and cgroups: a plain name, nothing to resolve.
Result<void> CheckPlainId(const std::string& id) {
  if (id.empty() || id.find('/') != std::string::npos || id[0] == '.') {
    return Error{ErrorCode::kInvalidRequest, "sandbox id must be a plain name: " + id};
  }
  return Ok{};
}

// The pid a pidfd names (its "Pid:" in fdinfo), or -1 once the process has been reaped.
pid_t PidOfPidfd(int pidfd) {
  auto info = ReadFile("/proc/self/fdinfo/" + std::to_string(pidfd));
  if (!info) return -1;
  const size_t at = info->find("\nPid:");
  if (at == std::string::npos) return -1;
  return static_cast<pid_t>(std::strtol(info->c_str() + at + 5, nullptr, 10));
}

// One byte with a deadline; false on timeout, EOF or error.
Op<bool> ReadByte(int fd, char expected, int timeout_ms) {
  const Deadline deadline = In(std::chrono::milliseconds(timeout_ms));
  for (;;) {
    char c = 0;
    const ssize_t n = ::recv(fd, &c, 1, MSG_DONTWAIT);
    if (n == 1) co_return c == expected;
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || errno != EAGAIN) co_return false;
    const bool ready = co_await Readable{fd, deadline};
    if (!ready && std::chrono::steady_clock::now() >= deadline) co_return false;
  }
}

// PID 1 and the spawner must outlive whatever fills the sandbox's memory: the OOM killer of
// their cgroup takes one of the sandbox's processes instead (launch.cc). Lowering the score
// needs CAP_SYS_RESOURCE; without it they keep the daemon's, still below the processes'.
Result<void> ExemptFromOomKiller(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/oom_score_adj";
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd || ::write(fd.get(), "-1000", 5) != 5) {
    if (errno == EACCES) {
      static bool warned = false;
      if (!std::exchange(warned, true)) {
        log::Warn("no CAP_SYS_RESOURCE: sandbox inits and spawners keep the daemon's oom_score_adj");
      }
      return Ok{};
    }
    return SysError(ErrorCode::kSandboxSetupFailed, "oom: write " + path, errno);
  }
  return Ok{};
}

class NamespaceSandbox final : public Sandbox {
 public:
  NamespaceSandbox(std::shared_ptr<NamespaceRuntime::State> state, const SandboxSpec& spec,
                   std::string dir)
      : state_(std::move(state)), id_(spec.id), dir_(std::move(dir)), limits_(spec.limits),
        allow_nested_userns_(spec.allow_nested_userns), layered_(!spec.layers.empty()),
        user_uid_(spec.user_uid), user_gid_(spec.user_gid),
        spawner_([state = state_](UniqueFd pidfd) { state->Dying(std::move(pidfd)); }) {}
  // Destroy() is the way to end a sandbox; this only makes sure nothing is left running.
  ~NamespaceSandbox() override { DestroyNow(); }

  const std::string& id() const override { return id_; }
  std::string RootPath() const override { return "/proc/" + std::to_string(init_pid_) + "/root"; }
  // PID 1 holds the layer's tmpfs open as fd 4 (BuildRootInChild); nothing mounts it anywhere.
  std::string WritableLayer() const override {
    return layered_ ? "/proc/" + std::to_string(init_pid_) + "/fd/4/upper" : std::string();
  }
  uint64_t OomKills() const override { return cgroup_ ? cgroup_->OomKills() : 0; }
  bool LimitsView() const override { return limits_view_; }
  std::optional<uint32_t> HostId(uint32_t inside) const override {
    if (!ids_first_ || inside >= state_->options.host_id_range) return std::nullopt;
    return *ids_first_ + inside;
  }

  // The index of its id range: what names its egress link, table and addresses.
  std::optional<uint32_t> Slot() const {
    if (!ids_first_) return std::nullopt;
    return (*ids_first_ - state_->options.host_id_base) / state_->options.host_id_range;
  }

  std::optional<EgressAddresses> Egress() const override {
    if (!egress_slot_ || !state_->options.egress) return std::nullopt;
    const auto& e = *state_->options.egress;
    return EgressAddresses{*egress_slot_, e.Gateway(*egress_slot_), e.Address(*egress_slot_)};
  }

  Op<Result<SpawnedProcess>> Spawn(ProcessSpec spec) override {
    if (destroyed_) co_return Error{ErrorCode::kNotFound, "sandbox " + id_ + " is deleted"};
    Result<void> keeper = co_await EnsureKeeper();
    if (!keeper) co_return std::move(keeper).error();
    SpawnContext ctx;
    ctx.spawner = &spawner_;
    ctx.seccomp = allow_nested_userns_ ? state_->seccomp_userns.program()
                                       : state_->seccomp.program();
    ctx.open_files = std::min<int64_t>(limits_.open_files, state_->nofile_hard);
    ctx.user_uid = user_uid_;
    ctx.user_gid = user_gid_;
    if (spec.pty) {
      // The sandbox's own devpts: inside, the terminal is /dev/pts/N and `tty` says so.
      ctx.ptmx = "/proc/" + std::to_string(init_pid_) + "/root/dev/pts/ptmx";
      ctx.host_id_base = ids_first_.value_or(0);
    }
    co_return co_await SpawnInSandbox(std::move(ctx), std::move(spec));
  }

  Op<Result<std::optional<FileWriter>>> StartFileWriter(int file) override {
    if (destroyed_) co_return Error{ErrorCode::kNotFound, "sandbox " + id_ + " is deleted"};
    Result<void> keeper = co_await EnsureKeeper();
    if (!keeper) co_return std::move(keeper).error();
    auto data = MakePipe(false);
    if (!data) co_return std::move(data).error();
    auto exit = MakePipe(true);
    if (!exit) co_return std::move(exit).error();
    GrowPipe(data->write.get(), 1 << 20);
    if (::fcntl(data->write.get(), F_SETFL, O_NONBLOCK) != 0) {
      co_return SysError(ErrorCode::kInternal, "files: writer: fcntl", errno);
    }
    Result<Launched> launched =
        co_await spawner_.Copy(data->read.get(), file, exit->write.get());
    if (!launched) co_return std::move(launched).error();
    FileWriter w;
    w.pid = launched->pid;
    w.pidfd = std::move(launched->pidfd);
    w.input = std::move(data->write);
    w.exit_fd = std::move(exit->read);
    co_return std::optional<FileWriter>(std::move(w));
  }

  // The calling thread enters the sandbox's network namespace (through PID 1's pidfd) for the
  // one socket() call and comes straight back: three syscalls, none of which waits on the
  // sandbox. A thread that could not come back must not go on in a sandbox's namespace.
  Result<UniqueFd> Socket() override {
    if (destroyed_ || !init_pidfd_) {
      return Error{ErrorCode::kNotFound, "sandbox " + id_ + " is deleted"};
    }
    if (::setns(init_pidfd_.get(), CLONE_NEWNET) != 0) {
      return SysError(ErrorCode::kInternal, "ports: setns into the sandbox", errno);
    }
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    const int err = errno;
    if (::setns(state_->host_netns.get(), CLONE_NEWNET) != 0) {
      log::Error("could not leave a sandbox's network namespace", {{"sandbox", id_}});
      std::abort();
    }
    if (!fd) return SysError(ErrorCode::kInternal, "ports: socket", err);
    return fd;
  }

  // The keeper died (killed from the host): what it kept is lost, the sandbox is not.
  Op<Result<void>> EnsureKeeper() {
    if (spawner_.connected()) co_return Ok{};
    log::Warn("sandbox keeper gone; starting another", {{"sandbox", id_}});
    co_return co_await StartKeeper();
  }

  // The keeper: started with the sandbox, it holds PID 1's pidfd and control socket and every
  // process's pipes for a daemon started later (spawner.h).
  Op<Result<void>> StartKeeper() {
    SpawnerSite site;
    site.init_pidfd = init_pidfd_.get();
    site.cgroup_procs = cgroup_->ProcsFds();
    site.exe_fd = state_->spawner_exe.get();
    site.socket_path = KeeperSocket();
    std::vector<int> held{init_pidfd_.get(), control_.get()};
    Result<void> started = co_await spawner_.Start(std::move(site), std::move(held));
    if (!started) co_return std::move(started).error();
    co_return ExemptFromOomKiller(spawner_.pid());
  }

  // Takes back what an earlier daemon left: the keeper at its socket, the cgroups, PID 1's
  // pidfd and control socket and every kept process (for TakeAdopted).
  Op<Result<void>> Reattach() {
    Result<void> connected =
        co_await spawner_.Connect(KeeperSocket(), state_->spawner_exe.get());
    if (!connected) co_return std::move(connected).error();
    auto cgroup = state_->cgroups->Open(id_);
    if (!cgroup) co_return std::move(cgroup).error();
    cgroup_ = std::move(*cgroup);
    Result<std::vector<KeptEntry>> kept = co_await spawner_.List();
    if (!kept) co_return std::move(kept).error();
    for (KeptEntry& e : *kept) {
      if (e.pid == 0) {
        if (e.fds.size() == 2) {
          init_pidfd_ = std::move(e.fds[0]);
          control_ = std::move(e.fds[1]);
        }
        continue;
      }
      if (e.tag & kKeptCopy) {
        // A file writer of the earlier daemon's: its upload ended with that daemon.
        spawner_.Forget(e.pid);
        continue;
      }
      Result<AdoptedProcess> p = FromKept(e);
      if (!p) {
        log::Warn("a kept process could not be taken back",
                  {{"sandbox", id_}, {"error", p.error().message}});
        continue;
      }
      adopted_.push_back(std::move(*p));
    }
    if (!init_pidfd_ || !control_) co_return Error{ErrorCode::kNotFound, "keeper: holds no PID 1"};
    adopted_init_ = true;
    init_pid_ = PidOfPidfd(init_pidfd_.get());
    if (init_pid_ <= 0 || Ended()) co_return Error{ErrorCode::kNotFound, "PID 1 has exited"};
    auto mountinfo = ReadFile("/proc/" + std::to_string(init_pid_) + "/mountinfo");
    limits_view_ = mountinfo && HasMountAt(*mountinfo, "/proc/meminfo", "fuse.lxcfs");
    // An answer to a kill request the earlier daemon did not wait for must not answer ours.
    char stale[64];
    while (::recv(control_.get(), stale, sizeof stale, MSG_DONTWAIT) > 0) {
    }
    co_return Ok{};
  }

  // Where the keeper listens for a daemon started later.
  std::string KeeperSocket() const { return dir_ + "/keeper.sock"; }

  std::vector<AdoptedProcess> TakeAdopted() override { return std::exchange(adopted_, {}); }

  void Release() override {
    if (destroyed_) return;
    destroyed_ = true;
    ++state_->released;
    // The keeper keeps PID 1, the pipes and the logs; the cgroups and mounts stay as they are.
    spawner_.Leave();
    if (cgroup_) cgroup_->Leave();
    init_pidfd_.reset();
    control_.reset();
  }

  void Forget(pid_t pid) override { spawner_.Forget(pid); }

  void CloseStdin(pid_t pid) override { spawner_.Release(pid, kKeptStdin); }

  void SignalGroup(pid_t pgid, int sig) override {
    if (cgroup_) cgroup_->SignalGroup(pgid, sig);
  }

  int LifeFd() const override { return init_pidfd_.get(); }

  bool Ended() const override {
    if (!init_pidfd_) return destroyed_;
    pollfd p{init_pidfd_.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) == 1) return true;
    // A killed PID 1 exits only once the namespace's other processes are reaped, which the
    // daemon is doing when it asks: it is already exiting (PF_EXITING in /proc/<pid>/stat). It
    // is unreaped, so its pid names it still.
    auto stat = ReadFile("/proc/" + std::to_string(init_pid_) + "/stat");
    if (!stat) return false;
    const size_t paren = stat->rfind(')');
    if (paren == std::string::npos) return false;
    std::istringstream fields(stat->substr(paren + 2));
    std::string state;
    unsigned long skip = 0;
    unsigned long flags = 0;
    fields >> state >> skip >> skip >> skip >> skip >> skip >> flags;
    constexpr unsigned long kPfExiting = 0x4;
    return (flags & kPfExiting) != 0;
  }

  std::string LostCause() const override {
    siginfo_t info{};
    if (!init_pidfd_ ||
        ::waitid(P_PIDFD, static_cast<id_t>(init_pidfd_.get()), &info,
                 WEXITED | WNOHANG | WNOWAIT) != 0 ||
        info.si_pid == 0) {
      return "PID 1 is gone";
    }
    std::string cause = info.si_code == CLD_EXITED
                            ? "PID 1 exited with code " + std::to_string(info.si_status)
                            : "PID 1 was killed by " + SignalName(info.si_status);
    if (info.si_code != CLD_EXITED && info.si_status == SIGKILL && OomKills() > 0) {
      cause += " (the sandbox ran out of memory)";
    }
    return cause;
  }

  Op<Result<void>> KillAll() override {
    if (destroyed_ || !control_) co_return Ok{};
    const char command = 'K';
    if (::write(control_.get(), &command, 1) == 1) {
      const bool acked = co_await ReadByte(control_.get(), 'k', kKillTimeoutMs);
      if (acked) co_return Ok{};
    }
    // init did not answer: end the whole sandbox rather than leave anything running.
    log::Warn("sandbox init did not answer a kill request; killing it", {{"sandbox", id_}});
    KillInit();
    co_return Ok{};
  }

  Op<Result<void>> Destroy() override {
    if (destroyed_) co_return Ok{};
    destroyed_ = true;
    // PID 1's death SIGKILLs the whole pid namespace; mounts go with the mount namespace.
    KillInit();
    control_.reset();
    // The spawner lives outside that pid namespace but inside the cgroups, which cannot be
    // removed while it is there.
    (void)co_await spawner_.Stop();
    Result<void> result = Ok{};
    if (cgroup_) {
      Result<void> removed = co_await cgroup_->Remove();
      if (!removed) result = std::move(removed).error();
    }
    if (init_pidfd_) {
      // The namespace's last processes are usually gone within a millisecond; if the daemon
      // still holds unreaped children there, PID 1 waits for them and is reaped later.
      (void)co_await Readable{init_pidfd_.get(), In(std::chrono::milliseconds(50))};
      ReapInit();
    }
    FreeStateAndIds(result);
    co_return result;
  }

  // Set by Create as each resource is acquired, so Destroy frees exactly those.
  std::optional<uint32_t> ids_first_;
  std::unique_ptr<SandboxCgroup> cgroup_;
  std::optional<uint32_t> egress_slot_;  // set once its network may have been attached
  UniqueFd init_pidfd_;
  pid_t init_pid_ = -1;
  UniqueFd control_;
  bool limits_view_ = false;  // lxcfs's files over its own (limits_view.h)

 private:
  void KillInit() {
    if (init_pidfd_) (void)SignalPidfd(init_pidfd_.get(), SIGKILL);
  }

  // Reaps PID 1 if it has exited, else leaves it to be reaped later.
  void ReapInit() {
    if (!init_pidfd_) return;
    if (adopted_init_) {
      init_pidfd_.reset();  // its parent now is whoever adopted the earlier daemon's orphans
      return;
    }
    siginfo_t info{};
    if (::waitid(P_PIDFD, static_cast<id_t>(init_pidfd_.get()), &info, WEXITED | WNOHANG) == 0 &&
        info.si_pid != 0) {
      init_pidfd_.reset();
      return;
    }
    state_->Dying(std::move(init_pidfd_));
  }

  void FreeStateAndIds(Result<void>& result) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    if (ec && result.ok()) {
      result = Error{ErrorCode::kInternal, "remove " + dir_ + ": " + ec.message()};
    }
    if (egress_slot_ && ids_first_) {
      // Its table and the connections its address had go on a thread of their own (a flush
      // walks the whole conntrack table: milliseconds the deletion need not wait for), and the
      // id range, with it the slot, is free again only once they have.
      std::thread([state = state_, slot = *egress_slot_, first = *ids_first_] {
        if (auto r = state->options.egress->Detach(slot); !r) {
          log::Warn("egress: detach failed", {{"slot", std::to_string(slot)},
                                              {"error", r.error().message}});
        }
        std::lock_guard lock(state->mu);
        state->ids.Release(first);
      }).detach();
      egress_slot_.reset();
      ids_first_.reset();
    }
    if (ids_first_) {
      std::lock_guard lock(state_->mu);
      state_->ids.Release(*ids_first_);
      ids_first_.reset();
    }
  }

  // Without waiting: what a sandbox that was never Destroy()ed must not leave running. Its
  // cgroups go if already empty, else at the next start's CleanupLeftovers.
  void DestroyNow() {
    if (destroyed_) return;
    destroyed_ = true;
    KillInit();
    control_.reset();
    spawner_.Kill();
    if (cgroup_) cgroup_->KillAndForget();
    ReapInit();
    Result<void> ignored = Ok{};
    FreeStateAndIds(ignored);
  }

  std::shared_ptr<NamespaceRuntime::State> state_;
  std::string id_;
  std::string dir_;
  Limits limits_;
  bool allow_nested_userns_;
  bool layered_;
  uid_t user_uid_;
  gid_t user_gid_;
  bool destroyed_ = false;
  bool adopted_init_ = false;  // PID 1 is an earlier daemon's child: not this one's to reap
  Spawner spawner_;
  std::vector<AdoptedProcess> adopted_;
};

// Gives the sandbox its veth pair and its table, on a thread (netlink may wait on the
// kernel). The slot is recorded first, so Destroy detaches whatever a failure left.
Op<Result<void>> AttachEgress(NamespaceRuntime::State& s, NamespaceSandbox& sandbox,
                              const net::EgressPolicy& policy) {
  const std::string path = "/proc/" + std::to_string(sandbox.init_pid_) + "/ns/net";
  auto netns = std::make_shared<UniqueFd>(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (InjectedFault() || !*netns) {
    co_return SysError(ErrorCode::kSandboxSetupFailed, "net: open " + path, errno);
  }
  const uint32_t slot = *sandbox.Slot();
  sandbox.egress_slot_ = slot;
  // Named, not a temporary in the co_await: g++ 12 destroys such a temporary's captures twice.
  auto attach = [egress = s.options.egress, slot, netns, policy] {
    return egress->Attach(slot, netns->get(), policy);
  };
  auto attached = co_await OnThread(std::move(attach), kNetTimeout);
  if (!attached) {
    co_return Error{ErrorCode::kSandboxSetupFailed, "net: attach did not finish in " +
                                                        std::to_string(kNetTimeout.count()) + " s"};
  }
  co_return std::move(*attached);
}

// Each layer as a detached, read-only mount that shows its files' owners through the user
// namespace of `pid` (the sandbox's PID 1): the layer's uid 0 is the sandbox's root. Only the
// host's root can make it (the layer's filesystem belongs to the host's user namespace).
Result<std::vector<UniqueFd>> IdmapLayers(pid_t pid, const std::vector<std::string>& paths,
                                          const std::vector<UniqueFd>& layers) {
  std::vector<UniqueFd> mounts;
  if (layers.empty()) return mounts;
  const std::string userns_path = "/proc/" + std::to_string(pid) + "/ns/user";
  UniqueFd userns(::open(userns_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (InjectedFault() || !userns) {
    return SysError(ErrorCode::kSandboxSetupFailed, "template: open " + userns_path, errno);
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    mounts.emplace_back(
        ::open_tree(layers[i].get(), "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH));
    if (InjectedFault() || !mounts.back()) {
      return SysError(ErrorCode::kSandboxSetupFailed, "template: clone: " + paths[i], errno);
    }
    mount_attr attr{};
    attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    attr.userns_fd = static_cast<uint64_t>(userns.get());
    if (InjectedFault() ||
        ::mount_setattr(mounts.back().get(), "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
      return SysError(ErrorCode::kSandboxSetupFailed, "template: idmap: " + paths[i], errno);
    }
  }
  return mounts;
}

// The child's go-ahead: one byte, with the layers' mounts.
Result<void> SendGoAhead(int sync_fd, const std::vector<UniqueFd>& mounts) {
  char go = 'g';
  iovec iov{&go, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxTemplateLayers)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!mounts.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * mounts.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * mounts.size());
    for (size_t i = 0; i < mounts.size(); ++i) {
      const int fd = mounts[i].get();
      std::memcpy(CMSG_DATA(c) + i * sizeof(int), &fd, sizeof fd);
    }
  }
  if (InjectedFault() || ::sendmsg(sync_fd, &msg, MSG_NOSIGNAL) != 1) {
    return SysError(ErrorCode::kSandboxSetupFailed, "sync: write", errno);
  }
  return Ok{};
}

// The steps of Create after the id range: directories, cgroups, the clone of PID 1 and its
// setup, each naming itself in its error.
Op<Result<void>> SetUp(NamespaceRuntime::State& s, NamespaceSandbox& sandbox,
                       const SandboxSpec& spec, const std::string& dir) {
  if (InjectedFault() || ::mkdir(dir.c_str(), 0700) != 0) {
    const int err = errno;
    co_return SysError(err == EEXIST ? ErrorCode::kConflict : ErrorCode::kSandboxSetupFailed,
                       "state: mkdir: " + dir, err);
  }
  const std::string root = dir + "/root";
  if (InjectedFault() || ::mkdir(root.c_str(), 0755) != 0) {
    co_return SysError(ErrorCode::kSandboxSetupFailed, "state: mkdir: " + root, errno);
  }
  if (!spec.layers.empty()) {
    const std::string layer = dir + "/layer";
    if (InjectedFault() || ::mkdir(layer.c_str(), 0755) != 0) {
      co_return SysError(ErrorCode::kSandboxSetupFailed, "state: mkdir: " + layer, errno);
    }
  }
  // Owned by the sandbox's root: the child works below it after leaving the host's uid 0.
  if (InjectedFault() || ::chown(dir.c_str(), *sandbox.ids_first_, *sandbox.ids_first_) != 0) {
    co_return SysError(ErrorCode::kSandboxSetupFailed, "state: chown: " + dir, errno);
  }
  // Each layer's number is reserved here, before the clone, so that the plan can name it: the
  // child puts the layer's idmapped mount there once the parent has made it.
  if (spec.layers.size() > kMaxTemplateLayers) {
    co_return Error{ErrorCode::kInvalidRequest, "template: more than " +
                                                    std::to_string(kMaxTemplateLayers) +
                                                    " layers"};
  }
  std::vector<UniqueFd> layers;
  std::vector<int> layer_fds;
  for (const auto& path : spec.layers) {
    layers.emplace_back(::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (InjectedFault() || !layers.back()) {
      co_return SysError(ErrorCode::kSandboxSetupFailed, "template: open: " + path, errno);
    }
    layer_fds.push_back(layers.back().get());
  }
  auto cgroup = s.cgroups->Create(spec.id, spec.limits, *sandbox.Slot());
  if (!cgroup) co_return std::move(cgroup).error();
  sandbox.cgroup_ = std::move(*cgroup);

  // The files lxcfs answers from the sandbox's limits; without them it sees the host's.
  std::vector<UniqueFd> view;
  std::vector<int> view_fds;
  if (s.view) {
    auto files = co_await s.view->Files();
    if (files) {
      view = std::move(*files);
      for (const auto& fd : view) view_fds.push_back(fd.get());
    } else {
      log::Warn("sandbox sees the host's /proc/meminfo, cpuinfo, stat",
                {{"sandbox", spec.id}, {"error", files.error().message}});
    }
  }
  sandbox.limits_view_ = !view.empty();
  const RootPlan plan = BuildRootPlan(s.host, spec, dir, layer_fds, view_fds);
  int sync[2];
  if (InjectedFault() || ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sync) != 0) {
    co_return SysError(ErrorCode::kSandboxSetupFailed, "socketpair", errno);
  }
  UniqueFd sync_parent(sync[0]), sync_child(sync[1]);
  int control[2];
  if (InjectedFault() || ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control) != 0) {
    co_return SysError(ErrorCode::kSandboxSetupFailed, "socketpair", errno);
  }
  UniqueFd control_parent(control[0]), control_child(control[1]);
  auto report = MakePipe(false);
  if (!report) co_return std::move(report).error();

  const InitLaunch launch{&plan,
                          dir.c_str(),
                          layer_fds.data(),
                          layer_fds.size(),
                          spec.id.c_str(),
                          spec.id.size(),
                          sync_child.get(),
                          control_child.get(),
                          report->write.get(),
                          s.init_exe.get(),
                          spec.network == "loopback",
                          {sync_parent.get(), control_parent.get(), report->read.get()}};
  int pidfd = -1;
  clone_args args{};
  args.flags = kCloneFlags | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  pid_t pid = -1;
  int clone_err = 0;
  {
    auto owner = NamespaceOwner::Assume(*sandbox.ids_first_);
    if (!owner) co_return std::move(owner).error();
    pid = InjectedFault() ? -1 : static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
    clone_err = errno;
    if (pid == 0) RunInitSetup(launch);
  }
  if (pid < 0) co_return SysError(ErrorCode::kSandboxSetupFailed, "clone3", clone_err);

  sandbox.init_pidfd_.reset(pidfd);
  sandbox.init_pid_ = pid;
  sync_child.reset();
  control_child.reset();
  report->write.reset();

  if (auto r = WriteIdMapsFromParent(pid, *sandbox.ids_first_, s.options.host_id_range); !r) {
    co_return std::move(r).error();
  }
  if (auto r = sandbox.cgroup_->Attach(pid); !r) co_return std::move(r).error();
  if (auto r = ExemptFromOomKiller(pid); !r) co_return std::move(r).error();
  if (spec.egress) {
    auto attached = co_await AttachEgress(s, sandbox, *spec.egress);
    if (!attached) co_return std::move(attached).error();
  }
  auto idmapped = IdmapLayers(pid, spec.layers, layers);
  if (!idmapped) co_return std::move(idmapped).error();
  if (auto r = SendGoAhead(sync_parent.get(), *idmapped); !r) co_return std::move(r).error();
  Result<void> exec = co_await AwaitExec(report->read.get(), ErrorCode::kSandboxSetupFailed, "");
  if (!exec) co_return std::move(exec).error();
  const bool ready = co_await ReadByte(control_parent.get(), 'R', kReadyTimeoutMs);
  if (!ready) co_return Error{ErrorCode::kSandboxSetupFailed, "init: did not report ready"};
  sandbox.control_ = std::move(control_parent);
  co_return co_await sandbox.StartKeeper();
}

}  // namespace

NamespaceRuntime::NamespaceRuntime(NamespaceRuntimeOptions options)
    : state_(std::make_shared<State>(std::move(options))) {
  auto& s = *state_;
  if (s.options.host_id_range < 65536) {
    ready_ = Error{ErrorCode::kInternal, "namespace runtime: host_id_range must be >= 65536"};
    return;
  }
  ready_ = CheckHostIdRanges(s.options.host_id_base, s.options.host_id_range,
                             s.options.max_sandboxes, HostIdFiles::Read());
  if (!ready_) return;
  std::error_code ec;
  fs::create_directories(s.options.state_dir, ec);
  if (ec) {
    ready_ = Error{ErrorCode::kInternal, "mkdir " + s.options.state_dir + ": " + ec.message()};
    return;
  }
  ::chmod(s.options.state_dir.c_str(), 0700);
  auto cgroups = Cgroups::Detect(s.options.cgroup_parent);
  if (!cgroups) {
    ready_ = std::move(cgroups).error();
    return;
  }
  s.cgroups = std::move(*cgroups);
  auto seccomp = SeccompProgram::Build(false);
  auto seccomp_userns = SeccompProgram::Build(true);
  if (!seccomp || !seccomp_userns) {
    ready_ = !seccomp ? seccomp.error() : seccomp_userns.error();
    return;
  }
  s.seccomp = std::move(*seccomp);
  s.seccomp_userns = std::move(*seccomp_userns);
  auto init = LoadEmbeddedExecutable(Embedded::kInit);
  auto spawner = LoadEmbeddedExecutable(Embedded::kSpawner);
  if (!init || !spawner) {
    ready_ = !init ? std::move(init).error() : std::move(spawner).error();
    return;
  }
  s.init_exe = std::move(*init);
  s.spawner_exe = std::move(*spawner);
  s.host = HostSystem::Scan();
  s.host.cgroup_fs = s.cgroups->fs_mounts();
  if (!s.options.lxcfs.empty()) {
    if (::access(s.options.lxcfs.c_str(), X_OK) == 0 && ::access("/dev/fuse", R_OK | W_OK) == 0) {
      s.view = std::make_unique<LimitsView>(s.options.lxcfs, s.options.lxcfs_dir);
    } else {
      log::Warn("no lxcfs or no /dev/fuse: sandboxes see the host's /proc/meminfo, cpuinfo, stat",
                {{"lxcfs", s.options.lxcfs}});
    }
  }
  struct rlimit nofile{};
  ::getrlimit(RLIMIT_NOFILE, &nofile);
  s.nofile_hard = static_cast<int64_t>(nofile.rlim_max);
  if (s.options.egress) s.options.egress->SetFaultPoint(&InjectedFault);
  s.host_netns = UniqueFd(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!s.host_netns) {
    ready_ = SysError(ErrorCode::kInternal, "open /proc/thread-self/ns/net", errno);
    return;
  }
}

NamespaceRuntime::~NamespaceRuntime() {
  // lxcfs stays for sandboxes that outlive the daemon, and goes with the last one.
  if (state_->view && state_->released == 0) state_->view->Stop();
  // The daemon is going: its cgroup parents go too once empty (a busy one stays, harmlessly,
  // for CleanupLeftovers at the next start).
  for (const auto& parent : CgroupParents()) ::rmdir(parent.c_str());
}

Op<Result<std::unique_ptr<Sandbox>>> NamespaceRuntime::Create(SandboxSpec spec) {
  if (!ready_) co_return ready_.error();
  auto& s = *state_;
  s.ReapDying();
  if (auto plain = CheckPlainId(spec.id); !plain) co_return std::move(plain).error();
  if (spec.network != "loopback" && spec.network != "none" && spec.network != "egress") {
    co_return Error{ErrorCode::kInvalidRequest, "network: unsupported mode: " + spec.network};
  }
  if ((spec.network == "egress") != spec.egress.has_value()) {
    co_return Error{ErrorCode::kInvalidRequest, "network: egress needs its policy, and only it"};
  }
  if (spec.egress && !s.options.egress) {
    co_return Error{ErrorCode::kInvalidRequest,
                    "network: egress is off in this daemon's configuration (egress_pool)"};
  }
  SandboxSpec resolved = spec;

  const std::string dir = s.options.state_dir + "/" + spec.id;
  auto sandbox = std::make_unique<NamespaceSandbox>(state_, spec, dir);
  {
    std::lock_guard lock(s.mu);
    sandbox->ids_first_ = s.ids.Acquire();
  }
  if (!sandbox->ids_first_) {
    co_return Error{ErrorCode::kQuotaExceeded, "userns: every host id range is in use"};
  }
  if (resolved.egress) {
    // Its resolver, on its gateway; no search domains of the host's, whose names it would
    // only refuse.
    resolved.resolv_conf = "nameserver " +
                           net::FormatAddress(s.options.egress->Gateway(*sandbox->Slot())) +
                           "\noptions ndots:1 timeout:2 attempts:2\n";
  }
  // A step that fails leaves what it made in `sandbox`; Destroy frees exactly that.
  Result<void> set_up = co_await SetUp(s, *sandbox, resolved, dir);
  if (!set_up) {
    (void)co_await sandbox->Destroy();
    co_return std::move(set_up).error();
  }
  co_return std::unique_ptr<Sandbox>(std::move(sandbox));
}

std::vector<std::string> NamespaceRuntime::CgroupParents() const {
  if (!state_->cgroups) return {};
  return state_->cgroups->parents();
}

Op<Result<std::unique_ptr<Sandbox>>> NamespaceRuntime::Adopt(SandboxSpec spec) {
  if (!ready_) co_return ready_.error();
  auto& s = *state_;
  if (auto plain = CheckPlainId(spec.id); !plain) co_return std::move(plain).error();
  const std::string dir = s.options.state_dir + "/" + spec.id;
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) {
    co_return SysError(ErrorCode::kNotFound, "state: " + dir, errno);
  }
  auto sandbox = std::make_unique<NamespaceSandbox>(state_, spec, dir);
  // The directory belongs to the sandbox's root: its owner is the first id of its range.
  bool acquired = false;
  {
    std::lock_guard lock(s.mu);
    acquired = s.ids.AcquireAt(st.st_uid);
  }
  if (!acquired) {
    co_return Error{ErrorCode::kNotFound, "userns: " + dir + " is owned by uid " +
                                              std::to_string(st.st_uid) +
                                              ", which starts no free id range of this daemon"};
  }
  sandbox->ids_first_ = st.st_uid;
  // Its link and table are kernel state that outlived the daemon.
  if (spec.egress && s.options.egress) {
    sandbox->egress_slot_ = sandbox->Slot();
    s.options.egress->Adopted(*sandbox->egress_slot_);
  }
  Result<void> reattached = co_await sandbox->Reattach();
  if (!reattached) {
    (void)co_await sandbox->Destroy();
    co_return std::move(reattached).error();
  }
  co_return std::unique_ptr<Sandbox>(std::move(sandbox));
}

void NamespaceRuntime::CleanupLeftovers(const std::vector<std::string>& keep) {
  if (!ready_) return;
  state_->cgroups->CleanupLeftovers(keep);
  if (state_->options.egress) {
    std::vector<uint32_t> live;
    {
      std::lock_guard lock(state_->mu);
      live = state_->ids.UsedIndexes();
    }
    state_->options.egress->CleanupLeftovers(live);
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(state_->options.state_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (std::find(keep.begin(), keep.end(), name) != keep.end()) continue;
    log::Info("removing leftover sandbox directory", {{"path", entry.path().string()}});
    fs::remove_all(entry.path(), ec);
  }
}

}  // namespace sandstream::sandbox
