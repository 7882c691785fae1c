#include "net/nft.h"

#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include <linux/if_ether.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <net/if.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

namespace sandstream::net {

static_assert(static_cast<int>(Family::kInet) == NFPROTO_INET);
static_assert(static_cast<int>(Family::kNetdev) == NFPROTO_NETDEV);

namespace {

// nft's datatype numbers, which `nft list` shows as the set's type.
constexpr uint32_t kTypeIpv4Addr = 7;
constexpr uint32_t kTypeInetService = 13;
// The ct state bits of `ct state established,related` and `ct state new`.
constexpr uint32_t kCtEstablishedRelated = 0x6;
constexpr uint32_t kCtNew = 0x8;
// NFTA_SET_ELEM_LIST_ELEMENTS is a nest with a 16-bit length: split long element lists.
constexpr size_t kElemsPerMessage = 256;

Error Fail(std::string_view step, int err) {
  return SysError(ErrorCode::kSandboxSetupFailed, "net: nft: " + std::string(step), err);
}

// One nf_tables transaction: BEGIN, messages that each ask for an ack, END. Messages are built
// straight into a growing buffer; each names its step for the error message.
class Batch {
 public:
  Batch(mnl_socket* nl, uint32_t& seq) : nl_(nl), seq_(seq) {
    begin_seq_ = seq_++;
    Reserve(MNL_NLMSG_HDRLEN * 2);
    nftnl_batch_begin(buf_.data() + used_, begin_seq_);
    used_ += NLMSG_ALIGN(reinterpret_cast<nlmsghdr*>(buf_.data() + used_)->nlmsg_len);
  }

  // Room is an upper bound on the message's size: libnftnl writes without bounds checks.
  nlmsghdr* Start(uint16_t type, Family family, uint16_t flags, size_t room, std::string step) {
    Reserve(room);
    steps_.emplace_back(seq_, std::move(step));
    return nftnl_nlmsg_build_hdr(buf_.data() + used_, type, static_cast<uint16_t>(family),
                                 flags | NLM_F_ACK, seq_++);
  }
  void Finish(nlmsghdr* h) { used_ += NLMSG_ALIGN(h->nlmsg_len); }

  // 0 or the errno of the first failing message, with its step.
  std::pair<int, std::string> Commit() {
    Reserve(MNL_NLMSG_HDRLEN * 2);
    nftnl_batch_end(buf_.data() + used_, seq_++);
    used_ += NLMSG_ALIGN(reinterpret_cast<nlmsghdr*>(buf_.data() + used_)->nlmsg_len);
    const int fd = mnl_socket_get_fd(nl_);
    // A netlink message must fit the socket's send buffer; big policies can exceed the default.
    int sndbuf = 0;
    socklen_t len = sizeof sndbuf;
    if (used_ > 32768 && ::getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &len) == 0 &&
        static_cast<size_t>(sndbuf) < used_ + 4096) {
      const int want = static_cast<int>(used_ + 4096);
      ::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &want, sizeof want);
    }
    if (mnl_socket_sendto(nl_, buf_.data(), used_) < 0) return {errno, "send"};
    std::vector<int> errs(steps_.size(), 0);
    std::vector<bool> acked(steps_.size(), false);
    size_t pending = steps_.size();
    const uint32_t first = steps_.empty() ? 0 : steps_.front().first;
    int batch_err = 0;
    // Acks come one per datagram, small: NETLINK_CAP_ACK leaves the request out.
    alignas(nlmsghdr) char rbuf[8192];
    while (pending > 0 && batch_err == 0) {
      const ssize_t n = mnl_socket_recvfrom(nl_, rbuf, sizeof rbuf);
      if (n < 0) {
        if (errno == EINTR) continue;
        const int err = errno == EAGAIN ? ETIMEDOUT : errno;
        // The kernel acks every message, but a lost ack must not hide an error already seen.
        for (size_t i = 0; i < errs.size(); ++i) {
          if (errs[i] != 0) return {errs[i], steps_[i].second};
        }
        return {err, "receive acks"};
      }
      int left = static_cast<int>(n);
      for (auto* h = reinterpret_cast<nlmsghdr*>(rbuf); mnl_nlmsg_ok(h, left);
           h = mnl_nlmsg_next(h, &left)) {
        if (h->nlmsg_type != NLMSG_ERROR) continue;
        const int err = -static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(h))->error;
        if (h->nlmsg_seq == begin_seq_ && err != 0) {
          batch_err = err;  // the whole batch was refused (e.g. ENOMEM), one ack only
          break;
        }
        const size_t i = h->nlmsg_seq - first;
        if (i >= steps_.size() || acked[i]) continue;
        acked[i] = true;
        --pending;
        errs[i] = err;
      }
    }
    if (batch_err != 0) return {batch_err, "transaction"};
    for (size_t i = 0; i < errs.size(); ++i) {
      if (errs[i] != 0) return {errs[i], steps_[i].second};
    }
    return {0, {}};
  }

  Result<void> CommitOrFail() {
    auto [err, step] = Commit();
    if (err != 0) return Fail(step, err);
    return {};
  }

  uint32_t NextSetId() { return ++set_id_; }

 private:
  void Reserve(size_t room) {
    if (buf_.size() < used_ + room) buf_.resize(std::max(buf_.size() * 2, used_ + room));
  }

  mnl_socket* nl_;
  uint32_t& seq_;
  uint32_t begin_seq_ = 0;
  uint32_t set_id_ = 0;
  std::vector<char> buf_ = std::vector<char>(8192);
  size_t used_ = 0;
  std::vector<std::pair<uint32_t, std::string>> steps_;
};

