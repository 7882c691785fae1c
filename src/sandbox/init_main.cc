// PID 1 of every sandbox, which is also its keeper (spawner.h). As PID 1 it reaps orphans and
// turns SIGTERM from outside the sandbox into a graceful end of it (the sandbox's own processes
// cannot end it: the kernel drops the KILL and STOP they send their namespace's init, and it
// ignores the rest from them). As the
// keeper it clones each process the daemon asks for (the child runs launch.cc's steps), is their
// parent and reaper, and keeps for the daemon what must outlive it: each process's pidfd, exit
// pipe, pipe ends and output log, and the sandbox's own fds. It outlives the daemon: a daemon
// that starts again connects to its listening socket and takes everything back. So every process
// of a sandbox descends from its PID 1, in its pid namespace, and nothing of it runs outside.
//
// The same executable, upgraded in place (kUpgrade), also serves as the keeper of a sandbox an
// earlier build made, which ran its keeper apart from PID 1 in the host's pid namespace: there
// it is not PID 1 and does only the keeper's part. Static, no dependencies, no allocation.
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "platform/scm_rights.h"
#include "sandbox/caps.h"
#include "sandbox/launch.h"
#include "sandbox/spawn_request.h"

namespace sandstream::sandbox {
namespace {

constexpr int kFirstControlFd = 3;
// A sandbox runs at most max_processes_per_sandbox processes at once; ended ones stay here only
// until the daemon has recorded their end.
constexpr size_t kMaxEntries = 4096;

struct Entry {
  bool used;
  bool reaped;
  bool forget_on_reap;
  int32_t pid;
  int32_t status;
  uint32_t tag;
  int pidfd;
  int exit_fd;
  int held[kMaxHeldFds];
  uint32_t held_count;
};

// Never touched beyond the last request's length, so it costs only the pages a request used.
alignas(16) char request[kMaxSpawnRequestBytes];
Entry entries[kMaxEntries];
int sandbox_held[kMaxHeldFds];
uint32_t sandbox_held_count = 0;
int control = kFirstControlFd;  // the connected daemon, or -1
int listener = -1;
// PID 1 of its sandbox; false only as the keeper of a sandbox an earlier build made.
bool init = false;
// The daemon has finished setting the sandbox up (kHold), or this keeper took over from an
// earlier one: from now on a daemon that goes leaves everything to the next one.
bool armed = false;

void CloseAll(const int* fds, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (fds[i] >= 0) ::close(fds[i]);
  }
}

// One message to the daemon, with at most a process's held fds and its pidfd.
bool SendToDaemon(const void* data, size_t len, const int* fds, size_t fd_count) {
  if (control < 0) return false;
  return SendWithFds<kMaxHeldFds + 1>(control, data, len, fds, fd_count) ==
         static_cast<ssize_t>(len);
}

bool Send(const KeeperMessage& m) {
  return SendToDaemon(&m, sizeof m, nullptr, 0);
}

bool Reply(int32_t pid, int32_t err, int pidfd) {
  const SpawnReply reply{pid, err};
  return SendToDaemon(&reply, sizeof reply, &pidfd, pidfd >= 0 ? 1 : 0);
}

void Drop(Entry& e) {
  if (e.pidfd >= 0) ::close(e.pidfd);
  if (e.exit_fd >= 0) ::close(e.exit_fd);
  CloseAll(e.held, e.held_count);
  e = Entry{};
}

Entry* Find(int32_t pid) {
  for (Entry& e : entries) {
    if (e.used && e.pid == pid) return &e;
  }
  return nullptr;
}

// At most this many children reaped per turn of the loop, so that a sandbox that makes and
// orphans processes without end never holds off the daemon's requests.
constexpr int kReapsPerTurn = 256;
bool reap_pending = false;  // the last Reap stopped at its bound: the loop comes back at once

// The wait status goes into the process's exit pipe, where the daemon (this one or the next)
// reads it; the pipe holds it while no daemon runs.
void Reap() {
  int status = 0;
  pid_t pid;
  int reaped = 0;
  reap_pending = false;
  while (!reap_pending && (pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    reap_pending = ++reaped == kReapsPerTurn;
    Entry* e = Find(pid);
    if (e == nullptr) continue;
    e->reaped = true;
    e->status = status;
    if (e->exit_fd >= 0) {
      (void)!::write(e->exit_fd, &status, sizeof status);
      ::close(e->exit_fd);
      e->exit_fd = -1;
    }
    if (e->forget_on_reap) Drop(*e);
  }
}

bool AnyRunning() {
  for (const Entry& e : entries) {
    if (e.used && !e.reaped) return true;
  }
  return false;
}

// Waits, within `ms`, for every process of the sandbox to end and be reaped, so that each
// kept one reads as what ended it rather than as lost; a process that outlives the wait reads
// as lost (PID 1's exit kills it). As the keeper of an earlier build's sandbox, whose PID 1 has
// been killed on kStop, it waits for its own children only.
void ReapWithin(int sfd, int ms) {
  timespec start{};
  ::clock_gettime(CLOCK_MONOTONIC, &start);
  Reap();
  while (init ? ::kill(-1, 0) == 0 : AnyRunning()) {
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    const long elapsed =
        (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
    if (elapsed >= ms) return;
    pollfd p{sfd, POLLIN, 0};
    (void)::poll(&p, 1, static_cast<int>(ms - elapsed < 10 ? ms - elapsed : 10));
    signalfd_siginfo info;
    while (::read(sfd, &info, sizeof info) > 0) {
    }
    Reap();
  }
}

// kStop, and a kill of the whole sandbox: every process but PID 1, in one pass. kill(-1) from
// PID 1 reaches every process of the namespace but itself under the tasklist lock, so a fork
// bomb cannot outrun it. Never from a keeper outside the sandbox's pid namespace.
void KillEveryOther() {
  if (init) ::kill(-1, SIGKILL);
}

void SetInherited(int fd, bool inherited) {
  if (fd < 0) return;
  const int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) ::fcntl(fd, F_SETFD, inherited ? flags & ~FD_CLOEXEC : flags | FD_CLOEXEC);
}

// Every fd the keeper holds, inherited across an exec or not.
void SetAllInherited(bool inherited) {
  SetInherited(control, inherited);
  SetInherited(listener, inherited);
  for (uint32_t i = 0; i < sandbox_held_count; ++i) SetInherited(sandbox_held[i], inherited);
  for (const Entry& e : entries) {
    if (!e.used) continue;
    SetInherited(e.pidfd, inherited);
    SetInherited(e.exit_fd, inherited);
    for (uint32_t i = 0; i < e.held_count; ++i) SetInherited(e.held[i], inherited);
  }
}

bool WriteAllTo(int fd, const void* data, size_t len) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    const ssize_t n = ::write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

// kUpgrade: execs `exe` in place with the table in a memfd; returns an errno only on failure.
int Upgrade(int exe) {
  const int state = static_cast<int>(::syscall(SYS_memfd_create, "sandstream-keeper-state", 0));
  if (state < 0) return errno;
  KeeperStateHeader h{};
  h.magic = kKeeperStateMagic;
  h.version = kKeeperVersion;
  h.control = control;
  h.listener = listener;
  h.sandbox_held_count = sandbox_held_count;
  for (uint32_t i = 0; i < sandbox_held_count; ++i) h.sandbox_held[i] = sandbox_held[i];
  for (const Entry& e : entries) h.entries += e.used ? 1 : 0;
  bool written = WriteAllTo(state, &h, sizeof h);
  for (const Entry& e : entries) {
    if (!e.used || !written) continue;
    KeeperStateEntry k{};
    k.pid = e.pid;
    k.status = e.reaped ? e.status : -1;
    k.tag = e.tag;
    k.flags = (e.reaped ? 1u : 0u) | (e.forget_on_reap ? 2u : 0u);
    k.pidfd = e.pidfd;
    k.exit_fd = e.exit_fd;
    k.held_count = e.held_count;
    for (uint32_t i = 0; i < e.held_count; ++i) k.held[i] = e.held[i];
    written = WriteAllTo(state, &k, sizeof k);
  }
  if (!written || ::lseek(state, 0, SEEK_SET) != 0) {
    const int err = errno != 0 ? errno : EIO;
    ::close(state);
    return err;
  }
  char env[64];
  std::snprintf(env, sizeof env, "%s=%d", kKeeperStateEnv, state);
  char name[] = "sandstream-keeper";
  char* const argv[] = {name, nullptr};
  char* const envp[] = {env, nullptr};
  SetAllInherited(true);
  ::syscall(SYS_execveat, exe, "", argv, envp, AT_EMPTY_PATH);
  const int err = errno;
  SetAllInherited(false);
  ::close(state);
  return err;
}

bool ReadAllFrom(int fd, void* data, size_t len) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    const ssize_t n = ::read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

// After kUpgrade: the table the keeper before this one left; 0 or an errno.
int Resume(int state) {
  KeeperStateHeader h{};
  if (!ReadAllFrom(state, &h, sizeof h) || h.magic != kKeeperStateMagic ||
      h.sandbox_held_count > kMaxHeldFds || h.entries > kMaxEntries) {
    return EBADMSG;
  }
  control = h.control;
  listener = h.listener;
  sandbox_held_count = h.sandbox_held_count;
  for (uint32_t i = 0; i < h.sandbox_held_count; ++i) sandbox_held[i] = h.sandbox_held[i];
  for (uint32_t n = 0; n < h.entries; ++n) {
    KeeperStateEntry k{};
    if (!ReadAllFrom(state, &k, sizeof k) || k.held_count > kMaxHeldFds) return EBADMSG;
    Entry& e = entries[n];
    e = Entry{};
    e.used = true;
    e.pid = k.pid;
    e.status = k.status;
    e.tag = k.tag;
    e.reaped = (k.flags & 1u) != 0;
    e.forget_on_reap = (k.flags & 2u) != 0;
    e.pidfd = k.pidfd;
    e.exit_fd = k.exit_fd;
    e.held_count = k.held_count;
    for (uint32_t i = 0; i < k.held_count; ++i) e.held[i] = k.held[i];
  }
  ::close(state);
  SetAllInherited(false);
  return 0;
}

// PID 1 listens for later daemons on kKeeperSocketName, in its own network namespace, so that
// nothing it holds is a socket of the host's (what a checkpoint could not take).
int Listen() {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return errno;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, kKeeperSocketName, sizeof kKeeperSocketName - 1);
  const auto len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + sizeof kKeeperSocketName);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd, 4) != 0) {
    const int err = errno;
    ::close(fd);
    return err;
  }
  listener = fd;
  return 0;
}

