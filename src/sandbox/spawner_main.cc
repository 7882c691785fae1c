// The spawner of one sandbox (spawner.h): started by the daemon inside the sandbox's
// namespaces and cgroups but in the host's pid namespace, it turns each request on its control
// socket (fd 3) into a clone(CLONE_PARENT) whose child runs launch.cc's steps, and answers
// with the child's pid. EOF means the daemon is gone. Static, no dependencies.
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "sandbox/caps.h"
#include "sandbox/launch.h"
#include "sandbox/spawn_request.h"

namespace sandstream::sandbox {
namespace {

constexpr int kControlFd = 3;

// Never touched beyond the last request's length, so it costs only the pages a request used.
alignas(16) char request[kMaxSpawnRequestBytes];

bool Reply(int32_t pid, int32_t err) {
  const SpawnReply reply{pid, err};
  ssize_t n;
  do {
    n = ::send(kControlFd, &reply, sizeof reply, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(sizeof reply);
}

// 0 or the errno of the step that failed. `daemon` is the pid the spawner must be a child of.
int Start(pid_t daemon) {
  // Exec'd from a memfd, the command name would read "memfd:sandstrea" in ps.
  ::prctl(PR_SET_NAME, "sandstream-spwn", 0, 0, 0);
  // Out of the daemon's process group and session: a Ctrl-C or hang-up meant for a daemon run
  // in a terminal must not reach the spawners (they die with the daemon anyway).
  if (::setsid() < 0) return errno;
  // Received fds must never land on 0, 1 or 2, which each child overwrites in turn.
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0) return errno;
  for (int fd = 0; fd < 3; ++fd) {
    if (::dup2(null, fd) < 0) return errno;
  }
  if (null > 2) ::close(null);
  // Children need these to switch uid and drop their own sets; the rest goes now. A failure
  // here reaches nobody (no report pipe): the daemon sees the socket close before "ready".
  const uint64_t keep =
      (uint64_t{1} << CAP_SETUID) | (uint64_t{1} << CAP_SETGID) | (uint64_t{1} << CAP_SETPCAP);
  DropPrivilegesInChild(0, 0, keep, -1);
  // After every credential change, which would clear both.
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return errno;
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) return errno;
  // The daemon may have died before PDEATHSIG was armed.
  if (::getppid() != daemon) return ESRCH;
  return 0;
}

// One request: the fds it carries are closed here whatever happens; the child has its copies.
bool Serve(ssize_t len, msghdr& msg) {
  int fds[kMaxSpawnFds];
  size_t fd_count = 0;
  bool fds_ok = (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) == 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const unsigned char* data = CMSG_DATA(c);
    for (size_t i = 0; i < n; ++i) {
      int fd;
      std::memcpy(&fd, data + i * sizeof fd, sizeof fd);
      if (fd_count < kMaxSpawnFds) {
        fds[fd_count++] = fd;
      } else {
        ::close(fd);
        fds_ok = false;
      }
    }
  }
  ParsedSpawnRequest parsed;
  int32_t pid = -1;
  int32_t err = EBADMSG;
  if (fds_ok && ParseSpawnRequest(request, static_cast<size_t>(len), fds, fd_count, &parsed)) {
    // CLONE_PARENT: the process is the daemon's own child, which waits for it by pidfd. It
    // lands in the sandbox's pid namespace and inherits this process's cgroups.
    const long r = ::syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0);
    if (r == 0) RunProcessInChild(parsed.launch);
    pid = static_cast<int32_t>(r);
    err = r < 0 ? errno : 0;
  }
  for (size_t i = 0; i < fd_count; ++i) ::close(fds[i]);
  return Reply(pid, err);
}

}  // namespace
}  // namespace sandstream::sandbox

int main(int argc, char** argv) {
  using namespace sandstream::sandbox;
  if (argc != 2) return 120;
  const int err = Start(static_cast<pid_t>(::atol(argv[1])));
  if (err != 0) {
    Reply(-1, err);
    return 121;
  }
  if (!Reply(0, 0)) return 122;
  for (;;) {
    iovec iov{request, sizeof request};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxSpawnFds)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(kControlFd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 0;
    if (!Serve(n, msg)) return 0;
  }
}