// ---- objects ----

using TablePtr = std::unique_ptr<nftnl_table, decltype(&nftnl_table_free)>;
using ChainPtr = std::unique_ptr<nftnl_chain, decltype(&nftnl_chain_free)>;
using SetPtr = std::unique_ptr<nftnl_set, decltype(&nftnl_set_free)>;
using RulePtr = std::unique_ptr<nftnl_rule, decltype(&nftnl_rule_free)>;

void TableMsg(Batch& b, uint16_t type, uint16_t flags, Family family, const std::string& name,
              std::string step) {
  TablePtr t(nftnl_table_alloc(), nftnl_table_free);
  nftnl_table_set_u32(t.get(), NFTNL_TABLE_FAMILY, static_cast<uint32_t>(family));
  nftnl_table_set_str(t.get(), NFTNL_TABLE_NAME, name.c_str());
  nlmsghdr* h = b.Start(type, family, flags, 512, std::move(step));
  nftnl_table_nlmsg_build_payload(h, t.get());
  b.Finish(h);
}

struct Hook {
  uint32_t num;
  int32_t priority;
  const char* type;    // "filter", "nat"
  std::string device;  // netdev only
};

void AddChain(Batch& b, Family family, const std::string& table, const std::string& name,
              const Hook& hook) {
  ChainPtr c(nftnl_chain_alloc(), nftnl_chain_free);
  nftnl_chain_set_u32(c.get(), NFTNL_CHAIN_FAMILY, static_cast<uint32_t>(family));
  nftnl_chain_set_str(c.get(), NFTNL_CHAIN_TABLE, table.c_str());
  nftnl_chain_set_str(c.get(), NFTNL_CHAIN_NAME, name.c_str());
  nftnl_chain_set_u32(c.get(), NFTNL_CHAIN_HOOKNUM, hook.num);
  nftnl_chain_set_s32(c.get(), NFTNL_CHAIN_PRIO, hook.priority);
  nftnl_chain_set_str(c.get(), NFTNL_CHAIN_TYPE, hook.type);
  nftnl_chain_set_u32(c.get(), NFTNL_CHAIN_POLICY, NF_ACCEPT);
  if (!hook.device.empty()) nftnl_chain_set_str(c.get(), NFTNL_CHAIN_DEV, hook.device.c_str());
  nlmsghdr* h =
      b.Start(NFT_MSG_NEWCHAIN, family, NLM_F_CREATE, 1024, "add chain " + table + " " + name);
  nftnl_chain_nlmsg_build_payload(h, c.get());
  b.Finish(h);
}

struct SetSpec {
  std::string name;
  uint32_t key_type = kTypeIpv4Addr;
  uint32_t key_len = 4;
  uint32_t flags = 0;
  uint32_t size = 0;  // 0: unbounded
};

using Key = std::vector<uint8_t>;  // network byte order
struct Element {
  Key key;
  bool interval_end = false;
  uint64_t timeout_ms = 0;
};

SetPtr SetObject(Family family, const std::string& table, const std::string& name,
                 uint32_t set_id) {
  SetPtr s(nftnl_set_alloc(), nftnl_set_free);
  nftnl_set_set_u32(s.get(), NFTNL_SET_FAMILY, static_cast<uint32_t>(family));
  nftnl_set_set_str(s.get(), NFTNL_SET_TABLE, table.c_str());
  nftnl_set_set_str(s.get(), NFTNL_SET_NAME, name.c_str());
  if (set_id != 0) nftnl_set_set_u32(s.get(), NFTNL_SET_ID, set_id);
  return s;
}

