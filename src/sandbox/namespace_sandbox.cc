// NamespaceSandbox (namespace_sandbox.h): a running sandbox, from its keeper's spawns to its
// destruction, and its adoption by a daemon started later.
#include "sandbox/namespace_sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <system_error>
#include <thread>
#include <utility>

#include "base/log.h"
#include "platform/fd.h"
#include "platform/proc.h"
#include "platform/signals.h"
#include "sandbox/limits_view.h"
#include "sandbox/namespace_state.h"
#include "sandbox/spawn.h"

namespace sandstream::sandbox {

namespace fs = std::filesystem;

namespace {

constexpr int kKillTimeoutMs = 5000;
// How long PID 1 has to end the rest of its sandbox and exit on kStop (it reaps for 300 ms).
constexpr std::chrono::milliseconds kStopTimeout{500};
// How long the processes of a sandbox being paused have to stop.
constexpr std::chrono::milliseconds kFreezeTimeout{5000};

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

}  // namespace

int PidNamespaceLevel(pid_t pid) {
  const size_t ids = StatusIds(pid, "NSpid").size();
  return ids > 0 ? static_cast<int>(ids) - 1 : 0;
}

Result<void> ExemptFromOomKiller(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/oom_score_adj";
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd || ::write(fd.get(), "-1000", 5) != 5) {
    if (errno == EACCES) {
      static bool warned = false;
      if (!std::exchange(warned, true)) {
        log::Warn("no CAP_SYS_RESOURCE: sandbox inits keep the daemon's oom_score_adj");
      }
      return Ok{};
    }
    return SysError(ErrorCode::kSandboxSetupFailed, "oom: write " + path, errno);
  }
  return Ok{};
}

NamespaceSandbox::NamespaceSandbox(std::shared_ptr<NamespaceRuntime::State> state,
                                   const SandboxSpec& spec, std::string dir)
    : state_(std::move(state)),
      id_(spec.id),
      dir_(std::move(dir)),
      limits_(spec.limits),
      allow_nested_userns_(spec.allow_nested_userns),
      layered_(!spec.layers.empty()),
      has_volumes_(!spec.volumes.empty()),
      user_uid_(spec.user_uid),
      user_gid_(spec.user_gid) {}

std::string NamespaceSandbox::RootPath() const {
  return "/proc/" + std::to_string(init_pid_) + "/root";
}

std::optional<ResourceUsage> NamespaceSandbox::Usage() const {
  std::optional<ResourceUsage> use = cgroup_ ? cgroup_->Usage() : std::nullopt;
  if (!use) return use;
  // The writable filesystem: its tmpfs, or (an overlay reports its upper one) the tmpfs under.
  struct statfs sf {};
  if (::statfs(RootPath().c_str(), &sf) == 0) {
    const auto block = static_cast<uint64_t>(sf.f_bsize);
    use->disk = ResourceUsage::Disk{.used_bytes = (sf.f_blocks - sf.f_bfree) * block,
                                    .total_bytes = sf.f_blocks * block};
  }
  return use;
}

std::string NamespaceSandbox::WritableLayer() const {
  // PID 1 keeps the writable layer's tmpfs open as fd 4 (mounts.cc): its overlay's upper
  // directory, or a base root's tree (under which the host's system is bound, unseen here).
  return "/proc/" + std::to_string(init_pid_) + (layered_ ? "/fd/4/upper" : "/fd/4/root");
}

std::optional<uint32_t> NamespaceSandbox::HostId(uint32_t inside) const {
  if (!ids_first_ || inside >= state_->options.host_id_range) return std::nullopt;
  return *ids_first_ + inside;
}

std::optional<uint32_t> NamespaceSandbox::Slot() const {
  if (!ids_first_) return std::nullopt;
  return (*ids_first_ - state_->options.host_id_base) / state_->options.host_id_range;
}

std::optional<EgressAddresses> NamespaceSandbox::Egress() const {
  if (!egress_slot_ || !state_->options.egress) return std::nullopt;
  const auto& e = *state_->options.egress;
  return EgressAddresses{*egress_slot_, e.Gateway(*egress_slot_), e.Address(*egress_slot_)};
}

