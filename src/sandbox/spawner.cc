// Reaching, feeding and stopping a sandbox's keeper (its PID 1), and encoding its requests.
#include "sandbox/spawner.h"

#include <fcntl.h>
#include <linux/filter.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/log.h"
#include "platform/scm_rights.h"
#include "sandbox/fault.h"
#include "sandbox/spawn_request.h"

namespace sandstream::sandbox {
namespace {

// Like kChildReportDeadlineMs: a spawner slow to answer is starved by its sandbox.
constexpr int kReplyTimeoutMs = 5000;

// The address of the unix socket at `path`. sun_path holds 107 bytes, less than a data
// directory may take: a longer path is reached through its directory's fd, kept in `dir`
// until bind or connect is done.
Result<sockaddr_un> SocketAddress(const std::string& path, UniqueFd& dir) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string reachable = path;
  if (path.size() >= sizeof addr.sun_path) {
    const size_t slash = path.rfind('/');
    if (slash == std::string::npos) {
      return Error{ErrorCode::kSandboxSetupFailed, "keeper: socket path has no directory"};
    }
    dir.reset(::open(path.substr(0, slash).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!dir) return SysError(ErrorCode::kSandboxSetupFailed, "keeper: open " + path, errno);
    reachable = "/proc/self/fd/" + std::to_string(dir.get()) + path.substr(slash);
    if (reachable.size() >= sizeof addr.sun_path) {
      return Error{ErrorCode::kSandboxSetupFailed, "keeper: socket name too long: " + path};
    }
  }
  std::memcpy(addr.sun_path, reachable.c_str(), reachable.size() + 1);
  return addr;
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
  h.gid = request.gid;
  h.argc = static_cast<uint32_t>(argc);
  h.envc = static_cast<uint32_t>(envc);
  h.filter_len = request.seccomp->len;
  h.held = request.held;
  h.tag = request.tag;
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

Op<std::optional<Spawner::Message>> Spawner::Receive() {
  const Deadline deadline = In(std::chrono::milliseconds(kReplyTimeoutMs));
  for (;;) {
    if (!control_) co_return std::nullopt;
    char buf[64];
    ReceivedFds<kMaxHeldFds + 1> fds;
    const ssize_t n = ReceiveWithFds(control_.get(), buf, sizeof buf, fds, MSG_DONTWAIT);
    if (n > 0) {
      Message m;
      m.bytes.assign(buf, static_cast<size_t>(n));
      for (size_t i = 0; i < fds.count; ++i) m.fds.emplace_back(fds.fds[i]);
      co_return m;
    }
    if (n == 0 || errno != EAGAIN) co_return std::nullopt;
    const bool ready = co_await Readable{control_.get(), deadline};
    if (!ready && std::chrono::steady_clock::now() >= deadline) co_return std::nullopt;
  }
}

Op<Result<void>> Spawner::AwaitHello(std::string_view context, bool accept_other_version) {
  std::optional<Message> hello = co_await Receive();
  KeeperMessage m{};
  if (hello && hello->bytes.size() == sizeof m) std::memcpy(&m, hello->bytes.data(), sizeof m);
  if (m.type != kHello) {
    SpawnReply failed{};
    if (hello && hello->bytes.size() == sizeof failed) {
      std::memcpy(&failed, hello->bytes.data(), sizeof failed);
      co_return SysError(ErrorCode::kSandboxSetupFailed, std::string(context) + ": keeper",
                         failed.err);
    }
    co_return Error{ErrorCode::kSandboxSetupFailed, std::string(context) + ": no hello"};
  }
  pid_ = m.pid;
  version_ = m.tag;
  if (m.tag != kKeeperVersion && !accept_other_version) {
    co_return Error{ErrorCode::kSandboxSetupFailed,
                    std::string(context) + ": keeper speaks version " + std::to_string(m.tag) +
                        ", this daemon " + std::to_string(kKeeperVersion)};
  }
  co_return Ok{};
}

Op<Result<void>> Spawner::Upgrade(int exe_fd) {
  const KeeperMessage m{kUpgrade, 0, 0, 0};
  if (const int err = Send(m, std::span<const int>(&exe_fd, 1)); err != 0) {
    co_return SysError(ErrorCode::kSandboxSetupFailed, "keeper: upgrade: send", err);
  }
  // The new executable says hello on the same connection; a failed exec answers a SpawnReply.
  co_return co_await AwaitHello("keeper: upgrade");
}

Op<Result<Launched>> Spawner::Launch(std::string_view request, std::span<const int> fds) {
  if (!control_) co_return Error{ErrorCode::kSandboxSetupFailed, "spawn: keeper: not running"};
  if (const int err = Send(request, fds); err != 0) {
    co_return SysError(ErrorCode::kSandboxSetupFailed, "spawn: send to keeper", err);
  }
  co_return co_await AwaitLaunched();
}

Op<Result<Launched>> Spawner::Copy(int source, int destination, int exit_pipe) {
  if (!control_) co_return Error{ErrorCode::kSandboxSetupFailed, "spawn: keeper: not running"};
  const int fds[] = {source, destination, exit_pipe};
  if (const int err = Send(KeeperMessage{kCopy, 0, 0, 0}, fds); err != 0) {
    co_return SysError(ErrorCode::kSandboxSetupFailed, "spawn: send to keeper", err);
  }
  co_return co_await AwaitLaunched();
}

Op<Result<Launched>> Spawner::AwaitLaunched() {
  std::optional<Message> reply = co_await Receive();
  SpawnReply r{};
  if (!reply || reply->bytes.size() != sizeof r) {
    co_return Error{ErrorCode::kSandboxSetupFailed, "spawn: keeper: no reply"};
  }
  std::memcpy(&r, reply->bytes.data(), sizeof r);
  if (r.pid > 0 && reply->fds.size() == 1) {
    co_return Launched{static_cast<pid_t>(r.pid), std::move(reply->fds[0])};
  }
  if (r.err == EBADMSG) co_return Error{ErrorCode::kInternal, "spawn: keeper: request refused"};
  if (r.err == ENOSPC) {
    co_return Error{ErrorCode::kQuotaExceeded, "spawn: keeper: too many processes kept"};
  }
  // EAGAIN: the sandbox is at its pids limit, a quota like any other.
  co_return SysError(r.err == EAGAIN ? ErrorCode::kQuotaExceeded : ErrorCode::kSandboxSetupFailed,
                     "spawn: clone", r.err);
}

Op<Result<std::vector<KeptEntry>>> Spawner::List() {
  const KeeperMessage ask{kList, 0, 0, 0};
  if (const int err = Send(ask); err != 0) {
    co_return SysError(ErrorCode::kSandboxSetupFailed, "keeper: list", err);
  }
  std::vector<KeptEntry> entries;
  for (;;) {
    std::optional<Message> m = co_await Receive();
    KeeperMessage k{};
    if (!m || m->bytes.size() != sizeof k) {
      co_return Error{ErrorCode::kSandboxSetupFailed, "keeper: list: no answer"};
    }
    std::memcpy(&k, m->bytes.data(), sizeof k);
    if (k.type == kEnd) break;
    if (k.type != kEntry) continue;
    KeptEntry e;
    e.pid = k.pid;
    e.tag = k.tag;
    if (k.status >= 0) e.status = k.status;
    e.fds = std::move(m->fds);
    entries.push_back(std::move(e));
  }
  co_return entries;
}

bool Spawner::connected() const {
  if (!control_) return false;
  pollfd p{control_.get(), POLLRDHUP, 0};
  if (::poll(&p, 1, 0) < 0) return true;  // EINTR/ENOMEM: say so when a send fails
  return (p.revents & (POLLHUP | POLLRDHUP | POLLERR)) == 0;
}

void Spawner::Release(pid_t pid, uint32_t bit) {
  (void)Send(KeeperMessage{kRelease, pid, bit, 0});
}

void Spawner::Replace(pid_t pid, uint32_t bit, int fd) {
  (void)Send(KeeperMessage{kReplace, pid, bit, 0}, std::span<const int>(&fd, 1));
}

void Spawner::Forget(pid_t pid) {
  (void)Send(KeeperMessage{kForget, pid, 0, 0});
}

Result<UniqueFd> ConnectToPath(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) return SysError(ErrorCode::kSandboxSetupFailed, "keeper: socket", errno);
  UniqueFd dir;
  Result<sockaddr_un> addr = SocketAddress(path, dir);
  if (!addr) return std::move(addr).error();
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&*addr), sizeof *addr) != 0) {
    return SysError(ErrorCode::kSandboxSetupFailed, "keeper: connect " + path, errno);
  }
  return fd;
}