void ElementsMsg(Batch& b, uint16_t type, Family family, const std::string& table,
                 const std::string& set, uint32_t set_id, const std::vector<Element>& elems) {
  for (size_t at = 0; at < elems.size(); at += kElemsPerMessage) {
    SetPtr s = SetObject(family, table, set, set_id);
    const size_t end = std::min(elems.size(), at + kElemsPerMessage);
    for (size_t i = at; i < end; ++i) {
      nftnl_set_elem* e = nftnl_set_elem_alloc();
      nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, elems[i].key.data(),
                         static_cast<uint32_t>(elems[i].key.size()));
      if (elems[i].interval_end) {
        nftnl_set_elem_set_u32(e, NFTNL_SET_ELEM_FLAGS, NFT_SET_ELEM_INTERVAL_END);
      }
      if (elems[i].timeout_ms != 0) {
        nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_TIMEOUT, elems[i].timeout_ms);
      }
      nftnl_set_elem_add(s.get(), e);
    }
    const char* verb = type == NFT_MSG_DELSETELEM ? "delete element " : "add elements ";
    nlmsghdr* h = b.Start(type, family, type == NFT_MSG_NEWSETELEM ? NLM_F_CREATE : 0,
                          1024 + 96 * (end - at), verb + table + " " + set);
    nftnl_set_elems_nlmsg_build_payload(h, s.get());
    b.Finish(h);
  }
}

Key Ipv4Key(uint32_t addr) {
  const uint32_t be = htonl(addr);
  Key k(4);
  std::memcpy(k.data(), &be, 4);
  return k;
}

// Interval elements as nft encodes them: each range as its start and its end + 1 flagged
// INTERVAL_END (none when it runs to 255.255.255.255), and a leading end marker at 0.0.0.0 when
// the first range does not start there.
std::vector<Element> IntervalElements(const std::vector<Ipv4Prefix>& prefixes) {
  const std::vector<Ipv4Range> ranges = MergePrefixes(prefixes);
  std::vector<Element> elems;
  if (!ranges.empty() && ranges.front().first != 0) elems.push_back({Ipv4Key(0), true, 0});
  for (const Ipv4Range& r : ranges) {
    elems.push_back({Ipv4Key(r.first), false, 0});
    if (r.last != UINT32_MAX) elems.push_back({Ipv4Key(r.last + 1), true, 0});
  }
  return elems;
}

// A set and its elements; returns its transaction id, which the rules' lookups name.
uint32_t AddSet(Batch& b, Family family, const std::string& table, const SetSpec& spec,
                const std::vector<Element>& elems) {
  const uint32_t id = b.NextSetId();
  SetPtr s = SetObject(family, table, spec.name, id);
  nftnl_set_set_u32(s.get(), NFTNL_SET_KEY_TYPE, spec.key_type);
  nftnl_set_set_u32(s.get(), NFTNL_SET_KEY_LEN, spec.key_len);
  nftnl_set_set_u32(s.get(), NFTNL_SET_FLAGS, spec.flags);
  if (spec.size != 0) nftnl_set_set_u32(s.get(), NFTNL_SET_DESC_SIZE, spec.size);
  nlmsghdr* h =
      b.Start(NFT_MSG_NEWSET, family, NLM_F_CREATE, 1024, "add set " + table + " " + spec.name);
  nftnl_set_nlmsg_build_payload(h, s.get());
  b.Finish(h);
  if (!elems.empty()) ElementsMsg(b, NFT_MSG_NEWSETELEM, family, table, spec.name, id, elems);
  return id;
}

// ---- expressions (all through register 1) ----

using Exprs = std::vector<nftnl_expr*>;

