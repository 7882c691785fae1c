// The egress figure's private network namespace, its stub upstream DNS server, and host
// processes that resolve through that stub.
#include "netns.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include "client.h"

namespace sandstream::bench {

namespace {

std::string Errno(const std::string& step) {
  return step + ": " + std::strerror(errno);
}

ino_t ThreadNetnsInode() {
  struct stat st{};
  if (::stat("/proc/thread-self/ns/net", &st) != 0) throw BenchError(Errno("netns: stat"));
  return st.st_ino;
}

void BringLoopbackUp() {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw BenchError(Errno("netns: socket"));
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  bool ok = ::ioctl(fd, SIOCGIFFLAGS, &ifr) == 0;
  if (ok) {
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
    ok = ::ioctl(fd, SIOCSIFFLAGS, &ifr) == 0;
  }
  const int err = errno;
  ::close(fd);
  if (!ok) throw BenchError("netns: lo up: " + std::string(std::strerror(err)));
}

}  // namespace

void RunInPrivateNetns(const std::function<void()>& body) {
  std::exception_ptr error;
  std::thread([&] {
    try {
      const ino_t before = ThreadNetnsInode();
      if (::unshare(CLONE_NEWNET) != 0) throw BenchError(Errno("netns: unshare(CLONE_NEWNET)"));
      // What the body does must never reach the host's namespace: make sure we left it.
      if (ThreadNetnsInode() == before) throw BenchError("netns: still in the host's namespace");
      BringLoopbackUp();
      body();
    } catch (...) {
      error = std::current_exception();
    }
  }).join();
  if (error) std::rethrow_exception(error);
}

StubDns::StubDns(const std::string& address, uint32_t answer) : answer_(answer) {
  fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw BenchError(Errno("stub dns: socket"));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(53);
  if (::inet_pton(AF_INET, address.c_str(), &sa.sin_addr) != 1 ||
      ::bind(fd_, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
    const std::string message = Errno("stub dns: bind " + address + ":53");
    ::close(fd_);
    throw BenchError(message);
  }
  thread_ = std::thread([this] { Serve(); });
}

StubDns::~StubDns() {
  stop_ = true;
  thread_.join();
  ::close(fd_);
}

void StubDns::Serve() {
  uint8_t q[512];
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    sockaddr_in from{};
    socklen_t from_len = sizeof from;
    const ssize_t n =
        ::recvfrom(fd_, q, sizeof q, 0, reinterpret_cast<sockaddr*>(&from), &from_len);
    // A query: QR clear, one question, its name in plain labels (queries are not compressed).
    if (n < 12 || (q[2] & 0x80) != 0 || q[4] != 0 || q[5] != 1) continue;
    size_t at = 12;
    while (at < static_cast<size_t>(n) && q[at] != 0 && q[at] < 64) at += q[at] + 1u;
    if (at + 5 > static_cast<size_t>(n) || q[at] != 0) continue;
    const size_t question_end = at + 5;
    const bool a_in = q[at + 1] == 0 && q[at + 2] == 1 && q[at + 3] == 0 && q[at + 4] == 1;
    uint8_t r[512 + 16];
    std::memcpy(r, q, question_end);
    r[2] = static_cast<uint8_t>(0x80 | (q[2] & 0x01));  // QR, opcode 0, RD as asked
    r[3] = 0x80;                                        // RA, NOERROR
    const uint8_t header_tail[] = {0, 1, 0, static_cast<uint8_t>(a_in ? 1 : 0), 0, 0, 0, 0};
    std::memcpy(r + 4, header_tail, sizeof header_tail);  // the OPT record, if any, is dropped
    size_t len = question_end;
    if (a_in) {
      // The name by a pointer to the question's, type A, class IN, TTL 300, 4 bytes of data.
      const uint8_t record[] = {0xc0, 12, 0, 1, 0, 1, 0, 0, 0x01, 0x2c, 0, 4};
      std::memcpy(r + len, record, sizeof record);
      len += sizeof record;
      for (const int shift : {24, 16, 8, 0}) r[len++] = static_cast<uint8_t>(answer_ >> shift);
    }
    if (::sendto(fd_, r, len, 0, reinterpret_cast<const sockaddr*>(&from), from_len) ==
        static_cast<ssize_t>(len)) {
      ++answered_;
    }
  }
}

std::string RunWithResolvConf(const std::string& resolv_conf,
                              const std::vector<std::string>& argv) {
  char path[] = "/tmp/sandstream-bench-resolv.XXXXXX";
  const int file = ::mkstemp(path);
  if (file < 0) throw BenchError(Errno("mkstemp"));
  const bool written = ::write(file, resolv_conf.data(), resolv_conf.size()) ==
                       static_cast<ssize_t>(resolv_conf.size());
  ::fchmod(file, 0644);
  ::close(file);
  if (!written) {
    ::unlink(path);
    throw BenchError("write " + std::string(path));
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::unlink(path);
    throw BenchError(Errno("pipe2"));
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The bind mount stays in this process's own mount namespace: "/" is made private first,
    // so that it cannot propagate to the host's.
    ::dup2(out[1], STDOUT_FILENO);
    if (::unshare(CLONE_NEWNS) != 0) ::_exit(121);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(122);
    if (::mount(path, "/etc/resolv.conf", nullptr, MS_BIND, nullptr) != 0) ::_exit(123);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(out[1]);
  std::string output;
  char buf[4096];
  for (ssize_t n; pid > 0 && (n = ::read(out[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    output.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  int status = 0;
  const bool reaped = pid > 0 && ::waitpid(pid, &status, 0) == pid;
  ::unlink(path);
  if (pid < 0) throw BenchError(Errno("fork"));
  if (!reaped || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    // Exit codes 121-123 are the child's steps: unshare, "/" private, the bind mount.
    throw BenchError(argv[0] + " with its own resolv.conf " +
                     (WIFEXITED(status) ? "exited " + std::to_string(WEXITSTATUS(status))
                                        : "ended by signal " + std::to_string(WTERMSIG(status))));
  }
  return output;
}

}  // namespace sandstream::bench
