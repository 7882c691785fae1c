// The launch path of a process in a sandbox: parent-side preparation, the helper that joins
// the namespaces, and the process's own steps before execve.
#include "sandbox/spawn.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <functional>
#include <string>

#include "platform/fd.h"
#include "platform/pty.h"
#include "sandbox/caps.h"
#include "sandbox/child_report.h"
#include "sandbox/mounts.h"
#include "sandbox/seccomp.h"

namespace sandstream::sandbox {
namespace {

constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
constexpr gid_t kTtyGroupId = 5;  // "tty" in Debian's /etc/group, devpts' gid= option
constexpr int kAllNamespaces = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET |
                               CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWCGROUP;

// Everything the process needs, prepared before fork: after it, nothing allocates.
struct Launch {
  std::vector<std::string> exec_paths;
  std::vector<char*> argv;
  std::vector<char*> envp;
  std::string cwd;
  std::string exec_label;
  uid_t uid = kSandboxUserId;
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  int report_fd = -1;
  bool tty = false;  // 0, 1 and 2 are a terminal: become its session leader
};

std::vector<std::string> ExecCandidates(const ProcessSpec& spec) {
  const std::string& name = spec.argv[0];
  if (name.find('/') != std::string::npos) return {name};
  std::string path = kDefaultPath;
  for (const auto& e : spec.env) {
    if (e.rfind("PATH=", 0) == 0) path = e.substr(5);
  }
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    if (dir.empty()) dir = ".";
    out.push_back(dir + "/" + name);
    start = end + 1;
  }
  return out;
}

[[noreturn]] void RunProcess(const SpawnContext& ctx, const Launch& l) {
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

  SetRlimitsInChild(ctx.open_files, report);
  DropPrivilegesInChild(l.uid, l.uid, 0, report);
  if (::chdir(l.cwd.c_str()) != 0) ReportAndExit(report, "chdir", errno);
  LoadSeccompInChild(ctx.seccomp, report);

  int err = ENOENT;
  for (const auto& path : l.exec_paths) {
    ::execve(path.c_str(), l.argv.data(), l.envp.data());
    // Like execvp: a PATH entry that exists but cannot run is the answer, not a later ENOENT.
    if (errno != ENOENT && errno != ENOTDIR) err = errno;
  }
  ReportAndExit(report, l.exec_label.c_str(), err);
}

// The helper: joins cgroups and namespaces, clones the process as the daemon's child, reports
// its host pid on `pid_fd` and exits.
[[noreturn]] void RunHelper(const SpawnContext& ctx, const Launch& l, int pid_fd) {
  for (int fd : ctx.cgroup_procs) {
    if (::write(fd, "0", 1) != 1) ReportAndExit(l.report_fd, "cgroup attach", errno);
  }
  if (::setns(ctx.init_pidfd, kAllNamespaces) != 0) ReportAndExit(l.report_fd, "setns", errno);
  pid_t pid = static_cast<pid_t>(::syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0));
  if (pid < 0) ReportAndExit(l.report_fd, "clone", errno);
  if (pid == 0) RunProcess(ctx, l);
  if (::write(pid_fd, &pid, sizeof pid) != static_cast<ssize_t>(sizeof pid)) {
    ::kill(pid, SIGKILL);
    ReportAndExit(l.report_fd, "report pid", errno);
  }
  ::_exit(0);
}