nftnl_expr* Meta(uint32_t key) {
  nftnl_expr* e = nftnl_expr_alloc("meta");
  nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, key);
  nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, NFT_REG_1);
  return e;
}
nftnl_expr* MetaSet(uint32_t key) {
  nftnl_expr* e = nftnl_expr_alloc("meta");
  nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, key);
  nftnl_expr_set_u32(e, NFTNL_EXPR_META_SREG, NFT_REG_1);
  return e;
}
nftnl_expr* Cmp(uint32_t op, const void* data, uint32_t len) {
  nftnl_expr* e = nftnl_expr_alloc("cmp");
  nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, NFT_REG_1);
  nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, op);
  nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, data, len);
  return e;
}
template <typename T>
nftnl_expr* Cmp(uint32_t op, T value) {
  return Cmp(op, &value, sizeof value);
}
nftnl_expr* Payload(uint32_t base, uint32_t offset, uint32_t len) {
  nftnl_expr* e = nftnl_expr_alloc("payload");
  nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, base);
  nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, offset);
  nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, len);
  nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, NFT_REG_1);
  return e;
}
// reg1 = (reg1 & mask) ^ bits, over len bytes (mask and bits in the register's byte order).
nftnl_expr* Bitwise(uint32_t mask, uint32_t bits, uint32_t len) {
  nftnl_expr* e = nftnl_expr_alloc("bitwise");
  nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG_1);
  nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG_1);
  nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, len);
  nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, &mask, len);
  nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, &bits, len);
  return e;
}
nftnl_expr* Lookup(const std::string& set, uint32_t set_id) {
  nftnl_expr* e = nftnl_expr_alloc("lookup");
  nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, NFT_REG_1);
  nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, set.c_str());
  nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SET_ID, set_id);
  return e;
}
nftnl_expr* Verdict(int verdict) {
  nftnl_expr* e = nftnl_expr_alloc("immediate");
  nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
  nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, static_cast<uint32_t>(verdict));
  return e;
}
nftnl_expr* Counter() {
  return nftnl_expr_alloc("counter");
}
nftnl_expr* RejectTcpReset() {
  nftnl_expr* e = nftnl_expr_alloc("reject");
  nftnl_expr_set_u32(e, NFTNL_EXPR_REJECT_TYPE, NFT_REJECT_TCP_RST);
  nftnl_expr_set_u8(e, NFTNL_EXPR_REJECT_CODE, 0);
  return e;
}
nftnl_expr* RejectAdminProhibited() {
  nftnl_expr* e = nftnl_expr_alloc("reject");
  nftnl_expr_set_u32(e, NFTNL_EXPR_REJECT_TYPE, NFT_REJECT_ICMPX_UNREACH);
  nftnl_expr_set_u8(e, NFTNL_EXPR_REJECT_CODE, NFT_REJECT_ICMPX_ADMIN_PROHIBITED);
  return e;
}

Exprs Cat(std::initializer_list<Exprs> parts) {
  Exprs out;
  for (const Exprs& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// `iifname "ss-*"`: a trailing '*' compares only the bytes before it (no NUL), so any suffix
// matches; otherwise the whole IFNAMSIZ buffer.
Exprs IfName(uint32_t key, const std::string& glob, uint32_t op = NFT_CMP_EQ) {
  char name[IFNAMSIZ] = {};
  const bool wildcard = !glob.empty() && glob.back() == '*';
  const size_t len = std::min<size_t>(wildcard ? glob.size() - 1 : glob.size(), IFNAMSIZ - 1);
  std::copy_n(glob.data(), len, name);  // the rest stays NUL
  return {Meta(key), Cmp(op, name, wildcard ? static_cast<uint32_t>(len) : IFNAMSIZ)};
}
Exprs CtState(uint32_t bits) {
  nftnl_expr* ct = nftnl_expr_alloc("ct");
  nftnl_expr_set_u32(ct, NFTNL_EXPR_CT_KEY, NFT_CT_STATE);
  nftnl_expr_set_u32(ct, NFTNL_EXPR_CT_DREG, NFT_REG_1);
  return {ct, Bitwise(bits, 0, 4), Cmp(NFT_CMP_NEQ, uint32_t{0})};
}
Exprs MarkIs(uint32_t mask, uint32_t value) {
  return {Meta(NFT_META_MARK), Bitwise(mask, 0, 4), Cmp(NFT_CMP_EQ, value)};
}
// meta mark set (meta mark & and_mask) ^ bits
Exprs SetMark(uint32_t and_mask, uint32_t bits) {
  return {Meta(NFT_META_MARK), Bitwise(and_mask, bits, 4), MetaSet(NFT_META_MARK)};
}
Exprs L4Proto(uint8_t proto) {
  return {Meta(NFT_META_L4PROTO), Cmp(NFT_CMP_EQ, proto)};
}
// The inet family's implicit `meta nfproto ipv4` before an IPv4 header match.
Exprs IsIpv4() {
  return {Meta(NFT_META_NFPROTO), Cmp(NFT_CMP_EQ, uint8_t{NFPROTO_IPV4})};
}
// The netdev family's `meta protocol ip`.
Exprs IsIpEther() {
  return {Meta(NFT_META_PROTOCOL), Cmp(NFT_CMP_EQ, uint16_t{htons(ETH_P_IP)})};
}
Exprs IpSaddr() {
  return {Payload(NFT_PAYLOAD_NETWORK_HEADER, 12, 4)};
}
Exprs IpDaddr() {
  return {Payload(NFT_PAYLOAD_NETWORK_HEADER, 16, 4)};
}

void AddRule(Batch& b, Family family, const std::string& table, const std::string& chain,
             const Exprs& exprs) {
  RulePtr r(nftnl_rule_alloc(), nftnl_rule_free);
  nftnl_rule_set_u32(r.get(), NFTNL_RULE_FAMILY, static_cast<uint32_t>(family));
  nftnl_rule_set_str(r.get(), NFTNL_RULE_TABLE, table.c_str());
  nftnl_rule_set_str(r.get(), NFTNL_RULE_CHAIN, chain.c_str());
  for (nftnl_expr* e : exprs) nftnl_rule_add_expr(r.get(), e);
  nlmsghdr* h = b.Start(NFT_MSG_NEWRULE, family, NLM_F_CREATE | NLM_F_APPEND,
                        1024 + 160 * exprs.size(), "add rule " + table + " " + chain);
  nftnl_rule_nlmsg_build_payload(h, r.get());
  b.Finish(h);
}

Result<mnl_socket*> OpenSocket() {
  mnl_socket* nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
  if (nl == nullptr) return Fail("open netlink socket", errno);
  const int fd = mnl_socket_get_fd(nl);
  // The kernel answers within the call; the timeout bounds a wedged commit mutex.
  timeval tv{5, 0};
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
  if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
    const int err = errno;
    mnl_socket_close(nl);
    return Fail("bind netlink socket", err);
  }
  return nl;
}

}  // namespace

