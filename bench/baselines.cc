// The baselines of sandstream-bench: the same work without the daemon.
#include "baselines.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "client.h"
#include "sandbox/directory_runtime.h"
#include "sandbox/namespace_runtime.h"
#include "stats.h"

namespace sandstream::bench {

namespace {

std::string Errno(std::string_view what) { return std::string(what) + ": " + std::strerror(errno); }

// Forks `argv` with stdout on a new pipe; returns the child and the read end.
pid_t SpawnWithPipe(const char* const* argv, int* read_fd, int read_flags) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw BenchError(Errno("pipe2"));
  const pid_t pid = ::fork();
  if (pid < 0) throw BenchError(Errno("fork"));
  if (pid == 0) {
    ::signal(SIGPIPE, SIG_DFL);  // the bench ignores it; `yes | head` needs it
    ::dup2(p[1], STDOUT_FILENO);
    ::execv(argv[0], const_cast<char* const*>(argv));
    ::_exit(127);
  }
  ::close(p[1]);
  if (read_flags != 0) ::fcntl(p[0], F_SETFL, ::fcntl(p[0], F_GETFL) | read_flags);
  *read_fd = p[0];
  return pid;
}

int Wait(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

void WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw BenchError(Errno("send (bare chain)"));
    data += n;
    size -= static_cast<size_t>(n);
  }
}

// Reads stdout and stderr of a spawned sandbox process to EOF.
std::string Drain(int out_fd, int err_fd) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  int open = err_fd >= 0 ? 2 : 1;
  if (err_fd < 0) fds[1].fd = -1;
  std::string out;
  char buf[4096];
  while (open > 0) {
    if (::poll(fds, 2, 10000) <= 0) throw BenchError("sandbox process output: poll timed out");
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        if (i == 0) out.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EAGAIN) {
        fds[i].fd = -1;
        --open;
      }
    }
  }
  return out;
}

}  // namespace

std::string RunShell(const std::string& cmd, double* ms) {
  const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  const int64_t t0 = MonotonicNs();
  int fd = -1;
  const pid_t pid = SpawnWithPipe(argv, &fd, 0);
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  Wait(pid);
  *ms = static_cast<double>(MonotonicNs() - t0) / 1e6;
  return out;
}

std::vector<double> PipeStampLatencies(const std::string& script) {
  const char* argv[] = {"/usr/bin/env", "bash", "-c", script.c_str(), nullptr};
  int fd = -1;
  const pid_t pid = SpawnWithPipe(argv, &fd, 0);
  std::vector<double> latencies;
  std::string pending;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    const int64_t now = RealtimeNs();
    pending.append(buf, static_cast<size_t>(n));
    size_t start = 0, nl;
    while ((nl = pending.find('\n', start)) != std::string::npos) {
      int64_t stamp = 0;
      if (ParseStamp(std::string_view(pending).substr(start, nl - start), &stamp)) {
        latencies.push_back(static_cast<double>(now - stamp) / 1e3);
      }
      start = nl + 1;
    }
    pending.erase(0, start);
  }
  ::close(fd);
  Wait(pid);
  return latencies;
}

double BareChainThroughput(const std::string& cmd, uint64_t expected_bytes) {
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw BenchError(Errno("bare chain: listen"));
  }
  std::atomic<uint64_t> received{0};
  std::thread reader([port = ntohs(addr.sin_port), &received] {
    int fd = ConnectLoopback(port);
    std::unique_ptr<char[]> buf(new char[1 << 20]);
    uint64_t total = 0;
    for (;;) {
      ssize_t n = ::recv(fd, buf.get(), 1 << 20, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      total += static_cast<uint64_t>(n);
    }
    ::close(fd);
    received = total;
  });
  int conn = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  ::close(listener);
  if (conn < 0) {
    reader.join();
    throw BenchError(Errno("bare chain: accept"));
  }
  int one = 1;
  ::setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

  // The daemon's pipe reader uses 128 KiB reads; the same here.
  constexpr size_t kRead = 128 * 1024;
  std::unique_ptr<char[]> buf(new char[kRead]);
  std::string frame;
  frame.reserve(kRead + 16);
  const int64_t t0 = MonotonicNs();
  const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  int fd = -1;
  const pid_t pid = SpawnWithPipe(argv, &fd, O_NONBLOCK);
  int ep = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
  uint64_t forwarded = 0;
  bool eof = false;
  while (!eof) {
    epoll_event got;
    if (::epoll_wait(ep, &got, 1, -1) < 0 && errno != EINTR) throw BenchError(Errno("epoll_wait"));
    for (;;) {
      ssize_t n = ::read(fd, buf.get(), kRead);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) break;
      if (n <= 0) {
        eof = true;
        break;
      }
      frame.assign("data: ");
      frame.append(buf.get(), static_cast<size_t>(n));
      frame.append("\n\n");
      WriteAll(conn, frame.data(), frame.size());
      forwarded += static_cast<uint64_t>(n);
    }
  }
  ::close(ep);
  ::close(fd);
  ::close(conn);
  reader.join();
  const int64_t t1 = MonotonicNs();
  Wait(pid);
  if (forwarded != expected_bytes || received < expected_bytes) {
    throw BenchError("bare chain carried " + std::to_string(forwarded) + " bytes, expected " +
                     std::to_string(expected_bytes));
  }
  return static_cast<double>(expected_bytes) / (static_cast<double>(t1 - t0) / 1e9);
}