// Forks the helper for a prepared launch; `close_child_ends` runs in the parent after the fork.
Result<SpawnedProcess> Fork(const SpawnContext& ctx, Launch& l,
                            const std::function<void()>& close_child_ends) {
  auto report = MakePipe(false);
  if (!report) return std::move(report).error();
  auto pid_pipe = MakePipe(false);
  if (!pid_pipe) return std::move(pid_pipe).error();
  l.report_fd = report->write.get();

  pid_t helper = ::fork();
  if (helper < 0) return SysError(ErrorCode::kSandboxSetupFailed, "spawn: fork", errno);
  if (helper == 0) RunHelper(ctx, l, pid_pipe->write.get());

  report->write.reset();
  pid_pipe->write.reset();
  close_child_ends();

  pid_t pid = -1;
  ssize_t n;
  do {
    n = ::read(pid_pipe->read.get(), &pid, sizeof pid);
  } while (n < 0 && errno == EINTR);
  while (::waitpid(helper, nullptr, 0) < 0 && errno == EINTR) {
  }
  if (n != static_cast<ssize_t>(sizeof pid)) pid = -1;

  Result<UniqueFd> pidfd = pid > 0 ? OpenPidFd(pid) : Result<UniqueFd>(UniqueFd());
  auto failure = ReadChildReport(report->read.get());
  if (!failure || failure->has_value()) {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    if (!failure) return Error{ErrorCode::kSandboxSetupFailed, "spawn: " + failure.error().message};
    const ChildFailure& f = **failure;
    const bool exec_failed = std::string_view(f.step).rfind("execve ", 0) == 0;
    return SysError(exec_failed ? ErrorCode::kInvalidRequest : ErrorCode::kSandboxSetupFailed,
                    std::string("spawn: ") + f.step, f.err);
  }
  if (!pidfd) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return std::move(pidfd).error();
  }
  SpawnedProcess p;
  p.pid = pid;
  p.pidfd = std::move(*pidfd);
  return p;
}


Result<SpawnedProcess> SpawnOnTerminal(const SpawnContext& ctx, const ProcessSpec& spec,
                                       Launch& l) {
  auto pty = OpenPty(ctx.ptmx, spec.pty->rows, spec.pty->cols);
  if (!pty) return std::move(pty).error();
  // Owned by the process's user and the tty group as the sandbox sees them, like a login's.
  if (::fchown(pty->slave.get(), ctx.host_id_base + l.uid, ctx.host_id_base + kTtyGroupId) != 0 ||
      ::fchmod(pty->slave.get(), 0620) != 0) {
    return SysError(ErrorCode::kSandboxSetupFailed, "pty: chown", errno);
  }
  l.tty = true;
  l.stdin_fd = l.stdout_fd = l.stderr_fd = pty->slave.get();
  auto started = Fork(ctx, l, [&] { pty->slave.reset(); });
  if (!started) return std::move(started).error();
  SpawnedProcess p = std::move(*started);
  p.stdout_fd = std::move(pty->master);
  return p;
}

}  // namespace

Result<SpawnedProcess> SpawnInSandbox(const SpawnContext& ctx, const ProcessSpec& spec) {
  if (spec.argv.empty()) return Error{ErrorCode::kInvalidRequest, "argv is empty"};
  Launch l;
  l.exec_paths = ExecCandidates(spec);
  for (const auto& a : spec.argv) l.argv.push_back(const_cast<char*>(a.c_str()));
  l.argv.push_back(nullptr);
  for (const auto& e : spec.env) l.envp.push_back(const_cast<char*>(e.c_str()));
  l.envp.push_back(nullptr);
  l.cwd = spec.cwd.empty() ? "/workspace" : spec.cwd;
  if (l.cwd[0] != '/') l.cwd.insert(0, "/workspace/");
  l.exec_label = "execve " + spec.argv[0];
  l.uid = spec.as_root ? 0 : kSandboxUserId;

  if (spec.pty) return SpawnOnTerminal(ctx, spec, l);
  auto out = MakePipe(true);
  if (!out) return std::move(out).error();
  Result<Pipe> err = Pipe{};
  if (!spec.merge_stderr) {
    err = MakePipe(true);
    if (!err) return std::move(err).error();
  }
  Result<Pipe> in = Pipe{};
  if (spec.open_stdin) {
    in = MakePipe(false);
    if (!in) return std::move(in).error();
  }
  GrowPipe(out->write.get(), 1 << 20);

  l.stdin_fd = spec.open_stdin ? in->read.get() : -1;
  l.stdout_fd = out->write.get();
  l.stderr_fd = spec.merge_stderr ? l.stdout_fd : err->write.get();
  auto started = Fork(ctx, l, [&] {
    out->write.reset();
    if (!spec.merge_stderr) err->write.reset();
    if (spec.open_stdin) in->read.reset();
  });
  if (!started) return std::move(started).error();
  SpawnedProcess p = std::move(*started);
  p.stdout_fd = std::move(out->read);
  if (!spec.merge_stderr) p.stderr_fd = std::move(err->read);
  if (spec.open_stdin) p.stdin_fd = std::move(in->write);
  return p;
}

}  // namespace sandstream::sandbox
