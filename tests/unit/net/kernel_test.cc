// The egress kernel side against the real kernel: veth pairs, nf_tables tables, pins and
// conntrack. Needs root. Every case runs in a forked child that unshares its own network
// namespace ("the host"), with further namespaces for a sandbox and an upstream "internet", so
// nothing reaches the machine's own netns; they all vanish with the child.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "net/conntrack.h"
#include "net/ipv4.h"
#include "net/nft.h"
#include "net/rtnl.h"
#include "platform/unique_fd.h"

namespace sandstream::net {
namespace {

// ---- failures from a forked child, reported back over a pipe ----

std::string g_failures;  // in the child

class Note {
 public:
  Note(int line, const char* what) { os_ << "line " << line << ": " << what << ": "; }
  ~Note() { g_failures += os_.str() + "\n"; }
  template <typename T>
  Note& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  std::ostringstream os_;
};

#define CEXPECT(cond) \
  if (cond) {         \
  } else              \
    Note(__LINE__, #cond)
#define CASSERT(cond)        \
  do {                       \
    if (!(cond)) {           \
      Note(__LINE__, #cond); \
      return;                \
    }                        \
  } while (0)
#define CASSERT_OK(expr)                           \
  do {                                             \
    const auto& r_ = (expr);                       \
    if (!r_.ok()) {                                \
      Note(__LINE__, #expr) << r_.error().message; \
      return;                                      \
    }                                              \
  } while (0)

ino_t NetnsInode() {
  struct stat st {};
  ::stat("/proc/thread-self/ns/net", &st);
  return st.st_ino;
}

// Runs body in a child with its own netns and turns what it noted into test failures.
void InHostNetns(const std::function<void()>& body) {
  const ino_t root = NetnsInode();
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(p[0]);
    if (::unshare(CLONE_NEWNET) != 0 || NetnsInode() == root) {
      const char msg[] = "could not leave the machine's netns";
      (void)!::write(p[1], msg, sizeof msg - 1);
      ::_exit(3);
    }
    body();
    (void)!::write(p[1], g_failures.data(), g_failures.size());
    std::fflush(nullptr);
    ::_exit(0);
  }
  ::close(p[1]);
  std::string failures;
  char buf[4096];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    failures.append(buf, static_cast<size_t>(n));
  }
  ::close(p[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_EQ(failures, "");
}

// ---- another netns with a process in it, serving connect/listen requests ----

struct Request {
  char op;  // 'c' connect, 'l' listen
  uint32_t addr;
  uint16_t port;
  int timeout_ms;
};

// 0, or the errno of a TCP connect (ETIMEDOUT when nothing answered within timeout_ms).
int Connect(uint32_t addr, uint16_t port, int timeout_ms, UniqueFd* keep = nullptr) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(addr);
  sa.sin_port = htons(port);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    if (errno != EINPROGRESS) return errno;
    pollfd pfd{fd.get(), POLLOUT, 0};
    if (::poll(&pfd, 1, timeout_ms) == 0) return ETIMEDOUT;
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return err;
  }
  if (keep != nullptr) *keep = std::move(fd);
  return 0;
}

Result<UniqueFd> Listen(uint32_t addr, uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(addr);
  sa.sin_port = htons(port);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::listen(fd.get(), 64) != 0) {
    return SysError(ErrorCode::kInternal, "listen " + FormatAddress(addr), errno);
  }
  return fd;
}

class NetnsProcess {
 public:
  NetnsProcess() {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return;
    std::fflush(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(sv[0]);
      Serve(sv[1]);
    }
    ::close(sv[1]);
    control_.reset(sv[0]);
    char ready = 0;
    if (::read(control_.get(), &ready, 1) != 1 || ready != 'r') return;
    netns_.reset(
        ::open(("/proc/" + std::to_string(pid_) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
  }
  ~NetnsProcess() {
    control_.reset();
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
  }

  int netns() const { return netns_.get(); }
  pid_t pid() const { return pid_; }
  int Connect(uint32_t addr, uint16_t port, int timeout_ms = 2000) {
    return Ask({'c', addr, port, timeout_ms});
  }
  int Listen(uint32_t addr, uint16_t port) { return Ask({'l', addr, port, 0}); }
  // Runs a shell command inside this netns, returning its output.
  std::string Sh(const std::string& cmd);

 private:
  int Ask(const Request& r) {
    int err = -1;
    if (::write(control_.get(), &r, sizeof r) != sizeof r) return -1;
    if (::read(control_.get(), &err, sizeof err) != sizeof err) return -1;
    return err;
  }
  [[noreturn]] static void Serve(int fd) {
    if (::unshare(CLONE_NEWNET) != 0) ::_exit(1);
    if (::write(fd, "r", 1) != 1) ::_exit(1);
    std::vector<UniqueFd> kept;  // connections and listeners live as long as this process
    Request r;
    while (::read(fd, &r, sizeof r) == sizeof r) {
      int err = 0;
      UniqueFd s;
      if (r.op == 'c') {
        err = net::Connect(r.addr, r.port, r.timeout_ms, &s);
      } else {
        auto l = net::Listen(r.addr, r.port);
        if (l) s = std::move(*l);
        err = l ? 0 : EADDRNOTAVAIL;
      }
      if (s) kept.push_back(std::move(s));
      if (::write(fd, &err, sizeof err) != sizeof err) break;
    }
    ::_exit(0);
  }

  pid_t pid_ = -1;
  UniqueFd control_;
  UniqueFd netns_;
};

std::string Sh(const std::string& cmd) {
  std::string out;
  FILE* f = ::popen(("PATH=/usr/sbin:/usr/bin:/sbin:/bin; " + cmd + " 2>&1").c_str(), "r");
  if (f == nullptr) return "popen failed";
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  ::pclose(f);
  return out;
}

std::string NetnsProcess::Sh(const std::string& cmd) {
  return net::Sh("nsenter --net=/proc/" + std::to_string(pid_) + "/ns/net " + cmd);
}

// The lines of a that b lacks and the other way round, for a readable failure.
std::string Diff(const std::vector<std::string>& got, const std::vector<std::string>& want) {
  std::string out;
  for (const auto& l : got) {
    if (std::find(want.begin(), want.end(), l) == want.end()) out += "+ " + l + "\n";
  }
  for (const auto& l : want) {
    if (std::find(got.begin(), got.end(), l) == got.end()) out += "- " + l + "\n";
  }
  return out.empty() ? "same lines, other order or count" : out;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// `nft list` output as trimmed lines, with counters' numbers dropped.
std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    line.erase(0, line.find_first_not_of(" \t"));
    const size_t c = line.find("counter packets ");
    if (c != std::string::npos) {
      const size_t end = line.find(" bytes ", c);
      const size_t after = line.find(' ', end + 7);
      line = line.substr(0, c) + "counter" + (after == std::string::npos ? "" : line.substr(after));
    }
    out.push_back(line);
  }
  return out;
}

uint32_t Ip(const char* text) {
  return *ParseAddress(text);
}
Ipv4Prefix Pfx(const char* text) {
  return *ParsePrefix(text);
}

constexpr uint32_t kGateway = 0x0ac8000e;  // 10.200.0.14
constexpr uint32_t kAddress = 0x0ac8000f;  // 10.200.0.15

std::vector<Ipv4Prefix> Never() {
  std::vector<Ipv4Prefix> v;
  for (const char* p : {"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
                        "172.16.0.0/12", "192.0.0.0/24", "192.168.0.0/16", "224.0.0.0/3"}) {
    v.push_back(Pfx(p));
  }
  return v;
}

SandboxTable Table7() {
  SandboxTable t;
  t.name = "ss_7";
  t.device = "ss-7";
  t.gateway = kGateway;
  t.address = kAddress;
  t.allow = {Pfx("198.18.0.0/15"), Pfx("203.0.113.0/24")};
  t.allow_private = {Pfx("192.168.5.0/24")};
  t.deny = {Pfx("198.18.3.0/24")};
  t.never = Never();
  return t;
}

SharedTable Shared(const char* pool, std::vector<uint16_t> ports) {
  SharedTable s;
  s.pool = Pfx(pool);
  s.api_ports = std::move(ports);
  return s;
}

class NetKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, nf_tables)";
    // As root, a missing tool is a failure, not a skip: these tests must not pass unrun.
    if (Sh("command -v nft nsenter ip").find("nft") == std::string::npos) {
      FAIL() << "needs the nft (Debian's nftables), ip and nsenter binaries";
    }
  }
};

// ---- veth ----

TEST_F(NetKernelTest, CreateVethGivesTheSandboxARouteToTheGateway) {
  InHostNetns([] {
    NetnsProcess sb;
    CASSERT(sb.netns() >= 0);
    CASSERT_OK(CreateVeth({"ss-7", sb.netns(), kGateway, kAddress}));
    CEXPECT(LinkExists("ss-7"));
    CEXPECT(!LinkExists("eth0")) << "the peer must be born in the sandbox";
    auto links = ListLinks("ss-");
    CASSERT(links.ok());
    CEXPECT(*links == std::vector<std::string>{"ss-7"});

    const std::string host = Sh("ip -o addr show dev ss-7");
    CEXPECT(Contains(host, "inet 10.200.0.14/31")) << host;
    CEXPECT(!Contains(host, "inet6")) << host;
    const std::string link = sb.Sh("ip -o link show eth0");
    CEXPECT(Contains(link, "eth0@if") && Contains(link, ",UP,")) << link;
    CEXPECT(Contains(sb.Sh("ip -o link show lo"), ",UP,"));
    const std::string addr = sb.Sh("ip -o addr show dev eth0");
    CEXPECT(Contains(addr, "inet 10.200.0.15/31")) << addr;
    CEXPECT(!Contains(addr, "inet6")) << "addrgenmode none: " << addr;
    const std::string route = sb.Sh("ip route show default");
    CEXPECT(Contains(route, "default via 10.200.0.14 dev eth0")) << route;

    auto listener = Listen(kGateway, 8080);
    CASSERT_OK(listener);
    CEXPECT(sb.Connect(kGateway, 8080) == 0);
    CEXPECT(sb.Connect(kGateway, 8081) == ECONNREFUSED);
    // No forwarding in this host: nothing past the gateway.
    CEXPECT(sb.Connect(Ip("198.18.0.1"), 80, 300) != 0);
    CEXPECT(sb.Connect(Ip("127.0.0.1"), 8080) == ECONNREFUSED) << "lo is the sandbox's own";

    CASSERT_OK(DeleteLink("ss-7"));
    CEXPECT(!LinkExists("ss-7"));
    CEXPECT(DeleteLink("ss-7").ok()) << "a missing link is success";
  });
}

TEST_F(NetKernelTest, CreateVethFailuresNameTheStepAndLeaveNothing) {
  InHostNetns([] {
    NetnsProcess a, b, c;
    CASSERT(a.netns() >= 0 && b.netns() >= 0 && c.netns() >= 0);
    CASSERT_OK(CreateVeth({"ss-7", a.netns(), kGateway, kAddress}));
    auto twice = CreateVeth({"ss-7", b.netns(), kGateway, kAddress});
    CASSERT(!twice.ok());
    CEXPECT(twice.error().code == ErrorCode::kSandboxSetupFailed);
    CEXPECT(twice.error().message == "net: veth: add ss-7: EEXIST (File exists)")
        << twice.error().message;
    CEXPECT(*ListLinks("ss-") == std::vector<std::string>{"ss-7"});
    CEXPECT(!Contains(b.Sh("ip -o link"), "eth0"));

    // The route's gateway is off the /31: fails inside, after the pair exists.
    auto late = CreateVeth({"ss-8", c.netns(), Ip("10.200.0.16"), Ip("10.200.0.19")});
    CASSERT(!late.ok());
    CEXPECT(Contains(late.error().message, "net: veth: sandbox default route: "))
        << late.error().message;
    CEXPECT(!LinkExists("ss-8")) << "the pair is deleted on failure";
    CEXPECT(!Contains(c.Sh("ip -o link"), "eth0"));
    CEXPECT(*ListLinks("ss-") == std::vector<std::string>{"ss-7"});

    auto bad = CreateVeth({"ss-toolong-name-x", c.netns(), kGateway, kAddress});
    CEXPECT(!bad.ok());
  });
}

// ---- nftables ----

TEST_F(NetKernelTest, LoadSharedReplacesTheWholeTable) {
  InHostNetns([] {
    auto nft = Nftables::Open();
    CASSERT_OK(nft);
    CASSERT_OK(nft->LoadShared(Shared("10.200.0.0/16", {7070})));
    const std::string first = Sh("nft list table inet sandstream");
    CEXPECT(Contains(first, "elements = { 10.200.0.0/16 }")) << first;
    CEXPECT(Contains(first, "elements = { 7070 }")) << first;

    CASSERT_OK(nft->LoadShared(Shared("10.201.0.0/16", {7071, 7072})));
    const std::string text = Sh("nft list table inet sandstream");
    CEXPECT(!Contains(text, "10.200.0.0/16")) << text;
    const std::vector<std::string> expected = {
        "table inet sandstream {",
        "set pool4 {",
        "type ipv4_addr",
        "flags interval",
        "elements = { 10.201.0.0/16 }",
        "set api_ports {",
        "type inet_service",
        "elements = { 7071, 7072 }",
        "set conns4 {",
        "type ipv4_addr",
        "size 65535",
        "flags dynamic",
        "chain forward {",
        "type filter hook forward priority filter - 10; policy accept;",
        "iifname \"ss-*\" ct state established,related accept",
        "iifname \"ss-*\" ct state new add @conns4 { ip saddr ct count over 1024 } counter "
        "reject with icmpx admin-prohibited",
        "iifname \"ss-*\" meta mark & 0x0f000000 == 0x04000000 accept",
        "iifname \"ss-*\" meta mark & 0x0f000000 == 0x01000000 accept",
        "iifname \"ss-*\" meta l4proto tcp counter reject with tcp reset",
        "iifname \"ss-*\" counter reject with icmpx admin-prohibited",
        "oifname \"ss-*\" ct state established,related accept",
        "oifname \"ss-*\" counter drop",
        "chain input {",
        "type filter hook input priority filter - 10; policy accept;",
        "iifname \"ss-*\" ct state established,related accept",
        "iifname \"ss-*\" meta mark & 0x0f000000 == 0x02000000 accept",
        "iifname \"ss-*\" tcp dport @api_ports counter reject with tcp reset",
        "iifname \"ss-*\" meta mark & 0x0f000000 == 0x01000000 accept",
        "iifname \"ss-*\" meta l4proto tcp counter reject with tcp reset",
        "iifname \"ss-*\" counter reject with icmpx admin-prohibited",
        "ip daddr @pool4 counter drop",
        "chain output {",
        "type filter hook output priority filter - 10; policy accept;",
        "oifname \"ss-*\" ct state established,related accept",
        "oifname \"ss-*\" tcp flags rst accept",
        "oifname \"ss-*\" meta l4proto icmp accept",
        "oifname \"ss-*\" counter drop",
        "chain postrouting {",
        "type nat hook postrouting priority srcnat; policy accept;",
        "ip saddr @pool4 oifname != \"ss-*\" masquerade",
    };
    std::vector<std::string> got = Lines(text);
    got.erase(std::remove_if(got.begin(), got.end(),
                             [](const std::string& l) { return l.empty() || l == "}"; }),
              got.end());
    CEXPECT(got == expected) << Diff(got, expected);

    auto tables = nft->ListTables("sand", Family::kInet);
    CASSERT_OK(tables);
    CEXPECT(*tables == std::vector<std::string>{"sandstream"});
    CASSERT_OK(nft->DeleteShared("sandstream"));
    CASSERT_OK(nft->DeleteShared("sandstream"));
    CEXPECT(nft->ListTables("", Family::kInet)->empty());
  });
}

TEST_F(NetKernelTest, AddSandboxBuildsTheNetdevTable) {
  InHostNetns([] {
    NetnsProcess sb;
    CASSERT_OK(CreateVeth({"ss-7", sb.netns(), kGateway, kAddress}));
    auto nft = Nftables::Open();
    CASSERT_OK(nft);
    SandboxTable t = Table7();
    // Overlapping and adjacent prefixes are merged before they reach the kernel.
    t.allow = {Pfx("198.18.0.0/16"), Pfx("203.0.113.0/24"), Pfx("198.19.0.0/16"),
               Pfx("198.18.7.0/24")};
    CASSERT_OK(nft->AddSandbox(t));
    const std::string text = Sh("nft list table netdev ss_7");
    const std::vector<std::string> expected = {
        "table netdev ss_7 {",
        "set allow4 {",
        "type ipv4_addr",
        "flags interval",
        "elements = { 198.18.0.0/15, 203.0.113.0/24 }",
        "set allowpriv4 {",
        "type ipv4_addr",
        "flags interval",
        "elements = { 192.168.5.0/24 }",
        "set deny4 {",
        "type ipv4_addr",
        "flags interval",
        "elements = { 198.18.3.0/24 }",
        "set never4 {",
        "type ipv4_addr",
        "flags interval",
        "elements = { 0.0.0.0/8, 10.0.0.0/8,",
        "100.64.0.0/10, 127.0.0.0/8,",
        "169.254.0.0/16, 172.16.0.0/12,",
        "192.0.0.0/24, 192.168.0.0/16,",
        "224.0.0.0/3 }",
        "set dns4 {",
        "type ipv4_addr",
        "flags timeout",
        "chain from_sandbox {",
        "type filter hook ingress device \"ss-7\" priority filter; policy accept;",
        "meta mark set meta mark & 0xf0ffffff",
        "meta protocol arp accept",
        "meta protocol != ip drop",
        "ip saddr != 10.200.0.15 drop",
        "ip daddr 10.200.0.14 udp dport 53 meta mark set meta mark | 0x02000000 accept",
        "ip daddr 10.200.0.14 tcp dport 53 meta mark set meta mark | 0x02000000 accept",
        "ip daddr @deny4 accept",
        "ip daddr @allowpriv4 meta mark set meta mark | 0x01000000 accept",
        "ip daddr @never4 accept",
        "ip daddr @allow4 meta mark set meta mark | 0x04000000 accept",
        "ip daddr @dns4 meta mark set meta mark | 0x04000000 accept",
    };
    std::vector<std::string> got = Lines(text);
    got.erase(std::remove_if(got.begin(), got.end(),
                             [](const std::string& l) { return l.empty() || l == "}"; }),
              got.end());
    CEXPECT(got == expected) << Diff(got, expected);

    auto again = nft->AddSandbox(t);
    CASSERT(!again.ok());
    CEXPECT(again.error().message == "net: nft: add table ss_7: EEXIST (File exists)")
        << again.error().message;
    CEXPECT(Lines(Sh("nft list table netdev ss_7")).size() == Lines(text).size())
        << "a refused re-add leaves the table as it was";

    // Empty sets are fine.
    SandboxTable empty = Table7();
    empty.name = "ss_8";
    empty.allow = empty.allow_private = empty.deny = {};
    CASSERT_OK(nft->AddSandbox(empty));
    CEXPECT(*nft->ListTables("ss_", Family::kNetdev) == (std::vector<std::string>{"ss_7", "ss_8"}));
    CEXPECT(nft->ListTables("ss_", Family::kInet)->empty());

    CASSERT_OK(nft->DeleteSandbox("ss_7"));
    CASSERT_OK(nft->DeleteSandbox("ss_7"));
    CASSERT_OK(nft->DeleteSandbox("ss_8"));
    CEXPECT(nft->ListTables("ss_", Family::kNetdev)->empty());
  });
}

TEST_F(NetKernelTest, PinAddsAnElementWithATimeoutAndRefreshExtendsIt) {
  InHostNetns([] {
    NetnsProcess sb;
    CASSERT_OK(CreateVeth({"ss-7", sb.netns(), kGateway, kAddress}));
    auto nft = Nftables::Open();
    CASSERT_OK(nft);
    CASSERT_OK(nft->AddSandbox(Table7()));
    CASSERT_OK(nft->Pin("ss_7", Ip("203.0.113.7"), 5000));
    std::string set = Sh("nft list set netdev ss_7 dns4");
    CEXPECT(Contains(set, "203.0.113.7 timeout 5s expires ")) << set;

    CASSERT_OK(nft->Pin("ss_7", Ip("203.0.113.7"), 600000, /*refresh=*/true));
    set = Sh("nft list set netdev ss_7 dns4");
    // Listed right away the expiry can still read "10m" (jiffies).
    CEXPECT(Contains(set, "203.0.113.7 timeout 10m expires 9m5") ||
            Contains(set, "203.0.113.7 timeout 10m expires 10m"))
        << set;

    // refresh of an element that is not there (expired): the add alone.
    CASSERT_OK(nft->Pin("ss_7", Ip("203.0.113.8"), 60000, /*refresh=*/true));
    set = Sh("nft list set netdev ss_7 dns4");
    CEXPECT(Contains(set, "203.0.113.8 timeout 1m expires ")) << set;

    // Expiry: a 1 s pin is gone after it.
    CASSERT_OK(nft->Pin("ss_7", Ip("203.0.113.9"), 1000));
    ::usleep(1'500'000);
    set = Sh("nft list set netdev ss_7 dns4");
    CEXPECT(!Contains(set, "203.0.113.9")) << set;

    auto missing = nft->Pin("ss_9", Ip("203.0.113.7"), 1000);
    CASSERT(!missing.ok());
    CEXPECT(missing.error().message ==
            "net: nft: add elements ss_9 dns4: ENOENT (No such file or directory)")
        << missing.error().message;
    CEXPECT(!nft->Pin("ss_9", Ip("203.0.113.7"), 1000, true).ok());
  });
}

// ---- the whole path: sandbox -> host (forward, masquerade) -> upstream ----

size_t ConntrackEntriesFrom(uint32_t addr) {
  std::ifstream in("/proc/self/net/nf_conntrack");
  const std::string src = "src=" + FormatAddress(addr) + " ";
  size_t n = 0;
  for (std::string line; std::getline(in, line);) {
    const size_t first = line.find("src=");
    if (first != std::string::npos && line.compare(first, src.size(), src) == 0) ++n;
  }
  return n;
}

std::string ReadFile(const char* path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST_F(NetKernelTest, PolicyEndToEnd) {
  const std::string forward_before = ReadFile("/proc/sys/net/ipv4/ip_forward");
  InHostNetns([] {
    // The forwarding switch of this netns only (sysctls under /proc/sys/net follow the netns).
    { std::ofstream("/proc/sys/net/ipv4/ip_forward") << "1\n"; }
    CASSERT(ReadFile("/proc/sys/net/ipv4/ip_forward") == "1\n");

    NetnsProcess up;
    CASSERT(up.netns() >= 0);
    const std::string p = std::to_string(up.pid());
    std::string out = Sh("ip link add up0 type veth peer name eth0 netns " + p +
                         " && ip addr add 198.19.0.0/31 dev up0 && ip link set up0 up" +
                         " && ip route add default via 198.19.0.1");
    CASSERT(out.empty());
    out = up.Sh(
        "sh -c 'ip addr add 198.19.0.1/31 dev eth0 && ip link set eth0 up && "
        "ip link set lo up && for a in 198.18.0.1 198.18.5.1 203.0.113.7 192.168.1.1; "
        "do ip addr add $a/32 dev lo || exit 1; done'");
    CASSERT(out.empty());
    // The upstream has no route to the pool: only masquerade gets answers back.
    for (const char* a : {"198.18.0.1", "198.18.5.1", "203.0.113.7", "192.168.1.1"}) {
      CASSERT(up.Listen(Ip(a), 80) == 0);
    }

    NetnsProcess sb;
    CASSERT(sb.netns() >= 0);
    CASSERT_OK(CreateVeth({"ss-7", sb.netns(), kGateway, kAddress}));
    auto nft = Nftables::Open();
    CASSERT_OK(nft);
    CASSERT_OK(nft->LoadShared(Shared("10.200.0.0/16", {7070})));
    SandboxTable t = Table7();
    t.allow = {Pfx("198.18.0.0/15")};
    t.deny = {Pfx("198.18.5.0/24")};
    t.allow_private = {};
    CASSERT_OK(nft->AddSandbox(t));
    std::vector<UniqueFd> host;
    for (uint16_t port : {53, 7070, 8081}) {
      auto l = Listen(kGateway, port);
      CASSERT_OK(l);
      host.push_back(std::move(*l));
    }

    CEXPECT(sb.Connect(Ip("198.18.0.1"), 80) == 0) << "allowed, through masquerade";
    CEXPECT(sb.Connect(Ip("198.18.5.1"), 80) == ECONNREFUSED) << "denied";
    CEXPECT(sb.Connect(Ip("192.168.1.1"), 80) == ECONNREFUSED) << "private";
    CEXPECT(sb.Connect(Ip("203.0.113.7"), 80) == ECONNREFUSED) << "not allowed, not pinned";
    CASSERT_OK(nft->Pin("ss_7", Ip("203.0.113.7"), 60000));
    CEXPECT(sb.Connect(Ip("203.0.113.7"), 80) == 0) << "pinned";
    CEXPECT(sb.Connect(kGateway, 53) == 0) << "the resolver";
    CEXPECT(sb.Connect(kGateway, 7070) == ECONNREFUSED) << "the API port";
    CEXPECT(sb.Connect(kGateway, 8081) == ECONNREFUSED) << "another host service";
    CEXPECT(sb.Connect(Ip("198.19.0.0"), 8081) == ECONNREFUSED) << "the host's uplink address";
    CEXPECT(sb.Listen(kAddress, 9000) == 0);
    CEXPECT(Connect(kAddress, 9000, 300) == ETIMEDOUT) << "the host cannot connect in";

    const size_t before = ConntrackEntriesFrom(kAddress);
    CEXPECT(before >= 3) << before;
    auto other = FlushConntrackFrom(Ip("10.200.0.17"));
    CASSERT_OK(other);
    CEXPECT(*other == 0);
    auto flushed = FlushConntrackFrom(kAddress);
    CASSERT_OK(flushed);
    CEXPECT(*flushed == before) << *flushed << " of " << before;
    CEXPECT(ConntrackEntriesFrom(kAddress) == 0);
    std::printf("[ info     ] conntrack: %zu entries from the sandbox, %zu flushed\n", before,
                *flushed);
  });
  EXPECT_EQ(ReadFile("/proc/sys/net/ipv4/ip_forward"), forward_before)
      << "the machine's own netns must be untouched";
}

// ---- costs ----

double NowUs() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

std::string Summary(const char* what, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "[ cost     ] %-14s n=%zu median=%7.0f us p90=%7.0f us min=%7.0f us\n", what,
                v.size(), v[v.size() / 2], v[v.size() * 9 / 10], v[0]);
  return buf;
}

// Not a pass/fail timing assertion: the medians are printed for the design's budget table.
TEST_F(NetKernelTest, Costs) {
  InHostNetns([] {
    constexpr int kRuns = 50;
    auto nft = Nftables::Open();
    CASSERT_OK(nft);
    CASSERT_OK(nft->LoadShared(Shared("10.200.0.0/16", {7070})));
    UniqueFd home(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    std::vector<double> veth, add, pin, refresh, del;
    for (int i = 0; i < kRuns; ++i) {
      // A fresh netns held by an fd only (not timed: a sandbox has one already).
      CASSERT(::unshare(CLONE_NEWNET) == 0);
      UniqueFd ns(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
      CASSERT(::setns(home.get(), CLONE_NEWNET) == 0);
      const int slot = 100 + i;
      const uint32_t gw = kGateway - 14 + 2 * static_cast<uint32_t>(slot);
      SandboxTable t = Table7();
      t.name = "ss_" + std::to_string(slot);
      t.device = "ss-" + std::to_string(slot);
      t.gateway = gw;
      t.address = gw + 1;
      const double t0 = NowUs();
      CASSERT_OK(CreateVeth({t.device, ns.get(), gw, gw + 1}));
      const double t1 = NowUs();
      CASSERT_OK(nft->AddSandbox(t));
      const double t2 = NowUs();
      CASSERT_OK(nft->Pin(t.name, Ip("203.0.113.7"), 60000));
      const double t3 = NowUs();
      CASSERT_OK(nft->Pin(t.name, Ip("203.0.113.7"), 120000, true));
      const double t4 = NowUs();
      CASSERT_OK(nft->DeleteSandbox(t.name));
      const double t5 = NowUs();
      veth.push_back(t1 - t0);
      add.push_back(t2 - t1);
      pin.push_back(t3 - t2);
      refresh.push_back(t4 - t3);
      del.push_back(t5 - t4);
      // Dropping the netns is the teardown: the kernel deletes the pair later.
    }
    std::printf("%s%s%s%s%s", Summary("CreateVeth", veth).c_str(),
                Summary("AddSandbox", add).c_str(), Summary("Pin", pin).c_str(),
                Summary("Pin refresh", refresh).c_str(), Summary("DeleteSandbox", del).c_str());
  });
}

TEST(MergePrefixesTest, JoinsOverlappingAndAdjacent) {
  EXPECT_TRUE(MergePrefixes({}).empty());
  EXPECT_EQ(MergePrefixes({Pfx("10.0.1.0/24"), Pfx("10.0.0.0/24"), Pfx("10.0.0.128/25")}),
            (std::vector<Ipv4Range>{{Ip("10.0.0.0"), Ip("10.0.1.255")}}));
  EXPECT_EQ(MergePrefixes({Pfx("0.0.0.0/0"), Pfx("10.0.0.0/8")}),
            (std::vector<Ipv4Range>{{0, 0xffffffff}}));
  EXPECT_EQ(
      MergePrefixes({Pfx("255.255.255.255/32"), Pfx("10.0.0.0/8")}),
      (std::vector<Ipv4Range>{{Ip("10.0.0.0"), Ip("10.255.255.255")}, {0xffffffff, 0xffffffff}}));
}

}  // namespace
}  // namespace sandstream::net
