// dnsproxy: a prototype of the daemon's per-sandbox DNS resolver.
//   Listens on GW:53 (UDP and TCP) for one sandbox; for a query whose name the policy allows,
//   forwards it to UPSTREAM:53, pins every A record on the CNAME chain of the answer into
//   `table netdev ss_<ID>` set dns4 with timeout = clamp(TTL) + grace (via nf_tables netlink,
//   BEFORE the answer goes back), clamps the answer's TTLs to the maximum, and answers.
//   A disallowed name gets RCODE (refused|nxdomain); AAAA/HTTPS/SVCB/ANY get an empty answer
//   (this lab has no IPv6 egress, and SVCB/HTTPS carry address hints we would not pin).
//
// Usage: dnsproxy ID GW UPSTREAM refused|nxdomain PATTERN...   (PATTERN: name or *.suffix;
//        a leading ! makes it a deny pattern). Logs one line per query to stderr.
//
// DNS subset parsed (everything else is refused or passed through untouched):
//   header (12 bytes); exactly one question, uncompressed QNAME, QCLASS IN; in responses,
//   the answer section only: NAME (compression pointers followed, bounded), TYPE, CLASS,
//   TTL, RDLENGTH, RDATA for A (4 bytes) and CNAME (a name). All reads bounds-checked.
#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <libnftnl/common.h>
#include <libnftnl/set.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

constexpr uint32_t kMinPin = 30, kMaxTtl = 3600, kGrace = 30;  // seconds

static double NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// ---------------- DNS parsing ----------------
struct Reader {
  const uint8_t* p;
  size_t n;
  bool U8(size_t at, uint8_t& v) const { return at < n ? (v = p[at], true) : false; }
  bool U16(size_t at, uint16_t& v) const { return at + 2 <= n ? (v = (uint16_t)(p[at] << 8 | p[at + 1]), true) : false; }
  bool U32(size_t at, uint32_t& v) const {
    return at + 4 <= n ? (v = (uint32_t)p[at] << 24 | (uint32_t)p[at + 1] << 16 | (uint32_t)p[at + 2] << 8 | p[at + 3], true) : false;
  }
  // A (possibly compressed) name at `at`, lowercased, dotted, no trailing dot. `next` is the
  // offset after the name in place. Pointers must point backwards; at most 128 hops.
  bool Name(size_t at, std::string& out, size_t& next, bool allow_ptr) const {
    out.clear();
    bool jumped = false;
    int hops = 0;
    size_t total = 0;
    for (;;) {
      uint8_t len;
      if (!U8(at, len)) return false;
      if ((len & 0xC0) == 0xC0) {
        uint8_t lo;
        if (!allow_ptr || !U8(at + 1, lo)) return false;
        const size_t target = (size_t)(len & 0x3F) << 8 | lo;
        if (target >= at || ++hops > 128) return false;
        if (!jumped) next = at + 2;
        jumped = true;
        at = target;
        continue;
      }
      if (len & 0xC0) return false;  // 0x40/0x80: obsolete label types
      if (len == 0) {
        if (!jumped) next = at + 1;
        return true;
      }
      if (at + 1 + len > n || (total += len + 1) > 255) return false;
      if (!out.empty()) out += '.';
      for (size_t i = 0; i < len; i++) {
        const char c = (char)p[at + 1 + i];
        if (c == '.' || c == '\0') return false;  // would make the dotted form ambiguous
        out += (char)std::tolower((unsigned char)c);
      }
      at += 1 + len;
    }
  }
};

struct Question {
  uint16_t id, flags, qtype, qclass;
  std::string name;
  size_t end;  // offset just after the question
};

static std::optional<Question> ParseQuery(const uint8_t* p, size_t n) {
  Reader r{p, n};
  Question q{};
  uint16_t qd, an, ns, ar;
  if (n < 12 || !r.U16(0, q.id) || !r.U16(2, q.flags) || !r.U16(4, qd) || !r.U16(6, an) || !r.U16(8, ns) ||
      !r.U16(10, ar))
    return std::nullopt;
  if ((q.flags & 0x8000) || ((q.flags >> 11) & 0xF) != 0) return std::nullopt;  // must be a QUERY
  if (qd != 1 || an != 0 || ns != 0 || ar > 1) return std::nullopt;
  size_t next = 0;
  if (!r.Name(12, q.name, next, false) || !r.U16(next, q.qtype) || !r.U16(next + 2, q.qclass)) return std::nullopt;
  q.end = next + 4;
  return q;
}

