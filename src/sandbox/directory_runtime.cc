#include "sandbox/directory_runtime.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <set>
#include <system_error>

#include "base/log.h"
#include "platform/fd.h"
#include "platform/pty.h"
#include "platform/signals.h"
#include "sandbox/child_report.h"
#include "sandbox/stdio.h"

namespace sandstream::sandbox {
namespace {

namespace fs = std::filesystem;

// Sandbox paths are "/workspace/..."; here they live below the sandbox's directory.
std::string HostPath(const std::string& root, const std::string& inside) {
  if (inside.empty()) return root + "/workspace";
  if (inside[0] == '/') return root + inside;
  return root + "/workspace/" + inside;
}

class DirectorySandbox final : public Sandbox {
 public:
  DirectorySandbox(std::string id, std::string root, Limits limits)
      : id_(std::move(id)), root_(std::move(root)), limits_(limits) {}
  ~DirectorySandbox() override { (void)DestroyNow(); }

  const std::string& id() const override { return id_; }
  uint64_t OomKills() const override { return 0; }
  std::string RootPath() const override { return root_; }

  Op<Result<void>> KillAll() override {
    KillGroups();
    co_return Ok{};
  }

  Op<Result<void>> Destroy() override { co_return DestroyNow(); }

  // Unisolated: a group number is all there is; only groups this sandbox started are signalled.
  void SignalGroup(pid_t pgid, int sig) override {
    if (groups_.contains(pgid)) ::kill(-pgid, sig);
  }

  Op<Result<SpawnedProcess>> Spawn(ProcessSpec spec) override {
    if (destroyed_) co_return Error{ErrorCode::kNotFound, "sandbox " + id_ + " is deleted"};
    if (spec.argv.empty()) co_return Error{ErrorCode::kInvalidRequest, "argv is empty"};

    // Everything the child needs is prepared before fork: it must not allocate.
    std::vector<char*> argv;
    for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<std::string> env = spec.env;
    std::vector<char*> envp;
    envp.reserve(env.size() + 1);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const std::string cwd = HostPath(root_, spec.cwd);
    const rlim_t nofile = static_cast<rlim_t>(limits_.open_files);

    if (spec.pty) co_return co_await SpawnOnTerminal(spec, argv, envp, cwd, nofile);
    auto stdio = StdioPipes::Make(spec);
    if (!stdio) co_return std::move(stdio).error();
    auto report = MakePipe(false);
    if (!report) co_return std::move(report).error();

    const int in_fd = stdio->child_stdin();
    const int out_fd = stdio->child_stdout();
    const int err_fd = stdio->child_stderr();
    const int report_fd = report->write.get();

    pid_t pid = ::fork();
    if (pid < 0) co_return SysError(ErrorCode::kSandboxSetupFailed, "spawn: fork", errno);
    if (pid == 0) {
      if (::setpgid(0, 0) != 0) ReportAndExit(report_fd, "setpgid", errno);
      // Unisolated processes must not outlive a daemon that died without cleaning up.
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        ReportAndExit(report_fd, "prctl PDEATHSIG", errno);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      for (int s = 1; s < NSIG; ++s) signal(s, SIG_DFL);
      int null_fd = -1;
      if (in_fd < 0) {
        null_fd = ::open("/dev/null", O_RDONLY);
        if (null_fd < 0) ReportAndExit(report_fd, "open /dev/null", errno);
      }
      if (::dup2(in_fd >= 0 ? in_fd : null_fd, 0) < 0)
        ReportAndExit(report_fd, "dup2 stdin", errno);
      if (::dup2(out_fd, 1) < 0) ReportAndExit(report_fd, "dup2 stdout", errno);
      if (::dup2(err_fd, 2) < 0) ReportAndExit(report_fd, "dup2 stderr", errno);
      // The pipes were non-blocking for the daemon's end only; the child's ends are blocking.
      struct rlimit rl {
        nofile, nofile
      };
      if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) ReportAndExit(report_fd, "setrlimit NOFILE", errno);
      struct rlimit core {
        0, 0
      };
      (void)::setrlimit(RLIMIT_CORE, &core);
      if (::chdir(cwd.c_str()) != 0) ReportAndExit(report_fd, "chdir", errno);
      ::execvpe(argv[0], argv.data(), envp.data());
      ReportAndExit(report_fd, "execve", errno);
    }

    report->write.reset();
    stdio->CloseChildEnds();
    Result<SpawnedProcess> p = co_await Adopt(pid, report->read.get());
    if (!p) co_return p;
    stdio->HandOver(*p);
    co_return p;
  }

