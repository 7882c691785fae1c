// vethbench: cost of giving a fresh network namespace a veth to the host, two ways.
//   nl: raw rtnetlink from this process (no library):
//       RTM_NEWLINK veth "ss-N" (up) with peer "eth0" (ifindex 2) created directly in the
//       target netns (VETH_INFO_PEER carries IFLA_NET_NS_FD); RTM_NEWADDR gw/31 on ss-N;
//       then, on a NETLINK_ROUTE socket opened inside the target netns (this thread setns()
//       in and back out), in one sendmsg: RTM_NEWADDR addr/31 on eth0, lo up, eth0 up, RTM_NEWROUTE
//       default via gw.
//   ip: the same with /usr/sbin/ip (6 execs), and ipb: two `ip -batch` execs (host, netns).
// Delete: RTM_DELLINK ss-N (takes the peer with it) / `ip link del`.
// The target netns is made beforehand (not timed: today's sandboxes already pay for it) and
// named /run/netns/nlsb-N so that `ip -n` can reach it too.
// Usage: vethbench nl|ip|ipb ITER
#include <arpa/inet.h>
#include <fcntl.h>
// <linux/if.h> clashes with <net/if.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <sched.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;
#ifdef WITH_NFT
bool SandboxTableAdd(int id, uint32_t addr_host, uint32_t gw_host);  // nftbench3.cc
bool SandboxTableDel(int id);
#endif

static double NowUs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

// ---- a tiny rtnetlink message builder ----
struct Msg {
  alignas(4) char buf[1024];
  nlmsghdr* h;
  explicit Msg(uint16_t type, uint16_t flags, uint32_t seq) {
    memset(buf, 0, sizeof buf);
    h = (nlmsghdr*)buf;
    h->nlmsg_len = NLMSG_LENGTH(0);
    h->nlmsg_type = type;
    h->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
    h->nlmsg_seq = seq;
  }
  void* Put(const void* data, size_t len) {  // raw bytes (the family header)
    void* at = buf + NLMSG_ALIGN(h->nlmsg_len);
    memcpy(at, data, len);
    h->nlmsg_len = NLMSG_ALIGN(h->nlmsg_len) + len;
    return at;
  }
  rtattr* Attr(uint16_t type, const void* data, size_t len) {
    rtattr* a = (rtattr*)(buf + NLMSG_ALIGN(h->nlmsg_len));
    a->rta_type = type;
    a->rta_len = RTA_LENGTH(len);
    if (len) memcpy(RTA_DATA(a), data, len);
    h->nlmsg_len = NLMSG_ALIGN(h->nlmsg_len) + RTA_ALIGN(a->rta_len);
    return a;
  }
  rtattr* Nest(uint16_t type) { return Attr(type, nullptr, 0); }
  void End(rtattr* nest) { nest->rta_len = (unsigned short)(buf + h->nlmsg_len - (char*)nest); }
};

// Sends the messages in one sendmsg and waits for one ack each; returns 0 or -errno.
static int Talk(int fd, std::vector<Msg*> msgs) {
  iovec iov[8];
  for (size_t i = 0; i < msgs.size(); i++) iov[i] = {msgs[i]->buf, msgs[i]->h->nlmsg_len};
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  msghdr mh{};
  mh.msg_name = &sa;
  mh.msg_namelen = sizeof sa;
  mh.msg_iov = iov;
  mh.msg_iovlen = msgs.size();
  if (sendmsg(fd, &mh, 0) < 0) return -errno;
  size_t acks = 0;
  int err = 0;
  alignas(4) char rbuf[8192];
  while (acks < msgs.size()) {
    ssize_t n = recv(fd, rbuf, sizeof rbuf, 0);
    if (n < 0) return -errno;
    for (nlmsghdr* h = (nlmsghdr*)rbuf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type == NLMSG_ERROR) {
        auto* e = (nlmsgerr*)NLMSG_DATA(h);
        if (e->error && !err) err = e->error;
        acks++;
      }
    }
  }
  return err;
}

static int NlSocket() {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  bind(fd, (sockaddr*)&sa, sizeof sa);
  return fd;
}

static uint32_t g_seq = 1;
static std::vector<double> g_veth, g_haddr, g_sbside;  // nl setup, step by step
static std::vector<double> g_gone;  // NSDEL: from dropping the netns until ss-N is gone