// Bytes of a reply with only the question (RCODE given, answer empty), from the query.
static std::vector<uint8_t> Empty(const uint8_t* query, const Question& q, int rcode) {
  std::vector<uint8_t> out(query, query + q.end);
  out[2] = (uint8_t)(0x80 | (q.flags >> 8 & 0x79));  // QR, keep opcode bits and RD
  out[3] = (uint8_t)(0x80 | rcode);                   // RA, rcode
  for (int i = 6; i < 12; i++) out[i] = 0;            // no answer, authority, additional
  return out;
}

// ---------------- policy ----------------
struct Pattern {
  bool deny, wildcard;
  std::string name;
};
static std::vector<Pattern> g_patterns;
static bool Matches(const Pattern& p, const std::string& n) {
  if (!p.wildcard) return n == p.name;
  return n.size() > p.name.size() + 1 && n.compare(n.size() - p.name.size(), p.name.size(), p.name) == 0 &&
         n[n.size() - p.name.size() - 1] == '.';
}
static bool Allowed(const std::string& n) {
  bool allow = false;
  for (auto& p : g_patterns) {
    if (Matches(p, n)) {
      if (p.deny) return false;
      allow = true;
    }
  }
  return allow;
}

// ---------------- pinning (nf_tables netlink) ----------------
static mnl_socket* g_nl;
static uint32_t g_seq = 1;
static std::string g_table;

static bool Pin(const std::vector<std::pair<uint32_t, uint32_t>>& addrs) {  // (addr be, seconds)
  char buf[MNL_SOCKET_BUFFER_SIZE];
  mnl_nlmsg_batch* b = mnl_nlmsg_batch_start(buf, sizeof buf);
  nftnl_batch_begin((char*)mnl_nlmsg_batch_current(b), g_seq++);
  mnl_nlmsg_batch_next(b);
  auto* s = nftnl_set_alloc();
  nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_NETDEV);
  nftnl_set_set_str(s, NFTNL_SET_TABLE, g_table.c_str());
  nftnl_set_set_str(s, NFTNL_SET_NAME, "dns4");
  for (auto [a, secs] : addrs) {
    auto* e = nftnl_set_elem_alloc();
    nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, &a, 4);
    nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_TIMEOUT, (uint64_t)secs * 1000);
    nftnl_set_elem_add(s, e);
  }
  const uint32_t seq = g_seq++;
  nftnl_set_elems_nlmsg_build_payload(
      nftnl_nlmsg_build_hdr((char*)mnl_nlmsg_batch_current(b), NFT_MSG_NEWSETELEM, NFPROTO_NETDEV,
                            NLM_F_CREATE | NLM_F_ACK, seq),
      s);
  mnl_nlmsg_batch_next(b);
  nftnl_set_free(s);
  nftnl_batch_end((char*)mnl_nlmsg_batch_current(b), g_seq++);
  mnl_nlmsg_batch_next(b);
  bool ok = mnl_socket_sendto(g_nl, mnl_nlmsg_batch_head(b), mnl_nlmsg_batch_size(b)) >= 0;
  mnl_nlmsg_batch_stop(b);
  if (!ok) return false;
  char rbuf[MNL_SOCKET_BUFFER_SIZE];
  int n = mnl_socket_recvfrom(g_nl, rbuf, sizeof rbuf);
  if (n <= 0) return false;
  auto* h = (nlmsghdr*)rbuf;
  if (h->nlmsg_type == NLMSG_ERROR && ((nlmsgerr*)mnl_nlmsg_get_payload(h))->error != 0) {
    fprintf(stderr, "pin: %s\n", strerror(-((nlmsgerr*)mnl_nlmsg_get_payload(h))->error));
    return false;
  }
  return true;
}

// ---------------- upstream ----------------
static sockaddr_in g_upstream;

static std::vector<uint8_t> AskUdp(const std::vector<uint8_t>& q) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  std::vector<uint8_t> out;
  if (connect(fd, (sockaddr*)&g_upstream, sizeof g_upstream) == 0 && send(fd, q.data(), q.size(), 0) >= 0) {
    pollfd pf{fd, POLLIN, 0};
    if (poll(&pf, 1, 2000) == 1) {
      out.resize(65535);
      ssize_t n = recv(fd, out.data(), out.size(), 0);
      out.resize(n > 0 ? (size_t)n : 0);
    }
  }
  close(fd);
  return out;
}
static bool ReadAll(int fd, uint8_t* p, size_t n) {
  while (n) {
    pollfd pf{fd, POLLIN, 0};
    if (poll(&pf, 1, 3000) != 1) return false;
    ssize_t r = recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= (size_t)r;
  }
  return true;
}
static std::vector<uint8_t> AskTcp(const std::vector<uint8_t>& q) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  std::vector<uint8_t> out;
  uint8_t len[2] = {(uint8_t)(q.size() >> 8), (uint8_t)q.size()};
  if (connect(fd, (sockaddr*)&g_upstream, sizeof g_upstream) == 0 && send(fd, len, 2, MSG_MORE) == 2 &&
      send(fd, q.data(), q.size(), 0) == (ssize_t)q.size() && ReadAll(fd, len, 2)) {
    out.resize((size_t)len[0] << 8 | len[1]);
    if (!ReadAll(fd, out.data(), out.size())) out.clear();
  }
  close(fd);
  return out;
}

