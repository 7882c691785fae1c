// The daemon side of starting a process in a sandbox: pipes or terminal, the spawner request,
// then the process's pidfd and the verdict of its report pipe.
#include "sandbox/spawn.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
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

// Sends the request with `fds` (stdin if any, stdout, stderr); `close_child_ends` runs once
// the spawner holds its copies.
Result<SpawnedProcess> Launch(const SpawnContext& ctx, const SpawnRequest& request,
                              std::vector<int> fds, const std::function<void()>& close_child_ends) {
  auto message = EncodeSpawnRequest(request);
  if (!message) return std::move(message).error();
  auto report = MakePipe(false);
  if (!report) return std::move(report).error();
  fds.push_back(report->write.get());
  auto launched = ctx.spawner->Launch(ctx.site, *message, fds);
  report->write.reset();
  close_child_ends();
  if (!launched) return std::move(launched).error();
  const pid_t pid = *launched;

  // Only the daemon can reap its child, so the pid names it until then.
  Result<UniqueFd> pidfd = OpenPidFd(pid);
  auto failure = ReadChildReport(report->read.get());
  if (!failure || failure->has_value() || !pidfd) {
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    if (!pidfd) return std::move(pidfd).error();
    if (!failure) return Error{ErrorCode::kSandboxSetupFailed, "spawn: " + failure.error().message};
    const ChildFailure& f = **failure;
    const bool exec_failed = std::string_view(f.step).rfind("execve ", 0) == 0;
    return SysError(exec_failed ? ErrorCode::kInvalidRequest : ErrorCode::kSandboxSetupFailed,
                    std::string("spawn: ") + f.step, f.err);
  }
  SpawnedProcess p;
  p.pid = pid;
  p.pidfd = std::move(*pidfd);
  return p;
}

Result<SpawnedProcess> SpawnOnTerminal(const SpawnContext& ctx, const ProcessSpec& spec,
                                       SpawnRequest& request) {
  auto pty = OpenPty(ctx.ptmx, spec.pty->rows, spec.pty->cols);
  if (!pty) return std::move(pty).error();
  // Owned by the process's user and the tty group as the sandbox sees them, like a login's.
  if (::fchown(pty->slave.get(), ctx.host_id_base + request.uid, ctx.host_id_base + kTtyGroupId) !=
          0 ||
      ::fchmod(pty->slave.get(), 0620) != 0) {
    return SysError(ErrorCode::kSandboxSetupFailed, "pty: chown", errno);
  }
  request.tty = true;
  request.has_stdin = true;
  const int slave = pty->slave.get();
  auto started = Launch(ctx, request, {slave, slave, slave}, [&] { pty->slave.reset(); });
  if (!started) return std::move(started).error();
  SpawnedProcess p = std::move(*started);
  p.stdout_fd = std::move(pty->master);
  return p;
}

}  // namespace

Result<SpawnedProcess> SpawnInSandbox(const SpawnContext& ctx, const ProcessSpec& spec) {
  if (spec.argv.empty()) return Error{ErrorCode::kInvalidRequest, "argv is empty"};
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

  if (spec.pty) return SpawnOnTerminal(ctx, spec, request);
  auto stdio = StdioPipes::Make(spec);
  if (!stdio) return std::move(stdio).error();
  std::vector<int> fds;
  request.has_stdin = spec.open_stdin;
  if (spec.open_stdin) fds.push_back(stdio->child_stdin());
  fds.push_back(stdio->child_stdout());
  fds.push_back(stdio->child_stderr());
  auto started = Launch(ctx, request, std::move(fds), [&] { stdio->CloseChildEnds(); });
  if (!started) return std::move(started).error();
  SpawnedProcess p = std::move(*started);
  stdio->HandOver(p);
  return p;
}

}  // namespace sandstream::sandbox
