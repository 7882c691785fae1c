// The process side of a spawn (launch.h): compiled into the spawner executable.
#include "sandbox/launch.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "sandbox/caps.h"
#include "sandbox/child_report.h"

namespace sandstream::sandbox {
namespace {

// Appends `s` to `buf` at `*len`; false when it does not fit with its terminating NUL.
bool Append(char* buf, size_t size, size_t* len, const char* s, size_t n) {
  if (n >= size - *len) return false;
  for (size_t i = 0; i < n; ++i) buf[(*len)++] = s[i];
  buf[*len] = '\0';
  return true;
}

size_t Length(const char* s) {
  size_t n = 0;
  while (s[n] != '\0') ++n;
  return n;
}

// Like execvp over `search_path`: returns the errno to report when no candidate ran.
int ExecSearching(const LaunchSpec& l) {
  const char* name = l.argv[0];
  if (l.search_path == nullptr) {
    ::execve(name, l.argv, l.envp);
    return errno;
  }
  const size_t name_len = Length(name);
  int err = ENOENT;
  const char* dir = l.search_path;
  for (;;) {
    const char* end = dir;
    while (*end != '\0' && *end != ':') ++end;
    char path[PATH_MAX];
    size_t len = 0;
    path[0] = '\0';
    const bool fits =
        (end == dir ? Append(path, sizeof path, &len, ".", 1)
                    : Append(path, sizeof path, &len, dir, static_cast<size_t>(end - dir))) &&
        Append(path, sizeof path, &len, "/", 1) && Append(path, sizeof path, &len, name, name_len);
    // A candidate the kernel would refuse as too long fails the same way here.
    int e = ENAMETOOLONG;
    if (fits) {
      ::execve(path, l.argv, l.envp);
      e = errno;
    }
    // Like execvp: a PATH entry that exists but cannot run is the answer, not a later ENOENT.
    if (e != ENOENT && e != ENOTDIR) err = e;
    if (*end == '\0') break;
    dir = end + 1;
  }
  return err;
}

}  // namespace

void RunProcessInChild(const LaunchSpec& l) {
  const int report = l.report_fd;
  // A session leader also leads its process group, so group kills work the same either way.
  if (l.tty) {
    if (::setsid() < 0) ReportAndExit(report, "setsid", errno);
  } else if (::setpgid(0, 0) != 0) {
    ReportAndExit(report, "setpgid", errno);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);

  int in = l.stdin_fd;
  if (in < 0) {
    in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in < 0) ReportAndExit(report, "open /dev/null", errno);
  }
  if (::dup2(in, 0) < 0) ReportAndExit(report, "dup2 stdin", errno);
  if (::dup2(l.stdout_fd, 1) < 0) ReportAndExit(report, "dup2 stdout", errno);
  if (::dup2(l.stderr_fd, 2) < 0) ReportAndExit(report, "dup2 stderr", errno);
  if (l.tty && ::ioctl(0, TIOCSCTTY, 0) != 0) ReportAndExit(report, "pty: TIOCSCTTY", errno);
  if (::syscall(SYS_close_range, 3, ~0u, CLOSE_RANGE_CLOEXEC) != 0) {
    ReportAndExit(report, "close_range", errno);
  }

  // PID 1 is exempt from the OOM killer and its children would inherit that: a sandbox that
  // runs out of memory must lose its own processes, never its PID 1 (which keeps the daemon's
  // score where it cannot have -1000), and, host-wide, before the host's.
  const int oom = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (oom < 0 || ::write(oom, "500", 3) != 3) ReportAndExit(report, "oom_score_adj", errno);
  ::close(oom);
  SetRlimitsInChild(l.open_files, report);
  SetCredentialsInChild(l.uid, l.gid, l.seccomp, report);
  if (::chdir(l.cwd) != 0) ReportAndExit(report, "chdir", errno);

  const int err = ExecSearching(l);
  // "execve <argv[0]>", cut to what a report carries.
  char label[sizeof(ChildFailure::step)];
  size_t len = 0;
  label[0] = '\0';
  Append(label, sizeof label, &len, "execve ", 7);
  const char* name = l.argv[0];
  for (size_t i = 0; name[i] != '\0' && len + 1 < sizeof label; ++i) label[len++] = name[i];
  label[len] = '\0';
  ReportAndExit(report, label, err);
}

}  // namespace sandstream::sandbox