// ---------------- one query ----------------
static int g_refuse_rcode = 5;

static std::vector<uint8_t> Handle(const uint8_t* p, size_t n, bool over_tcp, const char* peer) {
  const double t0 = NowMs();
  auto q = ParseQuery(p, n);
  if (!q) {
    if (n >= 12) {  // FORMERR with the header only
      std::vector<uint8_t> out(p, p + 12);
      out[2] = 0x80;
      out[3] = 0x81;
      for (int i = 4; i < 12; i++) out[i] = 0;
      return out;
    }
    return {};
  }
  const char* verdict;
  std::vector<uint8_t> reply;
  if (q->qclass != 1 || q->qtype == 255) {
    verdict = "notimp";
    reply = Empty(p, *q, 4);
  } else if (!Allowed(q->name)) {
    verdict = "denied";
    reply = Empty(p, *q, g_refuse_rcode);
  } else if (q->qtype == 28 || q->qtype == 64 || q->qtype == 65) {
    verdict = "nodata";  // AAAA, SVCB, HTTPS
    reply = Empty(p, *q, 0);
  } else {
    // Forward with a fresh id; the client's id goes back on the answer.
    std::vector<uint8_t> fwd(p, p + n);
    uint16_t id = (uint16_t)arc4random();
    fwd[0] = (uint8_t)(id >> 8);
    fwd[1] = (uint8_t)id;
    std::vector<uint8_t> ans = AskUdp(fwd);
    if (ans.size() >= 4 && (ans[2] & 0x02)) ans = AskTcp(fwd);  // TC: again over TCP
    Reader r{ans.data(), ans.size()};
    uint16_t aid, aflags, qd, an;
    std::optional<Question> aq;
    if (ans.size() < 12 || !r.U16(0, aid) || aid != id || !r.U16(2, aflags) || !(aflags & 0x8000) ||
        !r.U16(4, qd) || !r.U16(6, an) || qd != 1) {
      verdict = "servfail";
      reply = Empty(p, *q, 2);
    } else {
      // The answer's question must be ours.
      std::string aname;
      size_t at = 0;
      uint16_t aqt, aqc;
      if (!r.Name(12, aname, at, true) || aname != q->name || !r.U16(at, aqt) || aqt != q->qtype ||
          !r.U16(at + 2, aqc)) {
        verdict = "servfail";
        reply = Empty(p, *q, 2);
      } else {
        at += 4;
        // Walk the answers: follow the CNAME chain from the qname, collect its A records, clamp TTLs.
        std::vector<std::string> chain = {q->name};
        std::vector<std::pair<uint32_t, uint32_t>> pins;
        bool ok = true;
        for (uint16_t i = 0; i < an && ok; i++) {
          std::string owner;
          size_t next;
          uint16_t type, cls, rdlen;
          uint32_t ttl;
          ok = r.Name(at, owner, next, true) && r.U16(next, type) && r.U16(next + 2, cls) && r.U32(next + 4, ttl) &&
               r.U16(next + 8, rdlen) && next + 10 + rdlen <= ans.size();
          if (!ok) break;
          const size_t rdata = next + 10;
          const uint32_t clamped = std::min(ttl, kMaxTtl);
          ans[next + 4] = (uint8_t)(clamped >> 24);
          ans[next + 5] = (uint8_t)(clamped >> 16);
          ans[next + 6] = (uint8_t)(clamped >> 8);
          ans[next + 7] = (uint8_t)clamped;
          const bool on_chain = std::find(chain.begin(), chain.end(), owner) != chain.end();
          if (on_chain && cls == 1 && type == 5) {
            std::string target;
            size_t dummy;
            ok = r.Name(rdata, target, dummy, true);
            if (ok) chain.push_back(target);
          } else if (on_chain && cls == 1 && type == 1 && rdlen == 4) {
            uint32_t a;
            memcpy(&a, &ans[rdata], 4);
            pins.push_back({a, std::max(clamped, kMinPin) + kGrace});
          }
          at = rdata + rdlen;
        }
        if (!ok) {
          verdict = "servfail";
          reply = Empty(p, *q, 2);
        } else if (!pins.empty() && !Pin(pins)) {
          verdict = "servfail(pin)";
          reply = Empty(p, *q, 2);
        } else {
          verdict = pins.empty() ? "forwarded" : "pinned";
          ans[0] = p[0];
          ans[1] = p[1];
          reply = std::move(ans);
          // A UDP client without EDNS takes 512 bytes: longer answers go back truncated.
          if (!over_tcp && reply.size() > 512) {
            reply = Empty(p, *q, 0);
            reply[2] |= 0x02;
          }
          for (auto [a, secs] : pins) {
            char s[INET_ADDRSTRLEN];
            inet_ntop(AF_INET, &a, s, sizeof s);
            fprintf(stderr, "  pin %s for %us\n", s, secs);
          }
        }
      }
    }
  }
  fprintf(stderr, "%s %s %s type=%u -> %s (%.2f ms)\n", peer, over_tcp ? "tcp" : "udp", q->name.c_str(), q->qtype,
          verdict, NowMs() - t0);
  return reply;
}