// RTM_NEWLINK veth host_name (up) <-> peer_name (ifindex peer_index) in netns_fd.
static int CreateVeth(int nl, const char* host_name, const char* peer_name, int peer_index, int netns_fd) {
  Msg m(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, g_seq++);
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  ifi.ifi_flags = IFF_UP;
  ifi.ifi_change = IFF_UP;
  m.Put(&ifi, sizeof ifi);
  m.Attr(IFLA_IFNAME, host_name, strlen(host_name) + 1);
  rtattr* li = m.Nest(IFLA_LINKINFO);
  m.Attr(IFLA_INFO_KIND, "veth", 4);
  rtattr* data = m.Nest(IFLA_INFO_DATA);
  rtattr* peer = m.Nest(VETH_INFO_PEER);
  ifinfomsg pifi{};
  pifi.ifi_family = AF_UNSPEC;
  pifi.ifi_index = peer_index;  // a fresh netns has only lo (1): 2 is free, so the sandbox side is known
  // No IFF_UP here: veth_newlink configures the peer before it links the pair, and opening a
  // veth without its peer fails with ENOTCONN. The sandbox side is brought up from inside.
  m.Put(&pifi, sizeof pifi);
  m.Attr(IFLA_IFNAME, peer_name, strlen(peer_name) + 1);
  m.Attr(IFLA_NET_NS_FD, &netns_fd, 4);
  m.End(peer);
  m.End(data);
  m.End(li);
  return Talk(nl, {&m});
}

static void FillAddr(Msg& m, int ifindex, uint32_t addr_be, int plen) {
  ifaddrmsg ifa{};
  ifa.ifa_family = AF_INET;
  ifa.ifa_prefixlen = (unsigned char)plen;
  ifa.ifa_index = (uint32_t)ifindex;
  m.Put(&ifa, sizeof ifa);
  m.Attr(IFA_LOCAL, &addr_be, 4);
  m.Attr(IFA_ADDRESS, &addr_be, 4);
}

static int DeleteLink(int nl, const char* name) {
  Msg m(RTM_DELLINK, 0, g_seq++);
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  m.Put(&ifi, sizeof ifi);
  m.Attr(IFLA_IFNAME, name, strlen(name) + 1);
  return Talk(nl, {&m});
}

// The whole sandbox-side setup over netlink; host_netns is this thread's own netns.
static int SetupNl(int nl, int host_netns, int sb_netns, int id, uint32_t gw_be, uint32_t addr_be) {
  char name[IFNAMSIZ];
  snprintf(name, sizeof name, "ss-%d", id);
  double t0 = NowUs();
  int err = CreateVeth(nl, name, "eth0", 2, sb_netns);
  double t1 = NowUs();
  if (err) return fprintf(stderr, "veth: %s\n", strerror(-err)), err;
  const int hidx = (int)if_nametoindex(name);
  Msg ha(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, g_seq++);
  FillAddr(ha, hidx, gw_be, 31);
  if ((err = Talk(nl, {&ha}))) return fprintf(stderr, "host addr: %s\n", strerror(-err)), err;
  double t2 = NowUs();
  // A socket inside the sandbox's netns: a socket stays in the netns it was made in.
  if (setns(sb_netns, CLONE_NEWNET) != 0) return -errno;
  int snl = NlSocket();
  if (setns(host_netns, CLONE_NEWNET) != 0) return -errno;
  Msg sa(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, g_seq++);
  FillAddr(sa, 2, addr_be, 31);
  Msg lo(RTM_NEWLINK, 0, g_seq++);
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  ifi.ifi_index = 1;
  ifi.ifi_flags = IFF_UP;
  ifi.ifi_change = IFF_UP;
  lo.Put(&ifi, sizeof ifi);
  Msg up(RTM_NEWLINK, 0, g_seq++);
  ifi.ifi_index = 2;
  up.Put(&ifi, sizeof ifi);
  Msg rt(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, g_seq++);
  rtmsg r{};
  r.rtm_family = AF_INET;
  r.rtm_table = RT_TABLE_MAIN;
  r.rtm_protocol = RTPROT_STATIC;
  r.rtm_scope = RT_SCOPE_UNIVERSE;
  r.rtm_type = RTN_UNICAST;
  rt.Put(&r, sizeof r);
  rt.Attr(RTA_GATEWAY, &gw_be, 4);
  int oif = 2;
  rt.Attr(RTA_OIF, &oif, 4);
  err = Talk(snl, {&sa, &lo, &up, &rt});
  close(snl);
  double t3 = NowUs();
  g_veth.push_back(t1 - t0);
  g_haddr.push_back(t2 - t1);
  g_sbside.push_back(t3 - t2);
  if (err) fprintf(stderr, "sandbox side: %s\n", strerror(-err));
  return err;
}

