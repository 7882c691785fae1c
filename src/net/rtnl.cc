#include "net/rtnl.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "platform/unique_fd.h"

namespace sandstream::net {
namespace {

constexpr int kLoopbackIndex = 1;
// A fresh netns holds only lo (1), so the peer can ask for 2 and the sandbox side needs no
// lookup by name.
constexpr int kPeerIndex = 2;
constexpr char kPeerName[] = "eth0";

Error Fail(std::string_view step, int err) {
  return SysError(ErrorCode::kSandboxSetupFailed, step, err);
}

// One rtnetlink request, built in place: header, family header, attributes.
class Message {
 public:
  Message(uint16_t type, uint16_t flags) : buf_(1024) {
    auto* h = hdr();
    h->nlmsg_len = NLMSG_LENGTH(0);
    h->nlmsg_type = type;
    h->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
  }

  nlmsghdr* hdr() { return reinterpret_cast<nlmsghdr*>(buf_.data()); }

  void Put(const void* data, size_t len) {
    Grow(len);
    std::memcpy(buf_.data() + NLMSG_ALIGN(hdr()->nlmsg_len), data, len);
    hdr()->nlmsg_len = NLMSG_ALIGN(hdr()->nlmsg_len) + static_cast<uint32_t>(len);
  }
  size_t Attr(uint16_t type, const void* data, size_t len) {
    Grow(RTA_LENGTH(len));
    const size_t at = NLMSG_ALIGN(hdr()->nlmsg_len);
    auto* a = reinterpret_cast<rtattr*>(buf_.data() + at);
    a->rta_type = type;
    a->rta_len = static_cast<uint16_t>(RTA_LENGTH(len));
    if (len > 0) std::memcpy(RTA_DATA(a), data, len);
    hdr()->nlmsg_len = static_cast<uint32_t>(at + RTA_ALIGN(a->rta_len));
    return at;
  }
  size_t Nest(uint16_t type) { return Attr(type, nullptr, 0); }
  void End(size_t nest) {
    reinterpret_cast<rtattr*>(buf_.data() + nest)->rta_len =
        static_cast<uint16_t>(hdr()->nlmsg_len - nest);
  }
  void Str(uint16_t type, std::string_view s) {
    std::string z(s);
    Attr(type, z.c_str(), z.size() + 1);
  }

 private:
  void Grow(size_t more) {
    const size_t need = NLMSG_ALIGN(hdr()->nlmsg_len) + RTA_ALIGN(more) + 16;
    if (need > buf_.size()) buf_.resize(need * 2);
  }
  std::vector<char> buf_;
};

Result<UniqueFd> OpenRtnl() {
  UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!fd) return Fail("net: rtnetlink socket", errno);
  // The kernel answers synchronously; the timeout only bounds a wedged rtnl_lock.
  timeval tv{5, 0};
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd.get(), SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    return Fail("net: rtnetlink bind", errno);
  }
  return fd;
}

uint32_t NextSeq() {
  static std::atomic<uint32_t> seq{static_cast<uint32_t>(::time(nullptr))};
  return seq.fetch_add(64);
}

// Sends the messages in one sendmsg and reads one ack each (rtnetlink goes on after a failed
// message). errs[i] is 0 or the errno of message i; the return value is a socket-level errno.
int Talk(int fd, const std::vector<Message*>& msgs, std::vector<int>& errs) {
  const uint32_t base = NextSeq();
  std::vector<iovec> iov;
  for (size_t i = 0; i < msgs.size(); ++i) {
    msgs[i]->hdr()->nlmsg_seq = base + static_cast<uint32_t>(i);
    iov.push_back({msgs[i]->hdr(), msgs[i]->hdr()->nlmsg_len});
  }
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  msghdr mh{};
  mh.msg_name = &kernel;
  mh.msg_namelen = sizeof kernel;
  mh.msg_iov = iov.data();
  mh.msg_iovlen = iov.size();
  if (::sendmsg(fd, &mh, 0) < 0) return errno;
  errs.assign(msgs.size(), 0);
  std::vector<bool> acked(msgs.size(), false);
  size_t pending = msgs.size();
  alignas(nlmsghdr) char buf[8192];
  while (pending > 0) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN ? ETIMEDOUT : errno;
    }
    int left = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type != NLMSG_ERROR || h->nlmsg_seq - base >= msgs.size()) continue;
      const size_t i = h->nlmsg_seq - base;
      if (acked[i]) continue;
      acked[i] = true;
      --pending;
      errs[i] = -static_cast<const nlmsgerr*>(NLMSG_DATA(h))->error;
    }
  }
  return 0;
}