int main(int argc, char** argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: dnsproxy ID GW UPSTREAM refused|nxdomain PATTERN...\n");
    return 2;
  }
  g_table = std::string("ss_") + argv[1];
  sockaddr_in gw{};
  gw.sin_family = AF_INET;
  gw.sin_port = htons(53);
  inet_pton(AF_INET, argv[2], &gw.sin_addr);
  g_upstream.sin_family = AF_INET;
  g_upstream.sin_port = htons(53);
  inet_pton(AF_INET, argv[3], &g_upstream.sin_addr);
  g_refuse_rcode = std::string(argv[4]) == "nxdomain" ? 3 : 5;
  for (int i = 5; i < argc; i++) {
    std::string s = argv[i];
    Pattern p{false, false, ""};
    if (s[0] == '!') p.deny = true, s = s.substr(1);
    if (s.rfind("*.", 0) == 0) p.wildcard = true, s = s.substr(2);
    for (auto& c : s) c = (char)std::tolower((unsigned char)c);
    p.name = s;
    g_patterns.push_back(p);
  }
  g_nl = mnl_socket_open(NETLINK_NETFILTER);
  mnl_socket_bind(g_nl, 0, MNL_SOCKET_AUTOPID);
  int udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(tcp, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(udp, (sockaddr*)&gw, sizeof gw) != 0 || bind(tcp, (sockaddr*)&gw, sizeof gw) != 0 || listen(tcp, 16) != 0) {
    perror("bind");
    return 1;
  }
  fprintf(stderr, "dnsproxy: %s:53 -> %s:53, table netdev %s\n", argv[2], argv[3], g_table.c_str());
  for (;;) {
    pollfd pf[2] = {{udp, POLLIN, 0}, {tcp, POLLIN, 0}};
    if (poll(pf, 2, -1) < 0) continue;
    if (pf[0].revents & POLLIN) {
      uint8_t buf[4096];
      sockaddr_in from{};
      socklen_t fl = sizeof from;
      ssize_t n = recvfrom(udp, buf, sizeof buf, 0, (sockaddr*)&from, &fl);
      if (n > 0) {
        char peer[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &from.sin_addr, peer, sizeof peer);
        auto reply = Handle(buf, (size_t)n, false, peer);
        if (!reply.empty()) sendto(udp, reply.data(), reply.size(), 0, (sockaddr*)&from, fl);
      }
    }
    if (pf[1].revents & POLLIN) {  // one query per connection is enough for a prototype
      sockaddr_in from{};
      socklen_t fl = sizeof from;
      int c = accept4(tcp, (sockaddr*)&from, &fl, SOCK_CLOEXEC);
      if (c >= 0) {
        uint8_t len[2];
        std::vector<uint8_t> q;
        if (ReadAll(c, len, 2)) {
          q.resize((size_t)len[0] << 8 | len[1]);
          if (!ReadAll(c, q.data(), q.size())) q.clear();
        }
        if (!q.empty()) {
          char peer[INET_ADDRSTRLEN];
          inet_ntop(AF_INET, &from.sin_addr, peer, sizeof peer);
          auto reply = Handle(q.data(), q.size(), true, peer);
          uint8_t l[2] = {(uint8_t)(reply.size() >> 8), (uint8_t)reply.size()};
          send(c, l, 2, MSG_MORE);
          send(c, reply.data(), reply.size(), 0);
        }
        close(c);
      }
    }
  }
}