Op<Result<SpawnedProcess>> NamespaceSandbox::Spawn(ProcessSpec spec) {
  if (destroyed_) co_return Error{ErrorCode::kNotFound, "sandbox " + id_ + " is deleted"};
  Result<void> keeper = co_await EnsureKeeper();
  if (!keeper) co_return std::move(keeper).error();
  SpawnContext ctx;
  ctx.spawner = &spawner_;
  ctx.seccomp = allow_nested_userns_ ? state_->seccomp_userns.program() : state_->seccomp.program();
  ctx.open_files = std::min<int64_t>(limits_.open_files, state_->nofile_hard);
  ctx.user_uid = user_uid_;
  ctx.user_gid = user_gid_;
  ctx.host_id_base = ids_first_.value_or(0);
  if (spec.pty) {
    // The sandbox's own devpts: inside, the terminal is /dev/pts/N and `tty` says so.
    ctx.ptmx = "/proc/" + std::to_string(init_pid_) + "/root/dev/pts/ptmx";
  }
  co_return co_await SpawnInSandbox(std::move(ctx), std::move(spec));
}

Op<Result<std::optional<FileWriter>>> NamespaceSandbox::StartFileWriter(int file) {
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
  Result<Launched> launched = co_await spawner_.Copy(data->read.get(), file, exit->write.get());
  if (!launched) co_return std::move(launched).error();
  FileWriter w;
  w.pid = launched->pid;
  w.pidfd = std::move(launched->pidfd);
  w.input = std::move(data->write);
  w.exit_fd = std::move(exit->read);
  co_return std::optional<FileWriter>(std::move(w));
}

Result<UniqueFd> NamespaceSandbox::Socket() {
  if (destroyed_ || !init_pidfd_) {
    return Error{ErrorCode::kNotFound, "sandbox " + id_ + " is deleted"};
  }
  return SocketInside(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, "ports");
}

// The calling thread enters the sandbox's network namespace (through PID 1's pidfd) for the
// one socket() call and comes straight back: three syscalls, none of which waits on the
// sandbox. A thread that could not come back must not go on in a sandbox's namespace.
Result<UniqueFd> NamespaceSandbox::SocketInside(int family, int type, const std::string& context) {
  if (::setns(init_pidfd_.get(), CLONE_NEWNET) != 0) {
    return SysError(ErrorCode::kInternal, context + ": setns into the sandbox", errno);
  }
  UniqueFd fd(::socket(family, type | SOCK_CLOEXEC, 0));
  const int err = errno;
  if (::setns(state_->host_netns.get(), CLONE_NEWNET) != 0) {
    log::Error("could not leave a sandbox's network namespace", {{"sandbox", id_}});
    std::abort();
  }
  if (!fd) return SysError(ErrorCode::kInternal, context + ": socket", err);
  return fd;
}

// The abstract name PID 1 listens on is its network namespace's: the socket is made there.
// Whoever listens must be PID 1 itself (a listener's SO_PEERCRED is its maker's), not one of
// the sandbox's processes that took the name from a PID 1 that went.
Result<UniqueFd> NamespaceSandbox::ConnectToInit() {
  auto fd = SocketInside(AF_UNIX, SOCK_SEQPACKET, "keeper");
  if (!fd) return std::move(fd).error();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, kKeeperSocketName, sizeof kKeeperSocketName - 1);
  const auto len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + sizeof kKeeperSocketName);
  if (::connect(fd->get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return SysError(ErrorCode::kSandboxSetupFailed, "keeper: connect", errno);
  }
  ucred peer{};
  socklen_t peer_len = sizeof peer;
  if (::getsockopt(fd->get(), SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) != 0 ||
      peer.pid != init_pid_) {
    return Error{ErrorCode::kSandboxSetupFailed,
                 "keeper: the socket's listener is not the sandbox's PID 1"};
  }
  return fd;
}