// One message alone: 0 or its errno.
int TalkOne(int fd, Message& m) {
  std::vector<int> errs;
  if (const int err = Talk(fd, {&m}, errs)) return err;
  return errs[0];
}

ifinfomsg LinkHeader(int index) {
  ifinfomsg ifi{};
  ifi.ifi_family = AF_UNSPEC;
  ifi.ifi_index = index;
  return ifi;
}

Message LinkUp(int index) {
  Message m(RTM_NEWLINK, 0);
  ifinfomsg ifi = LinkHeader(index);
  ifi.ifi_flags = IFF_UP;
  ifi.ifi_change = IFF_UP;
  m.Put(&ifi, sizeof ifi);
  return m;
}

// No IPv6 link-local on a link egress never routes IPv6 over. Set while the link has no
// carrier yet, so addrconf has not run.
Message NoIpv6Addresses(int index) {
  Message m(RTM_NEWLINK, 0);
  const ifinfomsg ifi = LinkHeader(index);
  m.Put(&ifi, sizeof ifi);
  const size_t spec = m.Nest(IFLA_AF_SPEC);
  const size_t inet6 = m.Nest(AF_INET6);
  const uint8_t mode = IN6_ADDR_GEN_MODE_NONE;
  m.Attr(IFLA_INET6_ADDR_GEN_MODE, &mode, 1);
  m.End(inet6);
  m.End(spec);
  return m;
}

Message Address(int index, uint32_t addr) {
  Message m(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL);
  ifaddrmsg ifa{};
  ifa.ifa_family = AF_INET;
  ifa.ifa_prefixlen = 31;
  ifa.ifa_index = static_cast<uint32_t>(index);
  m.Put(&ifa, sizeof ifa);
  const uint32_t be = htonl(addr);
  m.Attr(IFA_LOCAL, &be, 4);
  m.Attr(IFA_ADDRESS, &be, 4);
  return m;
}

Message DefaultRoute(int index, uint32_t gateway) {
  Message m(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL);
  rtmsg r{};
  r.rtm_family = AF_INET;
  r.rtm_table = RT_TABLE_MAIN;
  r.rtm_protocol = RTPROT_STATIC;
  r.rtm_scope = RT_SCOPE_UNIVERSE;
  r.rtm_type = RTN_UNICAST;
  m.Put(&r, sizeof r);
  const uint32_t be = htonl(gateway);
  m.Attr(RTA_GATEWAY, &be, 4);
  const uint32_t oif = static_cast<uint32_t>(index);
  m.Attr(RTA_OIF, &oif, 4);
  return m;
}

int DeleteByIndex(int fd, int index) {
  Message m(RTM_DELLINK, 0);
  const ifinfomsg ifi = LinkHeader(index);
  m.Put(&ifi, sizeof ifi);
  return TalkOne(fd, m);
}

// A NETLINK_ROUTE socket that lives in netns_fd: a socket keeps the netns it was made in.
Result<UniqueFd> RtnlIn(int netns_fd) {
  UniqueFd home(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!home) return Fail("net: veth: open own netns", errno);
  if (::setns(netns_fd, CLONE_NEWNET) != 0) return Fail("net: veth: setns sandbox", errno);
  auto fd = OpenRtnl();
  if (::setns(home.get(), CLONE_NEWNET) != 0) {
    // This worker would go on creating the next sandbox's links inside this one.
    std::fprintf(stderr, "net: veth: setns back to the host netns failed: %s\n",
                 std::strerror(errno));
    std::abort();
  }
  return fd;
}

Result<void> ConfigureSandboxSide(const VethSpec& spec) {
  auto fd = RtnlIn(spec.netns_fd);
  if (!fd) return std::move(fd).error();
  Message addr = Address(kPeerIndex, spec.address);
  Message no6 = NoIpv6Addresses(kPeerIndex);
  Message up = LinkUp(kPeerIndex);
  Message lo = LinkUp(kLoopbackIndex);
  Message route = DefaultRoute(kPeerIndex, spec.gateway);
  const std::vector<Message*> msgs{&addr, &no6, &up, &lo, &route};
  static constexpr const char* kSteps[] = {
      "net: veth: sandbox eth0 address", "net: veth: sandbox eth0 addrgenmode",
      "net: veth: sandbox eth0 up", "net: veth: sandbox lo up", "net: veth: sandbox default route"};
  std::vector<int> errs;
  if (const int err = Talk(fd->get(), msgs, errs)) return Fail("net: veth: sandbox side", err);
  for (size_t i = 0; i < errs.size(); ++i) {
    // A kernel without IPv6 has no addrgenmode to set.
    if (errs[i] == 0 || (msgs[i] == &no6 && errs[i] == EAFNOSUPPORT)) continue;
    return Fail(kSteps[i], errs[i]);
  }
  return {};
}

}  // namespace