static int Run(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
static int RunBatch(std::vector<std::string> args, const std::string& input) {
  int p[2];
  if (pipe(p) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[0], 0);
  posix_spawn_file_actions_addclose(&fa, p[1]);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) return -1;
  close(p[0]);
  if (write(p[1], input.data(), input.size()) < 0) return -1;
  close(p[1]);
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static std::string Dotted(uint32_t be) {
  char b[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &be, b, sizeof b);
  return b;
}

static void Report(const char* what, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  printf("%-8s n=%zu median=%8.1f us  p90=%8.1f us  min=%8.1f us\n", what, v.size(), v[v.size() / 2],
         v[v.size() * 9 / 10], v[0]);
}

// Makes /run/netns/NAME (like `ip netns add`) and returns an fd of it.
static int MakeNetns(const std::string& name, int host_netns) {
  mkdir("/run/netns", 0755);
  const std::string path = "/run/netns/" + name;
  int f = open(path.c_str(), O_CREAT | O_EXCL | O_RDONLY, 0444);
  if (f < 0) return -1;
  close(f);
  if (unshare(CLONE_NEWNET) != 0) return -1;
  if (mount("/proc/thread-self/ns/net", path.c_str(), nullptr, MS_BIND, nullptr) != 0) return -1;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  setns(host_netns, CLONE_NEWNET);
  return fd;
}
static void DropNetns(const std::string& name, int fd) {
  const std::string path = "/run/netns/" + name;
  close(fd);
  umount2(path.c_str(), MNT_DETACH);
  unlink(path.c_str());
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const std::string mode = argv[1];
  const int iter = atoi(argv[2]);
  const int host_netns = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  const int nl = NlSocket();
  std::vector<double> setup, del;
  for (int i = 0; i < iter; i++) {
    const int id = (getenv("ID_BASE") ? atoi(getenv("ID_BASE")) : 100) + i;
    const std::string ns = "nlsb-" + std::to_string(id), dev = "ss-" + std::to_string(id);
    const int sbfd = MakeNetns(ns, host_netns);
    if (sbfd < 0) return perror("netns"), 1;
    const uint32_t gw = htonl((10u << 24) | (200u << 16) | (uint32_t)(2 * id));
    const uint32_t addr = htonl((10u << 24) | (200u << 16) | (uint32_t)(2 * id + 1));
    const std::string G = Dotted(gw), A = Dotted(addr);
    double t0 = NowUs();
    int rc = 0;
    if (mode == "nl") {
      rc = SetupNl(nl, host_netns, sbfd, id, gw, addr);
#ifdef WITH_NFT
    } else if (mode == "nlnft") {  // veth + the sandbox's nft table: the whole network setup
      rc = SetupNl(nl, host_netns, sbfd, id, gw, addr);
      if (!rc && !SandboxTableAdd(id, ntohl(addr), ntohl(gw))) rc = 1;
#endif
    } else if (mode == "ip") {
      rc |= Run({"/usr/sbin/ip", "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", ns});
      rc |= Run({"/usr/sbin/ip", "addr", "add", G + "/31", "dev", dev});
      rc |= Run({"/usr/sbin/ip", "link", "set", dev, "up"});
      rc |= Run({"/usr/sbin/ip", "-n", ns, "addr", "add", A + "/31", "dev", "eth0"});
      rc |= Run({"/usr/sbin/ip", "-n", ns, "link", "set", "eth0", "up"});
      rc |= Run({"/usr/sbin/ip", "-n", ns, "link", "set", "lo", "up"});
      rc |= Run({"/usr/sbin/ip", "-n", ns, "route", "add", "default", "via", G});
    } else {  // ipb
      rc |= RunBatch({"/usr/sbin/ip", "-batch", "-"},
                     "link add " + dev + " type veth peer name eth0 netns " + ns + "\naddr add " + G + "/31 dev " +
                         dev + "\nlink set " + dev + " up\n");
      rc |= RunBatch({"/usr/sbin/ip", "-n", ns, "-batch", "-"},
                     "addr add " + A + "/31 dev eth0\nlink set eth0 up\nlink set lo up\nroute add default via " + G + "\n");
    }
    double t1 = NowUs();
    if (rc) return fprintf(stderr, "setup failed at %d\n", i), 1;
    if (i == 0 && getenv("SHOW")) {
      Run({"/usr/sbin/ip", "-n", ns, "-br", "addr"});
      Run({"/usr/sbin/ip", "-n", ns, "route"});
      Run({"/usr/sbin/ip", "netns", "exec", ns, "ping", "-c1", "-W1", G});
    }
    double t2 = NowUs();
    if (getenv("NSDEL")) {  // tear down by dropping the netns: the kernel's cleanup_net deletes the pair
      DropNetns(ns, sbfd);
      double t3 = NowUs();
      while (if_nametoindex(dev.c_str()) != 0 && NowUs() - t3 < 5e6) usleep(100);
      g_gone.push_back(NowUs() - t3);
      del.push_back(t3 - t2);
#ifdef WITH_NFT
      if (mode == "nlnft") SandboxTableDel(id);
#endif
      setup.push_back(t1 - t0);
      continue;
    }
#ifdef WITH_NFT
    if (mode == "nlnft") SandboxTableDel(id);
#endif
    rc = mode.rfind("nl", 0) == 0 ? DeleteLink(nl, dev.c_str()) : Run({"/usr/sbin/ip", "link", "del", dev});
    double t3 = NowUs();
    if (rc) return fprintf(stderr, "delete failed at %d\n", i), 1;
    DropNetns(ns, sbfd);
    setup.push_back(t1 - t0);
    del.push_back(t3 - t2);
  }
  printf("mode=%s\n", mode.c_str());
  Report("setup", setup);
  Report("delete", del);
  if (!g_gone.empty()) Report(" gone", g_gone);
  if (mode.rfind("nl", 0) == 0) {
    Report(" veth", g_veth);
    Report(" hostaddr", g_haddr);
    Report(" sandbox", g_sbside);
  }
  return 0;
}