pid_t FindProcessWithArg(const std::string& word) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    const std::string cmdline((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    size_t start = 0;
    while (start < cmdline.size()) {
      size_t end = cmdline.find('\0', start);
      if (end == std::string::npos) end = cmdline.size();
      if (cmdline.compare(start, end - start, word) == 0) return std::stoi(name);
      start = end + 1;
    }
  }
  throw BenchError("no process has the argument " + word);
}

std::vector<int> SocketsInNetns(pid_t pid, size_t n) {
  const std::string path = "/proc/" + std::to_string(pid) + "/ns/net";
  const int ns = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (ns < 0) throw BenchError(Errno("open " + path));
  struct stat theirs = {};
  struct stat ours = {};
  // A runtime without a network namespace of its own (directory): no setns, no privilege.
  const bool same = ::fstat(ns, &theirs) == 0 && ::stat("/proc/thread-self/ns/net", &ours) == 0 &&
                    theirs.st_dev == ours.st_dev && theirs.st_ino == ours.st_ino;
  std::vector<int> fds;
  std::string error;
  std::thread maker([&] {
    // This thread alone enters the namespace, and ends there.
    if (!same && ::setns(ns, CLONE_NEWNET) != 0) {
      error = Errno("setns " + path);
      return;
    }
    for (size_t i = 0; i < n; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        error = Errno("socket");
        return;
      }
      fds.push_back(fd);
    }
  });
  maker.join();
  ::close(ns);
  if (!error.empty()) {
    for (int fd : fds) ::close(fd);
    throw BenchError(error);
  }
  return fds;
}

double BareRelayGet(int upstream_fd, uint16_t port, std::string_view request, uint64_t expected) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) {
    ::close(upstream_fd);
    throw BenchError(Errno("socket"));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string error = Errno("bare relay: listen");
    ::close(listener);
    ::close(upstream_fd);
    throw BenchError(error);
  }
  std::string error;
  std::thread relay([&] {
    const int client = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      error = Errno("bare relay: accept");
      ::close(upstream_fd);
      return;
    }
    try {
      ConnectSocket(upstream_fd, port);
      std::string head;
      char buf[64 * 1024];
      while (head.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::recv(client, buf, sizeof buf, 0);
        if (n <= 0) throw BenchError("bare relay: the client sent no whole request");
        head.append(buf, static_cast<size_t>(n));
      }
      WriteAll(upstream_fd, head.data(), head.size());
      for (;;) {
        const ssize_t n = ::recv(upstream_fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw BenchError(Errno("bare relay: recv"));
        if (n == 0) break;
        WriteAll(client, buf, static_cast<size_t>(n));
      }
    } catch (const BenchError& e) {
      error = e.what();
    }
    ::close(upstream_fd);
    ::close(client);
  });
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  uint64_t got = 0;
  int64_t t0 = 0;
  try {
    if (fd < 0) throw BenchError(Errno("socket"));
    t0 = MonotonicNs();
    ConnectSocket(fd, ntohs(addr.sin_port));
    got = ExchangeToEof(fd, request, 200);
  } catch (const BenchError& e) {
    if (error.empty()) error = e.what();
    ::shutdown(listener, SHUT_RDWR);  // wakes an accept() still waiting for this client
  }
  const int64_t t1 = MonotonicNs();
  relay.join();
  if (fd >= 0) ::close(fd);
  ::close(listener);
  if (!error.empty()) throw BenchError(error);
  if (got != expected) {
    throw BenchError("bare relay: " + std::to_string(got) + " bytes of " +
                     std::to_string(expected));
  }
  return static_cast<double>(t1 - t0) / 1e9;
}