// PID 1 among the cgroup's processes: the one its own pid namespace numbers 1.
pid_t NamespaceSandbox::FindInit() const {
  for (pid_t pid : cgroup_->Pids()) {
    const std::vector<pid_t> ids = StatusIds(pid, "NSpid");
    if (!ids.empty() && ids.back() == 1) return pid;
  }
  return -1;
}

Op<Result<void>> NamespaceSandbox::EnsureKeeper() {
  if (spawner_.connected()) co_return Ok{};
  if (Ended()) co_return Error{ErrorCode::kConflict, "sandbox " + id_ + ": PID 1 has exited"};
  log::Warn("sandbox keeper connection lost; connecting again", {{"sandbox", id_}});
  auto connected = pid_level_ > 0 ? ConnectToInit() : ConnectToPath(KeeperSocket());
  if (!connected) co_return std::move(connected).error();
  co_return co_await spawner_.Connect(std::move(*connected), state_->init_exe.get());
}

Op<Result<void>> NamespaceSandbox::Reattach() {
  auto cgroup = state_->cgroups->Open(id_);
  if (!cgroup) co_return std::move(cgroup).error();
  cgroup_ = std::move(*cgroup);
  // A paused sandbox's keeper is frozen with it and cannot answer: it runs for the few
  // milliseconds of the handshake, and the sandbox is frozen again after.
  const bool frozen = cgroup_->Frozen();
  if (frozen) {
    if (auto thawed = cgroup_->Thaw(); !thawed) co_return std::move(thawed).error();
  }
  Result<void> reattached = co_await ReattachKeeper();
  if (frozen && reattached) co_return co_await cgroup_->Freeze(In(kFreezeTimeout));
  co_return reattached;
}