// Whether the peer of `fd` is outside this pid namespace (it reads as pid 0 here): a daemon,
// never one of the sandbox's processes, which reach the same abstract name.
bool FromOutside(int fd) {
  ucred peer{};
  socklen_t len = sizeof peer;
  return ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0 && peer.pid == 0;
}

// 0 or the errno of the step that failed.
int Start() {
  init = ::getpid() == 1;
  // Exec'd from a memfd, the command name would read "memfd:sandstrea" in ps.
  ::prctl(PR_SET_NAME, init ? "sandstream-init" : "sandstream-keep", 0, 0, 0);
  if (const char* state = ::getenv(kKeeperStateEnv)) {
    // An upgrade: the session and fds 0-2 are as the keeper before left them; the exec as
    // root gave it its bounding set, which that keeper had cut, as its capabilities (a keeper
    // of an older build, whose securebits were locked, has none left: it keeps what it holds)
    // and made it dumpable again.
    const int err = Resume(static_cast<int>(std::strtol(state, nullptr, 10)));
    if (err != 0) return err;
    armed = true;
    return ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 ? 0 : errno;
  }
  if (const int err = Listen(); err != 0) return err;
  // The sandbox's setup made PID 1 a session leader, out of the daemon's process group and
  // session: a Ctrl-C or hang-up meant for a daemon run in a terminal must not reach it.
  // Received fds must never land on 0, 1 or 2, which each child overwrites in turn.
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0) return errno;
  for (int fd = 0; fd < 3; ++fd) {
    if (::dup2(null, fd) < 0) return errno;
  }
  if (null > 2) ::close(null);
  // What its children start from; the rest goes now. No no_new_privs and no securebits, which
  // the children would inherit for good.
  if (const int err = KeepKeeperCapabilities(); err != 0) return err;
  // After every credential change, which would clear it: the sandbox's root, of the same uid,
  // must not reach it through /proc/1 (mem, fd, environ, root).
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return errno;
  return 0;
}

