#include "net/conntrack.h"

#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace sandstream::net {
namespace {

// CTA_FILTER_FLAG(CTA_IP_SRC) of the kernel (5.8+); not in Debian 12's uapi headers.
constexpr uint32_t kFilterIpSrc = 1u << 0;
// Deletes per sendmsg, each acked.
constexpr size_t kDeletesPerSend = 64;

Error Fail(std::string_view step, int err) {
  return SysError(ErrorCode::kSandboxSetupFailed, "net: conntrack: " + std::string(step), err);
}

using SocketPtr = std::unique_ptr<mnl_socket, decltype(&mnl_socket_close)>;

// What a delete needs of one entry: its original tuple as the kernel sent it, and its zone.
struct Entry {
  std::vector<char> tuple;  // the whole CTA_TUPLE_ORIG attribute
  std::vector<char> zone;   // CTA_ZONE, when present
};

nlmsghdr* CtHeader(char* buf, uint16_t type, uint16_t flags, uint32_t seq) {
  nlmsghdr* h = mnl_nlmsg_put_header(buf);
  h->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | type;
  h->nlmsg_flags = NLM_F_REQUEST | flags;
  h->nlmsg_seq = seq;
  auto* g = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(h, sizeof(nfgenmsg)));
  g->nfgen_family = AF_INET;
  g->version = NFNETLINK_V0;
  g->res_id = 0;
  return h;
}

// Calls f on each attribute in [start, start + len).
template <typename F>
void ForEachAttr(const void* start, size_t len, F f) {
  int left = static_cast<int>(len);
  for (auto* a = static_cast<const nlattr*>(start); mnl_attr_ok(a, left);
       left -= static_cast<int>(MNL_ALIGN(a->nla_len)), a = mnl_attr_next(a)) {
    f(a);
  }
}
template <typename F>
void ForEachNested(const nlattr* nest, F f) {
  ForEachAttr(mnl_attr_get_payload(nest), mnl_attr_get_payload_len(nest), f);
}

// The source address of a CTA_TUPLE_ORIG, or 0.
uint32_t OrigSource(const nlattr* tuple) {
  uint32_t source = 0;
  ForEachNested(tuple, [&](const nlattr* ip) {
    if (mnl_attr_get_type(ip) != CTA_TUPLE_IP) return;
    ForEachNested(ip, [&](const nlattr* a) {
      if (mnl_attr_get_type(a) == CTA_IP_V4_SRC && mnl_attr_get_payload_len(a) == 4) {
        uint32_t be;
        std::memcpy(&be, mnl_attr_get_payload(a), 4);
        source = ntohl(be);
      }
    });
  });
  return source;
}

// Entries whose original source is addr. With filter, the kernel picks them (5.8+); the
// caller falls back to the whole table when it refuses.
int Dump(mnl_socket* nl, uint32_t& seq, uint32_t addr, bool filter, std::vector<Entry>& out) {
  std::vector<char> req(4096);
  const uint32_t my_seq = seq++;
  nlmsghdr* h = CtHeader(req.data(), IPCTNL_MSG_CT_GET, NLM_F_DUMP, my_seq);
  if (filter) {
    nlattr* f = mnl_attr_nest_start(h, CTA_FILTER);
    mnl_attr_put_u32(h, CTA_FILTER_ORIG_FLAGS, kFilterIpSrc);  // host order
    mnl_attr_nest_end(h, f);
    nlattr* t = mnl_attr_nest_start(h, CTA_TUPLE_ORIG);
    nlattr* ip = mnl_attr_nest_start(h, CTA_TUPLE_IP);
    mnl_attr_put_u32(h, CTA_IP_V4_SRC, htonl(addr));
    mnl_attr_nest_end(h, ip);
    mnl_attr_nest_end(h, t);
  }
  if (mnl_socket_sendto(nl, h, h->nlmsg_len) < 0) return errno;
  std::vector<char> buf(65536);
  for (;;) {
    const ssize_t n = mnl_socket_recvfrom(nl, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN ? ETIMEDOUT : errno;
    }
    int left = static_cast<int>(n);
    for (auto* r = reinterpret_cast<nlmsghdr*>(buf.data()); mnl_nlmsg_ok(r, left);
         r = mnl_nlmsg_next(r, &left)) {
      if (r->nlmsg_seq != my_seq) continue;
      if (r->nlmsg_type == NLMSG_DONE) return 0;
      if (r->nlmsg_type == NLMSG_ERROR) {
        const int err = -static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(r))->error;
        if (err != 0) return err;
        continue;
      }
      const nlattr* tuple = nullptr;
      const nlattr* zone = nullptr;
      const size_t header = MNL_NLMSG_HDRLEN + MNL_ALIGN(sizeof(nfgenmsg));
      if (r->nlmsg_len < header) continue;
      ForEachAttr(mnl_nlmsg_get_payload_offset(r, sizeof(nfgenmsg)), r->nlmsg_len - header,
                  [&](const nlattr* a) {
                    if (mnl_attr_get_type(a) == CTA_TUPLE_ORIG) tuple = a;
                    if (mnl_attr_get_type(a) == CTA_ZONE) zone = a;
                  });
      // The kernel's filter is a hint; the source is checked here either way.
      if (tuple == nullptr || OrigSource(tuple) != addr) continue;
      Entry e;
      const char* t = reinterpret_cast<const char*>(tuple);
      e.tuple.assign(t, t + MNL_ALIGN(tuple->nla_len));
      if (zone != nullptr) {
        const char* z = reinterpret_cast<const char*>(zone);
        e.zone.assign(z, z + MNL_ALIGN(zone->nla_len));
      }
      out.push_back(std::move(e));
    }
  }
}