std::vector<Ipv4Range> MergePrefixes(std::vector<Ipv4Prefix> prefixes) {
  std::sort(prefixes.begin(), prefixes.end(),
            [](const Ipv4Prefix& a, const Ipv4Prefix& b) { return a.first() < b.first(); });
  std::vector<Ipv4Range> out;
  for (const Ipv4Prefix& p : prefixes) {
    if (!out.empty() && uint64_t{p.first()} <= uint64_t{out.back().last} + 1) {
      out.back().last = std::max(out.back().last, p.last());
    } else {
      out.push_back({p.first(), p.last()});
    }
  }
  return out;
}

Nftables::Nftables(mnl_socket* nl) : nl_(nl), seq_(static_cast<uint32_t>(::time(nullptr))) {}

Nftables::Nftables(Nftables&& other) noexcept
    : nl_(std::exchange(other.nl_, nullptr)), seq_(other.seq_) {}

Nftables& Nftables::operator=(Nftables&& other) noexcept {
  if (this != &other) {
    if (nl_ != nullptr) mnl_socket_close(nl_);
    nl_ = std::exchange(other.nl_, nullptr);
    seq_ = other.seq_;
  }
  return *this;
}

Nftables::~Nftables() {
  if (nl_ != nullptr) mnl_socket_close(nl_);
}

Result<Nftables> Nftables::Open() {
  auto nl = OpenSocket();
  if (!nl) return std::move(nl).error();
  return Nftables(*nl);
}