Result<void> CreateVeth(const VethSpec& spec) {
  if (spec.host_name.empty() || spec.host_name.size() >= IFNAMSIZ) {
    return Error{ErrorCode::kSandboxSetupFailed, "net: veth: bad name: " + spec.host_name};
  }
  auto fd = OpenRtnl();
  if (!fd) return std::move(fd).error();

  Message create(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
  ifinfomsg ifi = LinkHeader(0);
  ifi.ifi_flags = IFF_UP;
  ifi.ifi_change = IFF_UP;
  create.Put(&ifi, sizeof ifi);
  create.Str(IFLA_IFNAME, spec.host_name);
  const size_t info = create.Nest(IFLA_LINKINFO);
  create.Attr(IFLA_INFO_KIND, "veth", 4);
  const size_t data = create.Nest(IFLA_INFO_DATA);
  const size_t peer = create.Nest(VETH_INFO_PEER);
  // No IFF_UP on the peer: veth configures it before the pair is linked, and opening a veth
  // without its peer fails the whole request with ENOTCONN. It is brought up from inside.
  const ifinfomsg pifi = LinkHeader(kPeerIndex);
  create.Put(&pifi, sizeof pifi);
  create.Str(IFLA_IFNAME, kPeerName);
  const uint32_t ns = static_cast<uint32_t>(spec.netns_fd);
  create.Attr(IFLA_NET_NS_FD, &ns, 4);
  create.End(peer);
  create.End(data);
  create.End(info);
  if (const int err = TalkOne(fd->get(), create)) {
    return Fail("net: veth: add " + spec.host_name, err);
  }

  // From here on a failure deletes the pair (the peer goes with it).
  auto undo = [&](Error e) -> Result<void> {
    if (const int index = static_cast<int>(::if_nametoindex(spec.host_name.c_str()))) {
      DeleteByIndex(fd->get(), index);
    }
    return e;
  };
  const int index = static_cast<int>(::if_nametoindex(spec.host_name.c_str()));
  if (index == 0) return undo(Fail("net: veth: index of " + spec.host_name, errno));
  Message no6 = NoIpv6Addresses(index);
  Message addr = Address(index, spec.gateway);
  std::vector<int> errs;
  if (const int err = Talk(fd->get(), {&no6, &addr}, errs)) {
    return undo(Fail("net: veth: address " + spec.host_name, err));
  }
  if (errs[0] != 0 && errs[0] != EAFNOSUPPORT) {
    return undo(Fail("net: veth: addrgenmode " + spec.host_name, errs[0]));
  }
  if (errs[1] != 0) return undo(Fail("net: veth: address " + spec.host_name, errs[1]));
  if (auto r = ConfigureSandboxSide(spec); !r) return undo(std::move(r).error());
  return {};
}

bool LinkExists(std::string_view name) {
  return ::if_nametoindex(std::string(name).c_str()) != 0;
}

Result<std::vector<std::string>> ListLinks(std::string_view prefix) {
  // glibc's if_nameindex is an RTM_GETLINK dump of the calling thread's netns.
  std::unique_ptr<struct if_nameindex, void (*)(struct if_nameindex*)> all(::if_nameindex(),
                                                                           ::if_freenameindex);
  if (!all) return Fail("net: list links", errno);
  std::vector<std::string> names;
  for (const struct if_nameindex* i = all.get(); i->if_index != 0; ++i) {
    if (std::string_view(i->if_name).starts_with(prefix)) names.emplace_back(i->if_name);
  }
  return names;
}

Result<void> DeleteLink(std::string_view name) {
  if (name.empty() || name.size() >= IFNAMSIZ) {
    return Error{ErrorCode::kSandboxSetupFailed,
                 "net: delete link: bad name: " + std::string(name)};
  }
  auto fd = OpenRtnl();
  if (!fd) return std::move(fd).error();
  Message m(RTM_DELLINK, 0);
  const ifinfomsg ifi = LinkHeader(0);
  m.Put(&ifi, sizeof ifi);
  m.Str(IFLA_IFNAME, name);
  const int err = TalkOne(fd->get(), m);
  if (err != 0 && err != ENODEV) return Fail("net: delete link " + std::string(name), err);
  return {};
}

}  // namespace sandstream::net