// Deletes the entries by their original tuples; ENOENT (gone meanwhile) is not counted.
Result<size_t> Delete(mnl_socket* nl, uint32_t& seq, const std::vector<Entry>& entries) {
  size_t deleted = 0;
  std::vector<char> buf;
  for (size_t at = 0; at < entries.size(); at += kDeletesPerSend) {
    const size_t end = std::min(entries.size(), at + kDeletesPerSend);
    buf.assign((end - at) * 512, 0);
    size_t used = 0;
    const uint32_t first = seq;
    for (size_t i = at; i < end; ++i) {
      nlmsghdr* h = CtHeader(buf.data() + used, IPCTNL_MSG_CT_DELETE, NLM_F_ACK, seq++);
      for (const std::vector<char>* raw : {&entries[i].tuple, &entries[i].zone}) {
        if (raw->empty()) continue;
        std::memcpy(static_cast<char*>(mnl_nlmsg_get_payload_tail(h)), raw->data(), raw->size());
        h->nlmsg_len += static_cast<uint32_t>(raw->size());
      }
      used += NLMSG_ALIGN(h->nlmsg_len);
    }
    if (mnl_socket_sendto(nl, buf.data(), used) < 0) return Fail("delete", errno);
    size_t pending = end - at;
    std::vector<char> rbuf(65536);
    int failure = 0;
    while (pending > 0) {
      const ssize_t n = mnl_socket_recvfrom(nl, rbuf.data(), rbuf.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return Fail("delete", errno == EAGAIN ? ETIMEDOUT : errno);
      }
      int left = static_cast<int>(n);
      for (auto* r = reinterpret_cast<nlmsghdr*>(rbuf.data()); mnl_nlmsg_ok(r, left);
           r = mnl_nlmsg_next(r, &left)) {
        if (r->nlmsg_type != NLMSG_ERROR || r->nlmsg_seq - first >= end - at) continue;
        --pending;
        const int err = -static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(r))->error;
        if (err == 0) {
          ++deleted;
        } else if (err != ENOENT && failure == 0) {
          failure = err;
        }
      }
    }
    if (failure != 0) return Fail("delete", failure);
  }
  return deleted;
}

}  // namespace

Result<size_t> FlushConntrackFrom(uint32_t addr) {
  // Built in or loaded, nf_conntrack has parameters and so a /sys/module entry.
  if (::access("/sys/module/nf_conntrack", F_OK) != 0) return size_t{0};
  SocketPtr nl(mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC), mnl_socket_close);
  if (!nl) return Fail("open netlink socket", errno);
  timeval tv{5, 0};
  const int one = 1;
  ::setsockopt(mnl_socket_get_fd(nl.get()), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(mnl_socket_get_fd(nl.get()), SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
  if (mnl_socket_bind(nl.get(), 0, MNL_SOCKET_AUTOPID) < 0) return Fail("bind", errno);
  uint32_t seq = static_cast<uint32_t>(::time(nullptr));
  std::vector<Entry> entries;
  int err = Dump(nl.get(), seq, addr, true, entries);
  if (err == EOPNOTSUPP || err == EINVAL) {
    entries.clear();
    err = Dump(nl.get(), seq, addr, false, entries);
  }
  if (err != 0) return Fail("dump", err);
  return Delete(nl.get(), seq, entries);
}

}  // namespace sandstream::net