Result<void> Nftables::LoadShared(const SharedTable& t) {
  const Family inet = Family::kInet;
  const std::string& name = t.name;
  Batch b(nl_, seq_);
  // Add (a no-op when it exists), delete, add: one transaction replaces whatever was there.
  TableMsg(b, NFT_MSG_NEWTABLE, NLM_F_CREATE, inet, name, "add table " + name);
  TableMsg(b, NFT_MSG_DELTABLE, 0, inet, name, "flush table " + name);
  TableMsg(b, NFT_MSG_NEWTABLE, NLM_F_CREATE, inet, name, "add table " + name);

  const uint32_t pool4 = AddSet(b, inet, name, {"pool4", kTypeIpv4Addr, 4, NFT_SET_INTERVAL, 0},
                                IntervalElements({t.pool}));
  std::vector<Element> ports;
  for (uint16_t port : t.api_ports) {
    const uint16_t be = htons(port);
    Key k(2);
    std::memcpy(k.data(), &be, 2);
    if (std::none_of(ports.begin(), ports.end(), [&](const Element& e) { return e.key == k; })) {
      ports.push_back({k, false, 0});
    }
  }
  const uint32_t api_ports = AddSet(b, inet, name, {"api_ports", kTypeInetService, 2, 0, 0}, ports);
  const uint32_t conns4 =
      AddSet(b, inet, name, {"conns4", kTypeIpv4Addr, 4, NFT_SET_EVAL, 65535}, {});

  const Marks& m = t.marks;
  const std::string& g = t.device_glob;
  auto in = [&] { return IfName(NFT_META_IIFNAME, g); };
  auto out = [&] { return IfName(NFT_META_OIFNAME, g); };

  AddChain(b, inet, name, "forward", {NF_INET_FORWARD, -10, "filter", {}});
  {
    const std::string c = "forward";
    AddRule(b, inet, name, c, Cat({in(), CtState(kCtEstablishedRelated), {Verdict(NF_ACCEPT)}}));
    nftnl_expr* connlimit = nftnl_expr_alloc("connlimit");
    nftnl_expr_set_u32(connlimit, NFTNL_EXPR_CONNLIMIT_COUNT, t.conn_limit);
    nftnl_expr_set_u32(connlimit, NFTNL_EXPR_CONNLIMIT_FLAGS, NFT_CONNLIMIT_F_INV);  // "over"
    nftnl_expr* dynset = nftnl_expr_alloc("dynset");
    nftnl_expr_set_u32(dynset, NFTNL_EXPR_DYNSET_SREG_KEY, NFT_REG_1);
    nftnl_expr_set_u32(dynset, NFTNL_EXPR_DYNSET_OP, NFT_DYNSET_OP_ADD);
    nftnl_expr_set_str(dynset, NFTNL_EXPR_DYNSET_SET_NAME, "conns4");
    nftnl_expr_set_u32(dynset, NFTNL_EXPR_DYNSET_SET_ID, conns4);
    nftnl_expr_set(dynset, NFTNL_EXPR_DYNSET_EXPR, connlimit, 0);  // takes ownership
    AddRule(b, inet, name, c,
            Cat({in(),
                 CtState(kCtNew),
                 IsIpv4(),
                 IpSaddr(),
                 {dynset, Counter(), RejectAdminProhibited()}}));
    AddRule(b, inet, name, c, Cat({in(), MarkIs(m.mask, m.allowed), {Verdict(NF_ACCEPT)}}));
    AddRule(b, inet, name, c, Cat({in(), MarkIs(m.mask, m.named), {Verdict(NF_ACCEPT)}}));
    AddRule(b, inet, name, c, Cat({in(), L4Proto(IPPROTO_TCP), {Counter(), RejectTcpReset()}}));
    AddRule(b, inet, name, c, Cat({in(), {Counter(), RejectAdminProhibited()}}));
    AddRule(b, inet, name, c, Cat({out(), CtState(kCtEstablishedRelated), {Verdict(NF_ACCEPT)}}));
    AddRule(b, inet, name, c, Cat({out(), {Counter(), Verdict(NF_DROP)}}));
  }
  AddChain(b, inet, name, "input", {NF_INET_LOCAL_IN, -10, "filter", {}});
  {
    const std::string c = "input";
    AddRule(b, inet, name, c, Cat({in(), CtState(kCtEstablishedRelated), {Verdict(NF_ACCEPT)}}));
    AddRule(b, inet, name, c, Cat({in(), MarkIs(m.mask, m.resolver), {Verdict(NF_ACCEPT)}}));
    AddRule(b, inet, name, c,
            Cat({in(),
                 L4Proto(IPPROTO_TCP),
                 {Payload(NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2)},
                 {Lookup("api_ports", api_ports), Counter(), RejectTcpReset()}}));
    AddRule(b, inet, name, c, Cat({in(), MarkIs(m.mask, m.named), {Verdict(NF_ACCEPT)}}));
    AddRule(b, inet, name, c, Cat({in(), L4Proto(IPPROTO_TCP), {Counter(), RejectTcpReset()}}));
    AddRule(b, inet, name, c, Cat({in(), {Counter(), RejectAdminProhibited()}}));
    AddRule(b, inet, name, c,
            Cat({IsIpv4(), IpDaddr(), {Lookup("pool4", pool4), Counter(), Verdict(NF_DROP)}}));
  }
  AddChain(b, inet, name, "output", {NF_INET_LOCAL_OUT, -10, "filter", {}});
  {
    const std::string c = "output";
    AddRule(b, inet, name, c, Cat({out(), CtState(kCtEstablishedRelated), {Verdict(NF_ACCEPT)}}));
    // `tcp flags rst`: the flags byte & RST != 0.
    AddRule(b, inet, name, c,
            Cat({out(),
                 L4Proto(IPPROTO_TCP),
                 {Payload(NFT_PAYLOAD_TRANSPORT_HEADER, 13, 1), Bitwise(0x04, 0, 1),
                  Cmp(NFT_CMP_NEQ, uint8_t{0}), Verdict(NF_ACCEPT)}}));
    AddRule(b, inet, name, c, Cat({out(), L4Proto(IPPROTO_ICMP), {Verdict(NF_ACCEPT)}}));
    AddRule(b, inet, name, c, Cat({out(), {Counter(), Verdict(NF_DROP)}}));
  }
  AddChain(b, inet, name, "postrouting", {NF_INET_POST_ROUTING, 100, "nat", {}});
  AddRule(b, inet, name, "postrouting",
          Cat({IsIpv4(),
               IpSaddr(),
               {Lookup("pool4", pool4)},
               IfName(NFT_META_OIFNAME, g, NFT_CMP_NEQ),
               {nftnl_expr_alloc("masq")}}));
  return b.CommitOrFail();
}