Entry* FreeEntry() {
  for (Entry& e : entries) {
    if (!e.used) return &e;
  }
  return nullptr;
}

// A child of this keeper with its pidfd in `*pidfd`: 0 in the child, its pid here, -1 (errno).
// This keeper, which outlives the daemon, is the parent and the reaper. CLONE_CLEAR_SIGHAND: PID
// 1's handlers, which keep its signals deliverable, are not the child's.
long CloneChild(int* pidfd) {
  clone_args args{};
  args.flags = CLONE_PIDFD | CLONE_CLEAR_SIGHAND;
  args.pidfd = reinterpret_cast<uint64_t>(pidfd);
  args.exit_signal = SIGCHLD;
  return ::syscall(SYS_clone3, &args, sizeof args);
}

// One spawn: the child's fds are closed here whatever happens; the held ones are kept.
void Spawn(ssize_t len, const int* fds, size_t fd_count, bool fds_ok) {
  ParsedSpawnRequest parsed;
  Entry* slot = FreeEntry();
  if (!fds_ok || !ParseSpawnRequest(request, static_cast<size_t>(len), fds, fd_count, &parsed)) {
    CloseAll(fds, fd_count);
    Reply(-1, EBADMSG, -1);
    return;
  }
  const size_t child_fds = fd_count - 1 - parsed.held_count;
  if (slot == nullptr) {
    CloseAll(fds, fd_count);
    Reply(-1, ENOSPC, -1);
    return;
  }
  int pidfd = -1;
  const long r = CloneChild(&pidfd);
  if (r == 0) RunProcessInChild(parsed.launch);
  CloseAll(fds, child_fds);
  if (r < 0) {
    const int err = errno;
    CloseAll(fds + child_fds, fd_count - child_fds);
    Reply(-1, err, -1);
    return;
  }
  *slot = Entry{};
  slot->used = true;
  slot->pid = static_cast<int32_t>(r);
  slot->status = -1;
  slot->tag = parsed.tag;
  slot->pidfd = pidfd;
  slot->exit_fd = parsed.exit_fd;
  slot->held_count = parsed.held_count;
  for (uint32_t i = 0; i < parsed.held_count; ++i) slot->held[i] = parsed.held[i];
  Reply(slot->pid, 0, pidfd);
}