RawRuntime::RawRuntime(const std::string& kind, const std::string& state_dir,
                       uint32_t max_sandboxes) {
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (kind == "directory") {
    runtime_ = std::make_unique<sandbox::DirectoryRuntime>(state_dir);
    return;
  }
  sandbox::NamespaceRuntimeOptions options;
  options.state_dir = state_dir;
  options.cgroup_parent = "sandstream-bench-runtime-" + std::to_string(::getpid());
  // Far from the daemon's ranges (which start at 1000000), so the two never share host ids.
  options.host_id_base = 2'000'000'000;
  options.max_sandboxes = max_sandboxes;
  auto runtime = std::make_unique<sandbox::NamespaceRuntime>(options);
  if (!runtime->ready()) throw BenchError("namespace runtime: " + runtime->ready().error().message);
  cgroup_parents_ = runtime->CgroupParents();
  runtime_ = std::move(runtime);
}

RawRuntime::~RawRuntime() {
  DestroyIdle();
  for (const auto& parent : cgroup_parents_) ::rmdir(parent.c_str());
}

std::unique_ptr<sandbox::Sandbox> RawRuntime::Create() {
  sandbox::SandboxSpec spec;
  char id[32];
  std::snprintf(id, sizeof id, "sb_%08x%08llx", static_cast<unsigned>(::getpid()),
                static_cast<unsigned long long>(next_++));
  spec.id = id;
  spec.template_name = "base";
  auto created = sandbox::RunBlocking(runtime_->Create(spec));
  if (!created) throw BenchError("runtime create: " + created.error().message);
  return std::move(*created);
}

void RawRuntime::CreateEchoDestroy(double* run_ms, double* destroy_ms) {
  const int64_t t0 = MonotonicNs();
  auto sb = Create();
  sandbox::ProcessSpec process;
  process.argv = {"sh", "-c", "echo hi"};
  process.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                 "LANG=C.UTF-8", "HOME=/workspace", "TERM=xterm-256color"};
  process.cwd = "/workspace";
  process.open_stdin = false;
  auto spawned = sandbox::RunBlocking(sb->Spawn(process));
  if (!spawned) throw BenchError("runtime spawn: " + spawned.error().message);
  const std::string out = Drain(spawned->stdout_fd.get(), spawned->stderr_fd.get());
  Wait(spawned->pid);
  const int64_t t1 = MonotonicNs();
  if (auto destroyed = sandbox::RunBlocking(sb->Destroy()); !destroyed) {
    throw BenchError("runtime destroy: " + destroyed.error().message);
  }
  const int64_t t2 = MonotonicNs();
  if (out != "hi\n") throw BenchError("runtime echo printed '" + out + "'");
  *run_ms = static_cast<double>(t1 - t0) / 1e6;
  *destroy_ms = static_cast<double>(t2 - t1) / 1e6;
}

void RawRuntime::CreateIdle(int n) {
  for (int i = 0; i < n; ++i) idle_.push_back(Create());
}

void RawRuntime::DestroyIdle() {
  for (auto& sb : idle_) (void)sandbox::RunBlocking(sb->Destroy());
  idle_.clear();
}

double CopyAndSync(size_t bytes, const std::string& dir) {
  const int from = ::memfd_create("bench-copy", MFD_CLOEXEC);
  if (from < 0) throw BenchError(Errno("memfd_create"));
  std::string chunk(1 << 20, '\0');
  std::ifstream random("/dev/urandom", std::ios::binary);
  for (size_t done = 0; done < bytes; done += chunk.size()) {
    random.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    if (::write(from, chunk.data(), chunk.size()) != static_cast<ssize_t>(chunk.size())) {
      ::close(from);
      throw BenchError(Errno("write memfd"));
    }
  }
  const std::string path = dir + "/bench-copy";
  const int to = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (to < 0) {
    ::close(from);
    throw BenchError(Errno("open " + path));
  }
  const int64_t t0 = MonotonicNs();
  bool ok = true;
  for (off_t at = 0; ok && at < static_cast<off_t>(bytes);) {
    const ssize_t n = ::pread(from, chunk.data(), chunk.size(), at);
    ok = n > 0 && ::write(to, chunk.data(), static_cast<size_t>(n)) == n;
    at += n;
  }
  ok = ok && ::fsync(to) == 0;
  const int64_t t1 = MonotonicNs();
  ::close(to);
  ::close(from);
  ::unlink(path.c_str());
  if (!ok) throw BenchError(Errno("copy to " + path));
  return static_cast<double>(t1 - t0) / 1e6;
}

}  // namespace sandstream::bench
