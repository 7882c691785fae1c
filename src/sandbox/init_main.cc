// PID 1 of every sandbox: reaps orphans, turns SIGTERM from outside the sandbox into a graceful
// end of it (the sandbox's own processes cannot end it), and obeys the daemon on its control
// socket (fd 3): 'K' kills every other process and answers 'k'; EOF means the daemon is gone
// and the sandbox ends with it. Holds fd 4, when the daemon gave one, for the daemon to reach
// through /proc (the sandbox's writable layer). Static, no dependencies.
#include <errno.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

namespace {

constexpr int kControlFd = 3;
constexpr int kTermGraceMs = 2000;

void Reap() {
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

// Keeps only CAP_KILL (to signal the sandbox's processes whatever their uid) and makes this
// process undumpable, so a process of the same uid cannot reach it through /proc/1/mem.
bool DropPrivileges() {
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return false;
  for (int cap = 0; cap <= 63; ++cap) {
    if (cap == CAP_KILL) continue;
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) return false;
  }
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  data[0].effective = data[0].permitted = 1u << CAP_KILL;
  if (::syscall(SYS_capset, &header, data) != 0) return false;
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0;
}

long NowMs() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// TERM to everything, reap while they go, then return; PID 1's exit SIGKILLs the rest.
void GracefulEnd(int sfd) {
  ::kill(-1, SIGTERM);
  const long deadline = NowMs() + kTermGraceMs;
  while (::kill(-1, 0) == 0) {
    const long left = deadline - NowMs();
    if (left <= 0) return;
    pollfd p{sfd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(left < 10 ? left : 10));
    signalfd_siginfo info;
    while (::read(sfd, &info, sizeof info) > 0) {
    }
    Reap();
  }
}

void Ignore(int) {}

}  // namespace

int main() {
  // Exec'd from a memfd, the command name would read "memfd:sandstrea" in ps.
  ::prctl(PR_SET_NAME, "sandstream-init", 0, 0, 0);
  if (!DropPrivileges()) return 120;
  sigset_t set;
  sigemptyset(&set);
  const int handled[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
  for (int sig : handled) {
    sigaddset(&set, sig);
    // PID 1 of a namespace drops signals left at SIG_DFL; a handler makes them deliverable
    // (here: pending, read through the signalfd).
    struct sigaction sa{};
    sa.sa_handler = Ignore;
    ::sigaction(sig, &sa, nullptr);
  }
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
  int sfd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) return 121;
  for (int fd = 0; fd < 3; ++fd) ::close(fd);

  const char ready = 'R';
  if (::write(kControlFd, &ready, 1) != 1) return 122;

  for (;;) {
    pollfd fds[2] = {{sfd, POLLIN, 0}, {kControlFd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return 123;
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (::read(sfd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        const int sig = static_cast<int>(info.ssi_signo);
        // A sender outside this pid namespace (the daemon, the host) reads as pid 0, and only
        // kill() sets SI_USER: a queued signal (negative si_code) may claim any pid, and one the
        // kernel sends for a sandbox's process (F_SETSIG) has a positive code.
        const bool from_outside = info.ssi_code == SI_USER && info.ssi_pid == 0;
        if (from_outside && (sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT)) {
          GracefulEnd(sfd);
          return 0;
        }
      }
      Reap();
    }
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      char command;
      ssize_t n = ::read(kControlFd, &command, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return 0;
      if (command == 'K') {
        // kill(-1) from PID 1 reaches every process of the namespace but itself, in one pass
        // under the tasklist lock, so a fork bomb cannot outrun it.
        ::kill(-1, SIGKILL);
        Reap();
        const char done = 'k';
        if (::write(kControlFd, &done, 1) != 1) return 0;
      }
    }
  }
}