// A file writer's child: copies `from` (a pipe) to `to` until EOF, then exits 0; or exits with
// the errno that stopped it. It keeps nothing else of the keeper's, no capability either: it is
// in the sandbox's pid namespace, without a seccomp filter.
[[noreturn]] void CopyInChild(int from, int to) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct no_caps[2] = {};
  if (::syscall(SYS_capset, &header, no_caps) != 0) ::_exit(errno & 0xff);
  const int low = from < to ? from : to;
  const int high = from < to ? to : from;
  if (low > 0) (void)::syscall(SYS_close_range, 0u, static_cast<unsigned>(low - 1), 0u);
  if (high > low + 1) {
    (void)::syscall(SYS_close_range, static_cast<unsigned>(low + 1),
                    static_cast<unsigned>(high - 1), 0u);
  }
  (void)::syscall(SYS_close_range, static_cast<unsigned>(high + 1), ~0u, 0u);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  constexpr size_t kStep = size_t{1} << 20;
  for (;;) {
    const ssize_t n = ::splice(from, nullptr, to, nullptr, kStep, SPLICE_F_MOVE);
    if (n == 0) ::_exit(0);
    if (n > 0) continue;
    if (errno == EINTR) continue;
    if (errno != EINVAL) ::_exit(errno & 0xff);
    break;  // a destination splice cannot write to: copy by hand
  }
  static char buf[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(from, buf, sizeof buf);
    if (n == 0) ::_exit(0);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::_exit(errno & 0xff);
    }
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(to, buf + done, static_cast<size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) ::_exit(w < 0 ? errno & 0xff : EIO);
      done += w;
    }
  }
}

