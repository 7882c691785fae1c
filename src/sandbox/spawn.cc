// The daemon side of starting a process in a sandbox: pipes or terminal, the spawner request,
// then the process's pidfd and the verdict of its report pipe.
#include "sandbox/spawn.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "platform/fd.h"
#include "platform/pty.h"
#include "platform/signals.h"
#include "sandbox/child_report.h"
#include "sandbox/mounts.h"
#include "sandbox/stdio.h"

namespace sandstream::sandbox {
namespace {

constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// A child that failed to start: killed; its keeper reaps it and may then drop it.
void Discard(const SpawnContext& ctx, pid_t pid, int pidfd) {
  if (pidfd >= 0) (void)SignalPidfd(pidfd, SIGKILL);
  ctx.spawner->Forget(pid);
}

// Sends the request with `child_fds` (stdin if any, stdout, stderr) and `held`, the daemon's
// ends of the process's fds for its keeper to keep; `close_child_ends` runs once the keeper
// holds its copies.
Op<Result<SpawnedProcess>> Launch(const SpawnContext& ctx, SpawnRequest& request,
                                  std::vector<int> child_fds, std::vector<int> held,
                                  std::function<void()> close_child_ends) {
  auto report = MakePipe(false);
  if (!report) co_return std::move(report).error();
  auto exit = MakePipe(true);
  if (!exit) co_return std::move(exit).error();
  std::vector<int> fds = std::move(child_fds);
  fds.push_back(report->write.get());
  fds.push_back(exit->write.get());
  fds.push_back(exit->read.get());
  for (int fd : held) fds.push_back(fd);
  request.held = static_cast<uint32_t>(held.size() + 1);
  auto message = EncodeSpawnRequest(request);
  if (!message) co_return std::move(message).error();
  Result<Launched> launched = co_await ctx.spawner->Launch(*message, fds);
  report->write.reset();
  exit->write.reset();
  close_child_ends();
  if (!launched) co_return std::move(launched).error();
  const pid_t pid = launched->pid;

  Result<std::optional<ChildFailure>> failure = co_await ReadChildReport(report->read.get());
  if (!failure || failure->has_value()) {
    Discard(ctx, pid, launched->pidfd.get());
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
  p.pidfd = std::move(launched->pidfd);
  p.exit_fd = std::move(exit->read);
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
  std::vector<int> held{pty->master.get()};
  held.insert(held.end(), spec.keep_fds.begin(), spec.keep_fds.end());
  request.tag = kKeptTerminal | (spec.keep_fds.empty() ? 0u : kKeptLog);
  Result<SpawnedProcess> started = co_await Launch(ctx, request, std::move(fds), std::move(held),
                                                   [&pty] { pty->slave.reset(); });
  if (!started) co_return std::move(started).error();
  SpawnedProcess p = std::move(*started);
  p.stdout_fd = std::move(pty->master);
  co_return std::move(p);
}

}  // namespace

Op<Result<SpawnedProcess>> SpawnInSandbox(SpawnContext ctx, ProcessSpec spec) {
  if (spec.argv.empty()) co_return Error{ErrorCode::kInvalidRequest, "argv is empty"};
  // A file the keeper holds (an output log's memfd) belongs to the sandbox's root, as its own
  // files do: a checkpoint restores it with the owner it had, which must be one of the
  // sandbox's ids.
  for (int fd : spec.keep_fds) {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || (S_ISREG(st.st_mode) && st.st_uid != ctx.host_id_base &&
                                  ::fchown(fd, ctx.host_id_base, ctx.host_id_base) != 0)) {
      co_return SysError(ErrorCode::kInternal, "spawn: own kept file", errno);
    }
  }
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
  request.uid = spec.as_root ? 0 : ctx.user_uid;
  request.gid = spec.as_root ? 0 : ctx.user_gid;
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
  std::vector<int> held{stdio->parent_stdout()};
  request.tag = 0;
  if (stdio->parent_stderr() >= 0) {
    held.push_back(stdio->parent_stderr());
    request.tag |= kKeptStderr;
  }
  if (stdio->parent_stdin() >= 0) {
    held.push_back(stdio->parent_stdin());
    request.tag |= kKeptStdin;
  }
  if (!spec.keep_fds.empty()) {
    held.insert(held.end(), spec.keep_fds.begin(), spec.keep_fds.end());
    request.tag |= kKeptLog;
  }
  Result<SpawnedProcess> started = co_await Launch(ctx, request, std::move(fds), std::move(held),
                                                   [&stdio] { stdio->CloseChildEnds(); });
  if (!started) co_return std::move(started).error();
  SpawnedProcess p = std::move(*started);
  stdio->HandOver(p);
  co_return std::move(p);
}

Result<AdoptedProcess> FromKept(KeptEntry& entry) {
  const uint32_t tag = entry.tag;
  // The daemon's own fds (kKeptLog) come last, as many as it gave.
  const size_t fixed = 3 + ((tag & kKeptStderr) ? 1 : 0) + ((tag & kKeptStdin) ? 1 : 0);
  const size_t kept = entry.fds.size() - std::min(entry.fds.size(), fixed);
  if (entry.pid <= 0 || entry.fds.size() < fixed || (kept > 0) != ((tag & kKeptLog) != 0)) {
    return Error{ErrorCode::kInternal, "keeper: an entry of pid " + std::to_string(entry.pid) +
                                           " with " + std::to_string(entry.fds.size()) + " fds"};
  }
  AdoptedProcess a;
  a.status = entry.status;
  SpawnedProcess& p = a.process;
  p.pid = entry.pid;
  size_t i = 0;
  p.pidfd = std::move(entry.fds[i++]);
  p.exit_fd = std::move(entry.fds[i++]);
  p.stdout_fd = std::move(entry.fds[i++]);
  if (tag & kKeptStderr) p.stderr_fd = std::move(entry.fds[i++]);
  if (tag & kKeptStdin) p.stdin_fd = std::move(entry.fds[i++]);
  while (i < entry.fds.size()) a.kept.push_back(std::move(entry.fds[i++]));
  return a;
}

}  // namespace sandstream::sandbox