Result<void> Nftables::DeleteShared(const std::string& name) {
  Batch b(nl_, seq_);
  TableMsg(b, NFT_MSG_DELTABLE, 0, Family::kInet, name, "delete table " + name);
  auto [err, step] = b.Commit();
  if (err != 0 && err != ENOENT) return Fail(step, err);
  return {};
}

Result<void> Nftables::AddSandbox(const SandboxTable& t) {
  const Family nd = Family::kNetdev;
  const std::string& name = t.name;
  Batch b(nl_, seq_);
  TableMsg(b, NFT_MSG_NEWTABLE, NLM_F_CREATE | NLM_F_EXCL, nd, name, "add table " + name);
  auto interval = [&](const char* set, const std::vector<Ipv4Prefix>& prefixes) {
    return AddSet(b, nd, name, {set, kTypeIpv4Addr, 4, NFT_SET_INTERVAL, 0},
                  IntervalElements(prefixes));
  };
  const uint32_t allow4 = interval("allow4", t.allow);
  const uint32_t allowpriv4 = interval("allowpriv4", t.allow_private);
  const uint32_t deny4 = interval("deny4", t.deny);
  const uint32_t never4 = interval("never4", t.never);
  const uint32_t dns4 = AddSet(b, nd, name, {"dns4", kTypeIpv4Addr, 4, NFT_SET_TIMEOUT, 0}, {});

  const std::string c = "from_sandbox";
  AddChain(b, nd, name, c, {NF_NETDEV_INGRESS, 0, "filter", t.device});
  const Marks& m = t.marks;
  const uint32_t gateway = htonl(t.gateway);
  const uint32_t address = htonl(t.address);
  const uint16_t dns_port = htons(53);
  auto to = [&] { return Cat({IsIpEther(), IpDaddr()}); };
  AddRule(b, nd, name, c, SetMark(~m.mask, 0));
  AddRule(
      b, nd, name, c,
      {Meta(NFT_META_PROTOCOL), Cmp(NFT_CMP_EQ, uint16_t{htons(ETH_P_ARP)}), Verdict(NF_ACCEPT)});
  AddRule(b, nd, name, c,
          {Meta(NFT_META_PROTOCOL), Cmp(NFT_CMP_NEQ, uint16_t{htons(ETH_P_IP)}), Verdict(NF_DROP)});
  // Anti-spoofing: only the sandbox's own address gets any further.
  AddRule(b, nd, name, c,
          Cat({IsIpEther(), IpSaddr(), {Cmp(NFT_CMP_NEQ, address), Verdict(NF_DROP)}}));
  for (const uint8_t proto : {uint8_t{IPPROTO_UDP}, uint8_t{IPPROTO_TCP}}) {
    AddRule(b, nd, name, c,
            Cat({to(),
                 {Cmp(NFT_CMP_EQ, gateway)},
                 L4Proto(proto),
                 {Payload(NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2), Cmp(NFT_CMP_EQ, dns_port)},
                 SetMark(~m.resolver, m.resolver),
                 {Verdict(NF_ACCEPT)}}));
  }
  // Unmarked means rejected by the shared table: `accept` here only ends classification.
  AddRule(b, nd, name, c, Cat({to(), {Lookup("deny4", deny4), Verdict(NF_ACCEPT)}}));
  AddRule(b, nd, name, c,
          Cat({to(),
               {Lookup("allowpriv4", allowpriv4)},
               SetMark(~m.named, m.named),
               {Verdict(NF_ACCEPT)}}));
  AddRule(b, nd, name, c, Cat({to(), {Lookup("never4", never4), Verdict(NF_ACCEPT)}}));
  AddRule(b, nd, name, c,
          Cat({to(),
               {Lookup("allow4", allow4)},
               SetMark(~m.allowed, m.allowed),
               {Verdict(NF_ACCEPT)}}));
  AddRule(
      b, nd, name, c,
      Cat({to(), {Lookup("dns4", dns4)}, SetMark(~m.allowed, m.allowed), {Verdict(NF_ACCEPT)}}));
  return b.CommitOrFail();
}