Op<Result<void>> NamespaceSandbox::ReattachKeeper() {
  // An earlier build's keeper listens in the state directory; PID 1 as the keeper, on an
  // abstract name in its network namespace, found through its pid in the cgroup.
  Result<UniqueFd> socket = Error{ErrorCode::kNotFound, "keeper: holds no PID 1"};
  if (::access(KeeperSocket().c_str(), F_OK) == 0) {
    socket = ConnectToPath(KeeperSocket());
  } else if (const pid_t init = FindInit(); init > 0) {
    init_pidfd_.reset(static_cast<int>(::syscall(SYS_pidfd_open, init, 0)));
    init_pid_ = init;
    if (init_pidfd_) socket = ConnectToInit();
  }
  if (!socket) co_return std::move(socket).error();
  Result<void> connected = co_await spawner_.Connect(std::move(*socket), state_->init_exe.get());
  if (!connected) co_return std::move(connected).error();
  Result<std::vector<KeptEntry>> kept = co_await spawner_.List();
  if (!kept) co_return std::move(kept).error();
  for (KeptEntry& e : *kept) {
    if (e.pid == 0) {
      // PID 1's pidfd; and of an earlier build's sandbox, its PID 1's own control socket.
      if (!e.fds.empty()) init_pidfd_ = std::move(e.fds[0]);
      if (e.fds.size() == 2 && !spawner_.is_init()) apart_init_control_ = std::move(e.fds[1]);
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
  if (!init_pidfd_ || (!spawner_.is_init() && !apart_init_control_)) {
    co_return Error{ErrorCode::kNotFound, "keeper: holds no PID 1"};
  }
  adopted_init_ = true;
  init_pid_ = PidOfPidfd(init_pidfd_.get());
  if (init_pid_ <= 0 || Ended()) co_return Error{ErrorCode::kNotFound, "PID 1 has exited"};
  pid_level_ = spawner_.is_init() ? PidNamespaceLevel(init_pid_) : 0;
  auto mountinfo = ReadFile("/proc/" + std::to_string(init_pid_) + "/mountinfo");
  limits_view_ = mountinfo && HasMountAt(*mountinfo, "/proc/meminfo", "fuse.lxcfs");
  // An answer to a kill request the earlier daemon did not wait for must not answer ours.
  char stale[64];
  while (apart_init_control_ &&
         ::recv(apart_init_control_.get(), stale, sizeof stale, MSG_DONTWAIT) > 0) {
  }
  co_return Ok{};
}

std::vector<AdoptedProcess> NamespaceSandbox::TakeAdopted() {
  return std::exchange(adopted_, {});
}

void NamespaceSandbox::Release() {
  if (destroyed_) return;
  destroyed_ = true;
  ++state_->released;
  // The keeper keeps PID 1, the pipes and the logs; the cgroups and mounts stay as they are.
  spawner_.Leave();
  if (cgroup_) cgroup_->Leave();
  init_pidfd_.reset();
  apart_init_control_.reset();
}

bool NamespaceSandbox::Ended() const {
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

std::string NamespaceSandbox::LostCause() const {
  siginfo_t info{};
  if (!init_pidfd_ ||
      ::waitid(P_PIDFD, static_cast<id_t>(init_pidfd_.get()), &info, WEXITED | WNOHANG | WNOWAIT) !=
          0 ||
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

Op<Result<void>> NamespaceSandbox::Freeze() {
  if (destroyed_ || !cgroup_) co_return Error{ErrorCode::kNotFound, "freeze: the sandbox is gone"};
  co_return co_await cgroup_->Freeze(In(kFreezeTimeout));
}

Result<void> NamespaceSandbox::Thaw() {
  if (destroyed_ || !cgroup_) return Ok{};
  return cgroup_->Thaw();
}

Op<Result<void>> NamespaceSandbox::KillAll() {
  if (destroyed_) co_return Ok{};
  // A frozen PID 1 cannot answer: it runs again first (and what it kills with it).
  if (cgroup_ && cgroup_->Frozen()) (void)cgroup_->Thaw();
  if (pid_level_ > 0) {
    Result<void> killed = co_await spawner_.KillAll();
    if (killed) co_return Ok{};
  } else if (apart_init_control_) {
    const char command = 'K';
    if (::write(apart_init_control_.get(), &command, 1) == 1 &&
        co_await ReadByte(apart_init_control_.get(), 'k', kKillTimeoutMs)) {
      co_return Ok{};
    }
  } else {
    co_return Ok{};
  }
  // PID 1 did not answer: end the whole sandbox rather than leave anything running.
  log::Warn("sandbox init did not answer a kill request; killing it", {{"sandbox", id_}});
  KillInit();
  co_return Ok{};
}

Op<Result<void>> NamespaceSandbox::Destroy() {
  if (destroyed_) co_return Ok{};
  destroyed_ = true;
  // PID 1 kills every other process, writes each one's end for the daemon and exits, within
  // a bound; a frozen one cannot.
  if (pid_level_ > 0 && init_pidfd_ && !(cgroup_ && cgroup_->Frozen())) {
    spawner_.Stop();
    (void)co_await Readable{init_pidfd_.get(), In(kStopTimeout)};
  }
  // PID 1's death SIGKILLs the whole pid namespace; mounts go with the mount namespace. A
  // frozen sandbox takes those SIGKILLs once thawed.
  KillInit();
  if (cgroup_) (void)cgroup_->Thaw();
  apart_init_control_.reset();
  // An earlier build's keeper lives outside that pid namespace but inside the cgroups, which
  // cannot be removed while it is there: it reaps the last of its processes and exits.
  spawner_.Stop();
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

void NamespaceSandbox::KillInit() {
  if (init_pidfd_) (void)SignalPidfd(init_pidfd_.get(), SIGKILL);
}

void NamespaceSandbox::ReapInit() {
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

void NamespaceSandbox::FreeStateAndIds(Result<void>& result) {
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
        log::Warn("egress: detach failed",
                  {{"slot", std::to_string(slot)}, {"error", r.error().message}});
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

void NamespaceSandbox::DestroyNow() {
  if (destroyed_) return;
  destroyed_ = true;
  KillInit();
  if (cgroup_) (void)cgroup_->Thaw();
  apart_init_control_.reset();
  spawner_.Stop();
  if (cgroup_) cgroup_->KillAndForget();
  ReapInit();
  Result<void> ignored = Ok{};
  FreeStateAndIds(ignored);
}

}  // namespace sandstream::sandbox
