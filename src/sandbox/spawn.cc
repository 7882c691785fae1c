// The daemon side of starting a process in a sandbox: pipes or terminal, the spawner request,
// then the process's pidfd and the verdict of its report pipe.
#include "sandbox/spawn.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "platform/fd.h"
#include "platform/pty.h"
#include "sandbox/child_report.h"
#include "sandbox/mounts.h"
#include "sandbox/stdio.h"

namespace sandstream::sandbox {
namespace {

constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
constexpr gid_t kTtyGroupId = 5;  // "tty" in Debian's /etc/group, devpts' gid= option

// Kills a child that failed to start and reaps it: it is the daemon's own child.
Op<int> Discard(pid_t pid, int pidfd) {
  ::kill(pid, SIGKILL);
  if (pidfd >= 0) (void)co_await Readable{pidfd, In(std::chrono::seconds(5))};
  siginfo_t info{};
  ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG);
  co_return 0;
}

// Sends the request with `fds` (stdin if any, stdout, stderr); `close_child_ends` runs once
// the spawner holds its copies.
Op<Result<SpawnedProcess>> Launch(const SpawnContext& ctx, const SpawnRequest& request,
                                  std::vector<int> fds, std::function<void()> close_child_ends) {
  auto message = EncodeSpawnRequest(request);
  if (!message) co_return std::move(message).error();
  auto report = MakePipe(false);
  if (!report) co_return std::move(report).error();
  fds.push_back(report->write.get());
  Result<pid_t> launched = co_await ctx.spawner->Launch(ctx.site, *message, fds);
  report->write.reset();
  close_child_ends();
  if (!launched) co_return std::move(launched).error();
  const pid_t pid = *launched;

  // Only the daemon can reap its child, so the pid names it until then.
  Result<UniqueFd> pidfd = OpenPidFd(pid);
  Result<std::optional<ChildFailure>> failure = co_await ReadChildReport(report->read.get());
  if (!failure || failure->has_value() || !pidfd) {
    (void)co_await Discard(pid, pidfd ? pidfd->get() : -1);
    if (!pidfd) co_return std::move(pidfd).error();
    if (!failure) {
      co_return Error{ErrorCode::kSandboxSetupFailed, "spawn: " + failure.error().message};
    }
    const ChildFailure& f = **failure;
    const bool exec_failed = std::string_view(f.step).rfind("execve ", 0) == 0;
    co_return SysError(exec_failed ? ErrorCode::kInvalidRequest : ErrorCode::kSandboxSetupFailed,
                       std::string("spawn: ") + f.step, f.err);
  }
  SpawnedProcess p;
  p.pid = pid;
  p.pidfd = std::move(*pidfd);
  co_return std::move(p);
}

Op<Result<SpawnedProcess>> SpawnOnTerminal(const SpawnContext& ctx, const ProcessSpec& spec,
                                           SpawnRequest& request) {
  auto pty = OpenPty(ctx.ptmx, spec.pty->rows, spec.pty->cols);
  if (!pty) co_return std::move(pty).error();
  // Owned by the process's user and the tty group as the sandbox sees them, like a login's.
  if (::fchown(pty->slave.get(), ctx.host_id_base + request.uid, ctx.host_id_base + kTtyGroupId) !=
          0 ||
      ::fchmod(pty->slave.get(), 0620) != 0) {
    co_return SysError(ErrorCode::kSandboxSetupFailed, "pty: chown", errno);
  }
  request.tty = true;
  request.has_stdin = true;
  const int slave = pty->slave.get();
  std::vector<int> fds{slave, slave, slave};
  Result<SpawnedProcess> started =
      co_await Launch(ctx, request, std::move(fds), [&pty] { pty->slave.reset(); });
  if (!started) co_return std::move(started).error();
  SpawnedProcess p = std::move(*started);
  p.stdout_fd = std::move(pty->master);
  co_return std::move(p);
}

}  // namespace

Op<Result<SpawnedProcess>> SpawnInSandbox(SpawnContext ctx, ProcessSpec spec) {
  if (spec.argv.empty()) co_return Error{ErrorCode::kInvalidRequest, "argv is empty"};
  SpawnRequest request;
  request.argv = spec.argv;
  request.env = spec.env;
  request.cwd = spec.cwd.empty() ? "/workspace" : spec.cwd;
  if (request.cwd[0] != '/') request.cwd.insert(0, "/workspace/");
  if (spec.argv[0].find('/') == std::string::npos) {
    request.search_path = kDefaultPath;
    for (const auto& e : spec.env) {
      if (e.rfind("PATH=", 0) == 0) request.search_path = e.substr(5);
    }
  }
  request.uid = spec.as_root ? 0 : kSandboxUserId;
  request.open_files = ctx.open_files;
  request.seccomp = ctx.seccomp;

  if (spec.pty) co_return co_await SpawnOnTerminal(ctx, spec, request);
  auto stdio = StdioPipes::Make(spec);
  if (!stdio) co_return std::move(stdio).error();
  std::vector<int> fds;
  request.has_stdin = spec.open_stdin;
  if (spec.open_stdin) fds.push_back(stdio->child_stdin());
  fds.push_back(stdio->child_stdout());
  fds.push_back(stdio->child_stderr());
  Result<SpawnedProcess> started =
      co_await Launch(ctx, request, std::move(fds), [&stdio] { stdio->CloseChildEnds(); });
  if (!started) co_return std::move(started).error();
  SpawnedProcess p = std::move(*started);
  stdio->HandOver(p);
  co_return std::move(p);
}

}  // namespace sandstream::sandbox