// kCopy: the writer is kept like a process (reaped, its status written to its exit pipe).
void Copy(const int* fds, size_t fd_count) {
  Entry* slot = FreeEntry();
  if (fd_count != 3 || slot == nullptr) {
    CloseAll(fds, fd_count);
    Reply(-1, fd_count != 3 ? EBADMSG : ENOSPC, -1);
    return;
  }
  int pidfd = -1;
  const long r = CloneChild(&pidfd);
  if (r == 0) CopyInChild(fds[0], fds[1]);
  const int err = errno;
  CloseAll(fds, 2);
  if (r < 0) {
    ::close(fds[2]);
    Reply(-1, err, -1);
    return;
  }
  *slot = Entry{};
  slot->used = true;
  slot->pid = static_cast<int32_t>(r);
  slot->status = -1;
  slot->tag = kKeptCopy;
  slot->pidfd = pidfd;
  slot->exit_fd = fds[2];
  Reply(slot->pid, 0, pidfd);
}

void List() {
  int fds[kMaxHeldFds + 1];
  KeeperMessage m{kEntry, 0, 0, -1};
  SendToDaemon(&m, sizeof m, sandbox_held, sandbox_held_count);
  for (const Entry& e : entries) {
    if (!e.used) continue;
    size_t n = 0;
    fds[n++] = e.pidfd;
    for (uint32_t i = 0; i < e.held_count; ++i) fds[n++] = e.held[i];
    m = KeeperMessage{kEntry, e.pid, e.tag, e.reaped ? e.status : -1};
    SendToDaemon(&m, sizeof m, fds, n);
  }
  Send(KeeperMessage{kEnd, 0, 0, 0});
}

// One message from the daemon. False when the keeper is to exit.
bool Serve(ssize_t len, ReceivedFds<kMaxSpawnFds>& received) {
  int* const fds = received.fds;
  const size_t fd_count = received.count;
  const bool fds_ok = received.complete;
  uint32_t type = 0;
  if (len >= static_cast<ssize_t>(sizeof type)) std::memcpy(&type, request, sizeof type);
  if (type == kSpawnRequestMagic) {
    Spawn(len, fds, fd_count, fds_ok);
    return true;
  }
  KeeperMessage m{};
  if (len != static_cast<ssize_t>(sizeof m)) {
    CloseAll(fds, fd_count);
    return true;
  }
  std::memcpy(&m, request, sizeof m);
  switch (m.type) {
    case kHold:
      CloseAll(sandbox_held, sandbox_held_count);
      sandbox_held_count = 0;
      for (size_t i = 0; i < fd_count && i < kMaxHeldFds; ++i)
        sandbox_held[sandbox_held_count++] = fds[i];
      armed = true;
      return true;
    case kList:
      List();
      break;
    case kForget:
      if (Entry* e = Find(m.pid)) {
        if (e->reaped) {
          Drop(*e);
        } else {
          e->forget_on_reap = true;
        }
      }
      break;
    case kRelease:
      if (Entry* e = Find(m.pid)) {
        const int at = HeldIndex(e->tag, m.tag);
        if (at < 0 || static_cast<uint32_t>(at) >= e->held_count) break;
        ::close(e->held[at]);
        for (uint32_t i = static_cast<uint32_t>(at); i + 1 < e->held_count; ++i) {
          e->held[i] = e->held[i + 1];
        }
        --e->held_count;
        e->tag &= ~m.tag;
      }
      break;
    case kReplace:
      if (Entry* e = Find(m.pid); e && fd_count == 1) {
        const int at = HeldIndex(e->tag, m.tag);
        if (at >= 0 && static_cast<uint32_t>(at) < e->held_count) {
          ::close(e->held[at]);
          e->held[at] = fds[0];
          return true;
        }
      }
      break;
    case kCopy:
      Copy(fds, fd_count);
      return true;
    case kStop:
      CloseAll(fds, fd_count);
      KillEveryOther();
      return false;
    case kKillAll:
      KillEveryOther();
      Reap();
      Send(KeeperMessage{kKilled, 0, 0, init ? 0 : ENOTSUP});
      break;
    case kUpgrade:
      if (fd_count == 1) {
        const int err = Upgrade(fds[0]);  // returns only on failure: this keeper goes on
        ::close(fds[0]);
        Reply(-1, err, -1);
        return true;
      }
      break;
    default:
      break;
  }
  CloseAll(fds, fd_count);
  return true;
}