Result<void> Nftables::ReplaceSandboxSets(const SandboxTable& t) {
  const Family nd = Family::kNetdev;
  const std::string& name = t.name;
  Batch b(nl_, seq_);
  auto replace = [&](const std::string& set, const std::vector<Ipv4Prefix>* prefixes) {
    // A DELSETELEM naming no element flushes the set.
    SetPtr s = SetObject(nd, name, set, 0);
    nlmsghdr* h = b.Start(NFT_MSG_DELSETELEM, nd, 0, 1024, "flush set " + name + " " + set);
    nftnl_set_elems_nlmsg_build_payload(h, s.get());
    b.Finish(h);
    if (prefixes && !prefixes->empty()) {
      ElementsMsg(b, NFT_MSG_NEWSETELEM, nd, name, set, 0, IntervalElements(*prefixes));
    }
  };
  replace("allow4", &t.allow);
  replace("allowpriv4", &t.allow_private);
  replace("deny4", &t.deny);
  replace("never4", &t.never);
  replace("dns4", nullptr);
  return b.CommitOrFail();
}

Result<void> Nftables::DeleteSandbox(std::string_view table) {
  const std::string name(table);
  Batch b(nl_, seq_);
  TableMsg(b, NFT_MSG_DELTABLE, 0, Family::kNetdev, name, "delete table " + name);
  auto [err, step] = b.Commit();
  if (err != 0 && err != ENOENT) return Fail(step, err);
  return {};
}

Result<void> Nftables::Pin(std::string_view table, uint32_t addr, uint32_t timeout_ms,
                           bool refresh) {
  const std::string name(table);
  const Element add{Ipv4Key(addr), false, timeout_ms};
  if (refresh) {
    // 6.1 keeps the old expiry on a re-add: delete and add in one transaction instead.
    Batch b(nl_, seq_);
    ElementsMsg(b, NFT_MSG_DELSETELEM, Family::kNetdev, name, "dns4", 0, {{add.key, false, 0}});
    ElementsMsg(b, NFT_MSG_NEWSETELEM, Family::kNetdev, name, "dns4", 0, {add});
    auto [err, step] = b.Commit();
    if (err == 0) return {};
    // ENOENT: the element expired (or never was): the add alone below.
    if (err != ENOENT) return Fail(step, err);
  }
  Batch b(nl_, seq_);
  ElementsMsg(b, NFT_MSG_NEWSETELEM, Family::kNetdev, name, "dns4", 0, {add});
  return b.CommitOrFail();
}

Result<std::vector<std::string>> Nftables::ListTables(std::string_view prefix, Family family) {
  for (int attempt = 0;; ++attempt) {
    std::vector<char> req(4096);
    const uint32_t seq = seq_++;
    nlmsghdr* h = nftnl_nlmsg_build_hdr(req.data(), NFT_MSG_GETTABLE, static_cast<uint16_t>(family),
                                        NLM_F_DUMP, seq);
    if (mnl_socket_sendto(nl_, h, h->nlmsg_len) < 0) return Fail("list tables", errno);
    std::vector<std::string> names;
    std::vector<char> rbuf(65536);
    bool done = false;
    bool interrupted = false;
    while (!done) {
      const ssize_t n = mnl_socket_recvfrom(nl_, rbuf.data(), rbuf.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return Fail("list tables", errno == EAGAIN ? ETIMEDOUT : errno);
      }
      int left = static_cast<int>(n);
      for (auto* r = reinterpret_cast<nlmsghdr*>(rbuf.data()); mnl_nlmsg_ok(r, left);
           r = mnl_nlmsg_next(r, &left)) {
        if (r->nlmsg_seq != seq) continue;
        if ((r->nlmsg_flags & NLM_F_DUMP_INTR) != 0) interrupted = true;
        if (r->nlmsg_type == NLMSG_DONE) {
          done = true;
          break;
        }
        if (r->nlmsg_type == NLMSG_ERROR) {
          const int err = -static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(r))->error;
          if (err != 0) return Fail("list tables", err);
          continue;
        }
        TablePtr t(nftnl_table_alloc(), nftnl_table_free);
        if (nftnl_table_nlmsg_parse(r, t.get()) < 0) continue;
        const char* tname = nftnl_table_get_str(t.get(), NFTNL_TABLE_NAME);
        if (tname != nullptr && std::string_view(tname).starts_with(prefix)) {
          names.emplace_back(tname);
        }
      }
    }
    // A concurrent commit changed the ruleset mid-dump: the list may be torn.
    if (interrupted && attempt < 5) continue;
    return names;
  }
}

}  // namespace sandstream::net