 private:
  // A host terminal: there is no devpts of the sandbox's own without namespaces.
  Op<Result<SpawnedProcess>> SpawnOnTerminal(const ProcessSpec& spec, std::vector<char*>& argv,
                                             std::vector<char*>& envp, const std::string& cwd,
                                             rlim_t nofile) {
    auto pty = OpenPty("/dev/ptmx", spec.pty->rows, spec.pty->cols);
    if (!pty) co_return std::move(pty).error();
    auto report = MakePipe(false);
    if (!report) co_return std::move(report).error();
    const int tty = pty->slave.get();
    const int report_fd = report->write.get();
    pid_t pid = ::fork();
    if (pid < 0) co_return SysError(ErrorCode::kSandboxSetupFailed, "spawn: fork", errno);
    if (pid == 0) {
      if (::setsid() < 0) ReportAndExit(report_fd, "setsid", errno);
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
        ReportAndExit(report_fd, "prctl PDEATHSIG", errno);
      }
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      for (int s = 1; s < NSIG; ++s) signal(s, SIG_DFL);
      for (int fd = 0; fd < 3; ++fd) {
        if (::dup2(tty, fd) < 0) ReportAndExit(report_fd, "dup2 tty", errno);
      }
      if (::ioctl(0, TIOCSCTTY, 0) != 0) ReportAndExit(report_fd, "pty: TIOCSCTTY", errno);
      struct rlimit rl {
        nofile, nofile
      };
      if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) ReportAndExit(report_fd, "setrlimit NOFILE", errno);
      if (::chdir(cwd.c_str()) != 0) ReportAndExit(report_fd, "chdir", errno);
      ::execvpe(argv[0], argv.data(), envp.data());
      ReportAndExit(report_fd, "execve", errno);
    }
    report->write.reset();
    pty->slave.reset();
    Result<SpawnedProcess> p = co_await Adopt(pid, report->read.get());
    if (!p) co_return p;
    p->stdout_fd = std::move(pty->master);
    co_return p;
  }

  // After the fork: the child's verdict from its report pipe, then its pidfd; the process
  // group is the sandbox's to kill from then on.
  Op<Result<SpawnedProcess>> Adopt(pid_t pid, int report_read) {
    auto pidfd = OpenPidFd(pid);
    Result<void> exec = co_await AwaitExec(report_read, ErrorCode::kInvalidRequest);
    if (!exec || !pidfd) {
      // A child that failed exits at once; one that did not answer is killed first.
      if (pidfd) (void)SignalPidfd(pidfd->get(), SIGKILL);
      if (pidfd) (void)co_await Readable{pidfd->get(), In(std::chrono::seconds(5))};
      siginfo_t info{};
      ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG);
      if (!exec) co_return std::move(exec).error();
      co_return std::move(pidfd).error();
    }
    groups_.insert(pid);
    SpawnedProcess p;
    p.pid = pid;
    p.pidfd = std::move(*pidfd);
    co_return std::move(p);
  }

  void KillGroups() {
    for (pid_t pgid : groups_) ::kill(-pgid, SIGKILL);
  }

  Result<void> DestroyNow() {
    if (destroyed_) return Ok{};
    KillGroups();
    destroyed_ = true;
    std::error_code ec;
    fs::remove_all(root_, ec);
    if (ec) return Error{ErrorCode::kInternal, "remove " + root_ + ": " + ec.message()};
    return Ok{};
  }

  std::string id_;
  std::string root_;
  Limits limits_;
  // Process groups ever started here; a stale pgid gets ESRCH, which is harmless.
  std::set<pid_t> groups_;
  bool destroyed_ = false;
};

}  // namespace

Op<Result<std::unique_ptr<Sandbox>>> DirectoryRuntime::Create(SandboxSpec spec) {
  if (!spec.volumes.empty()) {
    co_return Error{ErrorCode::kInvalidRequest,
                    "volumes: this daemon's runtime (directory) cannot mount them; the "
                    "namespace runtime does"};
  }
  if (!spec.checkpoint.empty()) {
    co_return Error{ErrorCode::kNotImplemented,
                    "this daemon's runtime (directory) cannot make a sandbox from a checkpoint"};
  }
  const std::string root = base_dir_ + "/" + spec.id;
  std::error_code ec;
  fs::create_directories(root + "/workspace", ec);
  if (ec) {
    co_return Error{ErrorCode::kSandboxSetupFailed,
                    "directory: mkdir " + root + "/workspace: " + ec.message()};
  }
  fs::create_directories(root + "/tmp", ec);
  co_return std::unique_ptr<Sandbox>(new DirectorySandbox(spec.id, root, spec.limits));
}

void DirectoryRuntime::CleanupLeftovers(const std::vector<std::string>& keep) {
  (void)keep;  // nothing outlives a daemon here: its processes die with it
  std::error_code ec;
  if (!fs::exists(base_dir_, ec)) return;
  for (const auto& entry : fs::directory_iterator(base_dir_, ec)) {
    log::Info("removing leftover sandbox directory", {{"path", entry.path().string()}});
    fs::remove_all(entry.path(), ec);
  }
}

}  // namespace sandstream::sandbox
