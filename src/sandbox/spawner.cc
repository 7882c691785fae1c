// Starting, feeding and stopping a sandbox's spawner, and encoding its requests.
#include "sandbox/spawner.h"

#include <linux/filter.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "platform/fd.h"
#include "sandbox/child_report.h"
#include "sandbox/embedded.h"
#include "sandbox/spawn_request.h"
#include "sandbox/userns.h"

namespace sandstream::sandbox {
namespace {

constexpr int kAllNamespaces = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET |
                               CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWCGROUP;
// Like kChildReportDeadlineMs: a spawner slow to answer is starved by its sandbox.
constexpr int kReplyTimeoutMs = 5000;

// In the forked child, which becomes the spawner: the sandbox's cgroups, then its namespaces
// (setns(CLONE_NEWPID) only moves the children, so the spawner stays in the host's pid
// namespace, out of the sandbox's sight), then its root: host uid 0 is not mapped in the
// sandbox's user namespace, and execve would drop every capability of an unmapped euid.
[[noreturn]] void RunSpawnerSetup(const SpawnerSite& site, char* const argv[], int control_fd,
                                  int report_fd) {
  for (int fd : site.cgroup_procs) {
    if (::write(fd, "0", 1) != 1) ReportAndExit(report_fd, "cgroup attach", errno);
  }
  if (::setns(site.init_pidfd, kAllNamespaces) != 0) ReportAndExit(report_fd, "setns", errno);
  BecomeNamespaceRootInChild(report_fd);
  ExecEmbeddedInChild(site.exe_fd, argv, control_fd, report_fd);
}

void Append(std::string& out, const void* data, size_t size) {
  out.append(static_cast<const char*>(data), size);
}

}  // namespace

Result<std::string> EncodeSpawnRequest(const SpawnRequest& request) {
  if (request.argv.empty() || request.seccomp == nullptr || request.seccomp->len == 0) {
    return Error{ErrorCode::kInternal, "spawn: incomplete request"};
  }
  // execve sees each string up to its first NUL; so does the spawner.
  auto text = [](const std::string& s) { return std::string_view(s.c_str()); };
  const uint64_t argc = request.argv.size();
  const uint64_t envc = request.env.size();
  uint64_t size = sizeof(SpawnRequestHeader) +
                  uint64_t{request.seccomp->len} * sizeof(sock_filter) +
                  (argc + envc + 2) * sizeof(char*) + text(request.cwd).size() + 1;
  if (request.search_path) size += text(*request.search_path).size() + 1;
  for (const auto& a : request.argv) size += text(a).size() + 1;
  for (const auto& e : request.env) size += text(e).size() + 1;
  if (size > kMaxSpawnRequestBytes) {
    return Error{ErrorCode::kInvalidRequest, "spawn: command, environment and cwd take " +
                                                 std::to_string(size) + " bytes; at most " +
                                                 std::to_string(kMaxSpawnRequestBytes) + " fit"};
  }

  SpawnRequestHeader h{};
  h.magic = kSpawnRequestMagic;
  h.flags = (request.tty ? kSpawnTty : 0u) | (request.has_stdin ? kSpawnStdin : 0u) |
            (request.search_path ? kSpawnSearchPath : 0u);
  h.open_files = request.open_files;
  h.uid = request.uid;
  h.argc = static_cast<uint32_t>(argc);
  h.envc = static_cast<uint32_t>(envc);
  h.filter_len = request.seccomp->len;
  std::string out;
  out.reserve(size);
  Append(out, &h, sizeof h);
  Append(out, request.seccomp->filter, size_t{h.filter_len} * sizeof(sock_filter));
  out.append((argc + envc + 2) * sizeof(char*), '\0');
  auto add = [&](const std::string& s) {
    out.append(text(s));
    out.push_back('\0');
  };
  add(request.cwd);
  if (request.search_path) add(*request.search_path);
  for (const auto& a : request.argv) add(a);
  for (const auto& e : request.env) add(e);
  return out;
}

Op<std::optional<SpawnReply>> Spawner::Receive(int fd) {
  const Deadline deadline = In(std::chrono::milliseconds(kReplyTimeoutMs));
  for (;;) {
    SpawnReply reply{};
    const ssize_t n = ::recv(fd, &reply, sizeof reply, MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(sizeof reply)) co_return reply;
    if (n < 0 && errno == EINTR) continue;
    if (n >= 0 || errno != EAGAIN) co_return std::nullopt;
    const bool ready = co_await Readable{fd, deadline};
    if (!ready && std::chrono::steady_clock::now() >= deadline) co_return std::nullopt;
  }
}

Op<Result<pid_t>> Spawner::Launch(SpawnerSite site, std::string_view request,
                                  std::span<const int> fds) {
  for (int attempt = 0;; ++attempt) {
    if (!control_) {
      Result<void> started = co_await Start(site);
      if (!started) co_return std::move(started).error();
    }
    const int err = Send(request, fds);
    if (err == 0) break;
    // Killed, crashed or OOM-killed since the last request: a new one gets the request. Any
    // other failure (a message the kernel could not buffer) leaves a healthy spawner alone.
    const bool gone = err == EPIPE || err == ECONNRESET || err == ENOTCONN;
    if (gone) (void)co_await Stop();
    if (!gone || attempt > 0) {
      co_return SysError(ErrorCode::kSandboxSetupFailed, "spawn: send to spawner", err);
    }
  }
  const std::optional<SpawnReply> reply = co_await Receive(control_.get());
  if (!reply) {
    (void)co_await Stop();
    co_return Error{ErrorCode::kSandboxSetupFailed, "spawn: spawner: no reply"};
  }
  if (reply->pid > 0) co_return static_cast<pid_t>(reply->pid);
  if (reply->err == EBADMSG) {
    co_return Error{ErrorCode::kInternal, "spawn: spawner: request refused"};
  }
  co_return SysError(ErrorCode::kSandboxSetupFailed, "spawn: clone", reply->err);
}

int Spawner::Send(std::string_view request, std::span<const int> fds) {
  if (fds.size() > kMaxSpawnFds) return EINVAL;
  iovec iov{const_cast<char*>(request.data()), request.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxSpawnFds)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  ssize_t n;
  do {
    n = ::sendmsg(control_.get(), &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return errno;
  return n == static_cast<ssize_t>(request.size()) ? 0 : EMSGSIZE;
}

Op<Result<void>> Spawner::Start(SpawnerSite site) {
  (void)co_await Stop();
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    co_return SysError(ErrorCode::kSandboxSetupFailed, "spawn: start spawner: socketpair", errno);
  }
  UniqueFd ours(sv[0]), theirs(sv[1]);
  // A request travels as one message, which must fit the send buffer; beyond wmem_max only
  // the FORCE variant (CAP_NET_ADMIN) can grow it. Without it, big requests fail EMSGSIZE.
  const int bytes = static_cast<int>(kMaxSpawnRequestBytes + 65536);
  if (::setsockopt(ours.get(), SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof bytes) != 0) {
    ::setsockopt(ours.get(), SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  }
  auto report = MakePipe(false);
  if (!report) co_return std::move(report).error();
  std::string daemon = std::to_string(::getpid());
  char name[] = "sandstream-spawner";
  char* const argv[] = {name, daemon.data(), nullptr};

  int pidfd = -1;
  clone_args args{};
  // CLONE_CLEAR_SIGHAND: the daemon's handlers (Asio's signal pipe) must not run in the child.
  args.flags = CLONE_PIDFD | CLONE_CLEAR_SIGHAND;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  const pid_t pid = static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
  if (pid < 0) {
    co_return SysError(ErrorCode::kSandboxSetupFailed, "spawn: start spawner: clone3", errno);
  }
  if (pid == 0) RunSpawnerSetup(site, argv, theirs.get(), report->write.get());
  pidfd_.reset(pidfd);
  pid_ = pid;
  theirs.reset();
  report->write.reset();

  Result<void> exec = co_await AwaitExec(report->read.get(), ErrorCode::kSandboxSetupFailed,
                                         "spawn: start spawner");
  if (!exec) {
    (void)co_await Stop();
    co_return std::move(exec).error();
  }
  const std::optional<SpawnReply> ready = co_await Receive(ours.get());
  if (!ready || ready->pid != 0 || ready->err != 0) {
    Error e =
        ready && ready->err != 0
            ? SysError(ErrorCode::kSandboxSetupFailed, "spawn: start spawner: spawner", ready->err)
            : Error{ErrorCode::kSandboxSetupFailed, "spawn: start spawner: no ready message"};
    (void)co_await Stop();
    co_return e;
  }
  control_ = std::move(ours);
  co_return Ok{};
}

Op<Result<void>> Spawner::Stop() {
  control_.reset();
  pid_ = -1;
  if (!pidfd_) co_return Ok{};
  UniqueFd pidfd = std::move(pidfd_);
  ::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
  // A SIGKILLed process is gone within moments unless it is stuck in the kernel.
  (void)co_await Readable{pidfd.get(), In(std::chrono::milliseconds(kReplyTimeoutMs))};
  siginfo_t info{};
  if (::waitid(P_PIDFD, static_cast<id_t>(pidfd.get()), &info, WEXITED | WNOHANG) == 0 &&
      info.si_pid != 0) {
    co_return Ok{};
  }
  if (unreaped_) unreaped_(std::move(pidfd));
  co_return Error{ErrorCode::kInternal, "spawn: spawner did not exit after SIGKILL"};
}

void Spawner::Kill() {
  control_.reset();
  pid_ = -1;
  if (!pidfd_) return;
  ::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
  siginfo_t info{};
  const bool reaped =
      ::waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &info, WEXITED | WNOHANG) == 0 &&
      info.si_pid != 0;
  if (!reaped && unreaped_) unreaped_(std::move(pidfd_));
  pidfd_.reset();
}

}  // namespace sandstream::sandbox