void Hello() {
  Send(KeeperMessage{kHello, static_cast<int32_t>(::getpid()), kKeeperVersion, 0});
}

void Ignore(int) {}

// The signals PID 1 answers: SIGCHLD, and from outside the sandbox the ones that end it
// gracefully. PID 1 of a namespace drops signals left at SIG_DFL; a handler makes them
// deliverable (here: pending, read through the signalfd). A keeper apart needs SIGCHLD only.
int SignalFd() {
  const int ends[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  if (init) {
    for (int sig : ends) sigaddset(&set, sig);
  }
  // Blocked first: one that comes before its handler stays pending, for the signalfd.
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
  if (init) {
    for (int sig : ends) {
      struct sigaction sa {};
      sa.sa_handler = Ignore;
      ::sigaction(sig, &sa, nullptr);
    }
  }
  return ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
}

// Whether `info` asks PID 1 to end the sandbox: a sender outside this pid namespace (the
// daemon, the host) reads as pid 0, and only kill() sets SI_USER: a queued signal (negative
// si_code) may claim any pid, and one the kernel sends for a sandbox's process (F_SETSIG) has a
// positive code.
bool EndsTheSandbox(const signalfd_siginfo& info) {
  return init && info.ssi_signo != SIGCHLD && info.ssi_code == SI_USER && info.ssi_pid == 0;
}

constexpr int kTermGraceMs = 2000;
constexpr int kLastReapMs = 300;

}  // namespace
}  // namespace sandstream::sandbox

int main() {
  using namespace sandstream::sandbox;
  const int err = Start();
  if (err != 0) {
    Reply(-1, err, -1);
    return 121;
  }
  const int sfd = SignalFd();
  if (sfd < 0) {
    Reply(-1, errno, -1);
    return 122;
  }
  Hello();
  Reap();  // after an upgrade: children that ended during the hand-over
  for (;;) {
    pollfd fds[3] = {{control, POLLIN, 0}, {listener, POLLIN, 0}, {sfd, POLLIN, 0}};
    if (::poll(fds, 3, reap_pending ? 0 : -1) < 0) {
      if (errno == EINTR) continue;
      return 123;
    }
    if (fds[2].revents & POLLIN) {
      signalfd_siginfo info;
      bool end = false;
      while (::read(sfd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        end = end || EndsTheSandbox(info);
      }
      if (end) {
        ::kill(-1, SIGTERM);
        ReapWithin(sfd, kTermGraceMs);
        return 0;
      }
    }
    if ((fds[2].revents & POLLIN) || reap_pending) Reap();
    if (fds[1].revents & POLLIN) {
      // A daemon (started again) takes over; the one before, if any, is gone or replaced.
      int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0 && init && !FromOutside(fd)) {
        ::close(fd);
        fd = -1;
      }
      if (fd >= 0) {
        if (control >= 0) ::close(control);
        control = fd;
        Hello();
        continue;  // fds[0] told of the connection just closed
      }
    }
    if (control >= 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      sandstream::ReceivedFds<kMaxSpawnFds> received;
      const ssize_t n = sandstream::ReceiveWithFds(control, request, sizeof request, received);
      if (n <= 0) {
        // The daemon is gone: keep everything for the next one. A sandbox whose daemon went
        // before it finished setting it up ends with it.
        ::close(control);
        control = -1;
        if (!armed) return 0;
        continue;
      }
      if (!Serve(n, received)) {
        ReapWithin(sfd, kLastReapMs);
        return 0;
      }
    }
  }
}