Op<Result<void>> Spawner::Connect(UniqueFd connected, int keeper_exe) {
  control_ = std::move(connected);
  Result<void> hello = co_await AwaitHello("keeper", true);
  // A keeper an earlier build started: it execs this build's keeper in place, handing over all
  // it holds (its processes stay its children).
  if (hello && version_ != kKeeperVersion) {
    log::Info("upgrading a sandbox keeper", {{"from_version", std::to_string(version_)},
                                             {"to_version", std::to_string(kKeeperVersion)}});
    hello = co_await Upgrade(keeper_exe);
  }
  if (!hello) control_.reset();
  co_return hello;
}

int Spawner::Send(const KeeperMessage& m, std::span<const int> fds) {
  return Send(std::string_view(reinterpret_cast<const char*>(&m), sizeof m), fds);
}

int Spawner::Send(std::string_view request, std::span<const int> fds) {
  if (fds.size() > kMaxSpawnFds) return EINVAL;
  const ssize_t n = SendWithFds<kMaxSpawnFds>(control_.get(), request.data(), request.size(),
                                              fds.data(), fds.size());
  if (n < 0) return errno;
  return n == static_cast<ssize_t>(request.size()) ? 0 : EMSGSIZE;
}

Result<ControlPair> MakeControlPair() {
  int sv[2];
  if (InjectedFault() || ::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return SysError(ErrorCode::kSandboxSetupFailed, "init: socketpair", errno);
  }
  ControlPair pair{UniqueFd(sv[0]), UniqueFd(sv[1])};
  // A request travels as one message, which must fit the send buffer; beyond wmem_max only
  // the FORCE variant (CAP_NET_ADMIN) can grow it. Without it, big requests fail EMSGSIZE.
  const int bytes = static_cast<int>(kMaxSpawnRequestBytes + 65536);
  if (::setsockopt(pair.daemon.get(), SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof bytes) != 0) {
    ::setsockopt(pair.daemon.get(), SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  }
  return pair;
}

Op<Result<void>> Spawner::Attach(UniqueFd control, std::vector<int> held) {
  control_ = std::move(control);
  Result<void> hello = co_await AwaitHello("init");
  if (!hello) {
    control_.reset();
    co_return hello;
  }
  if (const int err = Send(KeeperMessage{kHold, 0, 0, 0}, held); err != 0) {
    co_return SysError(ErrorCode::kSandboxSetupFailed, "keeper: send", err);
  }
  co_return Ok{};
}

Op<Result<void>> Spawner::KillAll() {
  if (!control_) co_return Error{ErrorCode::kInternal, "init: kill all: not connected"};
  // An answer a request before this one gave up on (its fds closed with it) is not this one's.
  for (;;) {
    char stale[64];
    ReceivedFds<kMaxHeldFds + 1> fds;
    if (ReceiveWithFds(control_.get(), stale, sizeof stale, fds, MSG_DONTWAIT) <= 0) break;
    for (size_t i = 0; i < fds.count; ++i) ::close(fds.fds[i]);
  }
  if (const int err = Send(KeeperMessage{kKillAll, 0, 0, 0}); err != 0) {
    co_return SysError(ErrorCode::kInternal, "init: kill all: send", err);
  }
  std::optional<Message> reply = co_await Receive();
  KeeperMessage m{};
  if (reply && reply->bytes.size() == sizeof m) std::memcpy(&m, reply->bytes.data(), sizeof m);
  if (m.type != kKilled) co_return Error{ErrorCode::kInternal, "init: kill all: no answer"};
  if (m.status != 0) co_return SysError(ErrorCode::kInternal, "init: kill all", m.status);
  co_return Ok{};
}

void Spawner::Stop() {
  if (control_) (void)Send(KeeperMessage{kStop, 0, 0, 0});
  Leave();
}

void Spawner::Leave() {
  control_.reset();
  pid_ = -1;
}

}  // namespace sandstream::sandbox
