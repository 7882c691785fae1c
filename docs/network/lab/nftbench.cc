// nftbench: what it costs to add and to remove one sandbox's nftables rules, three ways:
//   exec: fork+exec `nft -f -` with the batch as text on stdin (what a shell-out would do)
//   lib:  libnftables, nft_run_cmd_from_buffer() on one long-lived nft_ctx
//   nl:   libnftnl + libmnl, one netlink batch built in-process
// plus the cost of pinning one DNS answer (one element with a timeout) each way.
//
// Needs the base table of base.nft loaded first (table inet ss with fwd_vmap, in_vmap,
// never4). Usage: nftbench MODE ITER PREFILL   (MODE = exec | lib | nl)
// Prints medians (and p90) in microseconds.
#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <nftables/libnftables.h>
#include <spawn.h>
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

static double NowUs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static const char* kTable = "ss";

// ---------- the per-sandbox batch, as nft text ----------
static std::string Addr(int id) {  // sandbox address 10.200.x.y (odd), gateway = even one below
  const int n = 2 * id + 1;
  return "10.200." + std::to_string((n >> 8) & 255) + "." + std::to_string(n & 255);
}
static std::string Gw(int id) {
  const int n = 2 * id;
  return "10.200." + std::to_string((n >> 8) & 255) + "." + std::to_string(n & 255);
}

static std::string AddText(int id) {
  const std::string s = std::to_string(id), t = "inet ss ";
  std::string b;
  b += "add set " + t + "allow4_" + s +
       " { type ipv4_addr; flags interval; elements = { 198.18.0.0/15, 203.0.113.0/24 } }\n";
  b += "add set " + t + "deny4_" + s + " { type ipv4_addr; flags interval; elements = { 198.18.3.0/24 } }\n";
  b += "add set " + t + "dns4_" + s + " { type ipv4_addr; flags timeout; }\n";
  b += "add chain " + t + "fwd_" + s + "\n";
  b += "add rule " + t + "fwd_" + s + " ip saddr != " + Addr(id) + " drop\n";
  b += "add rule " + t + "fwd_" + s + " meta nfproto ipv6 drop\n";
  b += "add rule " + t + "fwd_" + s + " ip daddr @deny4_" + s + " drop\n";
  b += "add rule " + t + "fwd_" + s + " ip daddr @allow4_" + s + " accept\n";
  b += "add rule " + t + "fwd_" + s + " ip daddr @never4 drop\n";
  b += "add rule " + t + "fwd_" + s + " ip daddr @dns4_" + s + " accept\n";
  b += "add rule " + t + "fwd_" + s + " reject with icmpx admin-prohibited\n";
  b += "add chain " + t + "in_" + s + "\n";
  b += "add rule " + t + "in_" + s + " ip saddr " + Addr(id) + " ip daddr " + Gw(id) + " udp dport 53 accept\n";
  b += "add rule " + t + "in_" + s + " ip saddr " + Addr(id) + " ip daddr " + Gw(id) + " tcp dport 53 accept\n";
  b += "add rule " + t + "in_" + s + " reject with icmpx admin-prohibited\n";
  b += "add element " + t + "fwd_vmap { \"ss-" + s + "\" : jump fwd_" + s + " }\n";
  b += "add element " + t + "in_vmap { \"ss-" + s + "\" : jump in_" + s + " }\n";
  return b;
}

static std::string DelText(int id) {
  const std::string s = std::to_string(id), t = "inet ss ";
  std::string b;
  b += "delete element " + t + "fwd_vmap { \"ss-" + s + "\" }\n";
  b += "delete element " + t + "in_vmap { \"ss-" + s + "\" }\n";
  b += "flush chain " + t + "fwd_" + s + "\n";
  b += "flush chain " + t + "in_" + s + "\n";
  b += "delete chain " + t + "fwd_" + s + "\n";
  b += "delete chain " + t + "in_" + s + "\n";
  b += "delete set " + t + "allow4_" + s + "\n";
  b += "delete set " + t + "deny4_" + s + "\n";
  b += "delete set " + t + "dns4_" + s + "\n";
  return b;
}

static std::string PinText(int id, int k) {
  return "add element inet ss dns4_" + std::to_string(id) + " { 198.51.100." + std::to_string(k % 250) +
         " timeout 60s }\n";
}

// ---------- exec: nft -f - ----------
static bool RunExec(const std::string& text) {
  int p[2];
  if (pipe(p) != 0) return false;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[0], 0);
  posix_spawn_file_actions_addclose(&fa, p[1]);
  char a0[] = "nft", a1[] = "-f", a2[] = "-";
  char* argv[] = {a0, a1, a2, nullptr};
  pid_t pid;
  if (posix_spawn(&pid, "/usr/sbin/nft", &fa, nullptr, argv, environ) != 0) return false;
  posix_spawn_file_actions_destroy(&fa);
  close(p[0]);
  if (write(p[1], text.data(), text.size()) != (ssize_t)text.size()) return false;
  close(p[1]);
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

// ---------- lib: libnftables ----------
static nft_ctx* g_ctx;
static bool RunLib(const std::string& text) {
  const int rc = nft_run_cmd_from_buffer(g_ctx, text.c_str());
  if (rc != 0) fprintf(stderr, "lib: %s", nft_ctx_get_error_buffer(g_ctx));
  return rc == 0;
}

// ---------- nl: libnftnl + libmnl ----------
static mnl_socket* g_nl;
static uint32_t g_seq;
static uint32_t g_portid;

struct Batch {
  std::vector<char> buf = std::vector<char>(1 << 16);
  mnl_nlmsg_batch* b;
  int msgs = 0;
  Batch() {
    b = mnl_nlmsg_batch_start(buf.data(), buf.size());
    nftnl_batch_begin((char*)mnl_nlmsg_batch_current(b), g_seq++);
    mnl_nlmsg_batch_next(b);
  }
  ~Batch() { mnl_nlmsg_batch_stop(b); }
  nlmsghdr* Hdr(uint16_t type, uint16_t flags) {
    msgs++;
    return nftnl_nlmsg_build_hdr((char*)mnl_nlmsg_batch_current(b), type, NFPROTO_INET,
                                 flags | NLM_F_ACK, g_seq++);
  }
  void Next() { mnl_nlmsg_batch_next(b); }
  // Sends and reads one ack per message; false with the first error.
  bool Commit() {
    nftnl_batch_end((char*)mnl_nlmsg_batch_current(b), g_seq++);
    mnl_nlmsg_batch_next(b);
    if (mnl_socket_sendto(g_nl, mnl_nlmsg_batch_head(b), mnl_nlmsg_batch_size(b)) < 0) {
      perror("sendto");
      return false;
    }
    char rbuf[MNL_SOCKET_BUFFER_SIZE];
    int acks = 0;
    bool ok = true;
    while (acks < msgs) {
      int n = mnl_socket_recvfrom(g_nl, rbuf, sizeof rbuf);
      if (n <= 0) return false;
      for (nlmsghdr* h = (nlmsghdr*)rbuf; mnl_nlmsg_ok(h, n); h = mnl_nlmsg_next(h, &n)) {
        if (h->nlmsg_type == NLMSG_ERROR) {
          auto* e = (nlmsgerr*)mnl_nlmsg_get_payload(h);
          if (e->error != 0) {
            fprintf(stderr, "nl: seq %u: %s\n", h->nlmsg_seq, strerror(-e->error));
            ok = false;
          }
          acks++;
        }
      }
    }
    return ok;
  }
};

static nftnl_expr* Meta(uint32_t key) {
  auto* e = nftnl_expr_alloc("meta");
  nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, key);
  nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, NFT_REG_1);
  return e;
}
static nftnl_expr* Cmp(uint32_t op, const void* data, uint32_t len) {
  auto* e = nftnl_expr_alloc("cmp");
  nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, NFT_REG_1);
  nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, op);
  nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, data, len);
  return e;
}
static nftnl_expr* Payload(uint32_t base, uint32_t off, uint32_t len) {
  auto* e = nftnl_expr_alloc("payload");
  nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, base);
  nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, off);
  nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, len);
  nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, NFT_REG_1);
  return e;
}
static nftnl_expr* Lookup(const std::string& set, uint32_t set_id) {
  auto* e = nftnl_expr_alloc("lookup");
  nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, NFT_REG_1);
  nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, set.c_str());
  if (set_id) nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SET_ID, set_id);
  return e;
}
static nftnl_expr* Verdict(int v) {
  auto* e = nftnl_expr_alloc("immediate");
  nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
  nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, v);
  return e;
}
static nftnl_expr* Reject() {
  auto* e = nftnl_expr_alloc("reject");
  nftnl_expr_set_u32(e, NFTNL_EXPR_REJECT_TYPE, NFT_REJECT_ICMPX_UNREACH);
  nftnl_expr_set_u8(e, NFTNL_EXPR_REJECT_CODE, NFT_REJECT_ICMPX_ADMIN_PROHIBITED);
  return e;
}
static const uint8_t kIPv4 = NFPROTO_IPV4, kIPv6 = NFPROTO_IPV6;

static void AddRule(Batch& b, const std::string& chain, std::vector<nftnl_expr*> exprs) {
  auto* r = nftnl_rule_alloc();
  nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
  nftnl_rule_set_str(r, NFTNL_RULE_TABLE, kTable);
  nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain.c_str());
  for (auto* e : exprs) nftnl_rule_add_expr(r, e);
  nftnl_rule_nlmsg_build_payload(b.Hdr(NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND), r);
  b.Next();
  nftnl_rule_free(r);
}

static void AddChain(Batch& b, const std::string& name) {
  auto* c = nftnl_chain_alloc();
  nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, NFPROTO_INET);
  nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, kTable);
  nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, name.c_str());
  nftnl_chain_nlmsg_build_payload(b.Hdr(NFT_MSG_NEWCHAIN, NLM_F_CREATE), c);
  b.Next();
  nftnl_chain_free(c);
}

static void DelChain(Batch& b, const std::string& name) {
  auto* c = nftnl_chain_alloc();
  nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, NFPROTO_INET);
  nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, kTable);
  nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, name.c_str());
  // No NLM_F_NONREC: the kernel deletes the chain's rules in the same transaction.
  nftnl_chain_nlmsg_build_payload(b.Hdr(NFT_MSG_DELCHAIN, 0), c);
  b.Next();
  nftnl_chain_free(c);
}

static uint32_t g_set_id = 1;
struct Cidr { uint32_t a, plen; };  // host order

// An IPv4 set; interval elements encoded as nft does: start, end+1 flagged INTERVAL_END,
// and a leading 0.0.0.0 end marker when the first range does not start at 0.
static uint32_t AddSet(Batch& b, const std::string& name, bool interval, bool timeout,
                       const std::vector<Cidr>& cidrs) {
  const uint32_t id = g_set_id++;
  auto* s = nftnl_set_alloc();
  nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
  nftnl_set_set_str(s, NFTNL_SET_TABLE, kTable);
  nftnl_set_set_str(s, NFTNL_SET_NAME, name.c_str());
  nftnl_set_set_u32(s, NFTNL_SET_ID, id);
  nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, 7);  // nft's TYPE_IPADDR
  nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, 4);
  uint32_t flags = 0;
  if (interval) flags |= NFT_SET_INTERVAL;
  if (timeout) flags |= NFT_SET_TIMEOUT;
  nftnl_set_set_u32(s, NFTNL_SET_FLAGS, flags);
  nftnl_set_nlmsg_build_payload(b.Hdr(NFT_MSG_NEWSET, NLM_F_CREATE), s);
  b.Next();
  if (!cidrs.empty()) {
    std::vector<Cidr> sorted = cidrs;
    std::sort(sorted.begin(), sorted.end(), [](Cidr x, Cidr y) { return x.a < y.a; });
    auto elem = [&](uint32_t host, bool end) {
      auto* e = nftnl_set_elem_alloc();
      uint32_t be = htonl(host);
      nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, &be, 4);
      if (end) nftnl_set_elem_set_u32(e, NFTNL_SET_ELEM_FLAGS, NFT_SET_ELEM_INTERVAL_END);
      nftnl_set_elem_add(s, e);
    };
    if (sorted[0].a != 0) elem(0, true);
    for (auto c : sorted) {
      elem(c.a, false);
      const uint64_t end = (uint64_t)c.a + (1ull << (32 - c.plen));
      if (end < (1ull << 32)) elem((uint32_t)end, true);
    }
    nftnl_set_elems_nlmsg_build_payload(b.Hdr(NFT_MSG_NEWSETELEM, NLM_F_CREATE), s);
    b.Next();
  }
  nftnl_set_free(s);
  return id;
}

static void DelSet(Batch& b, const std::string& name) {
  auto* s = nftnl_set_alloc();
  nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
  nftnl_set_set_str(s, NFTNL_SET_TABLE, kTable);
  nftnl_set_set_str(s, NFTNL_SET_NAME, name.c_str());
  nftnl_set_nlmsg_build_payload(b.Hdr(NFT_MSG_DELSET, 0), s);
  b.Next();
  nftnl_set_free(s);
}

// One element of a vmap ifname -> jump chain (add) or the key only (delete).
static void VmapElem(Batch& b, const char* map, const std::string& ifname, const std::string* chain) {
  auto* s = nftnl_set_alloc();
  nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
  nftnl_set_set_str(s, NFTNL_SET_TABLE, kTable);
  nftnl_set_set_str(s, NFTNL_SET_NAME, map);
  auto* e = nftnl_set_elem_alloc();
  char key[16] = {};
  strncpy(key, ifname.c_str(), 15);
  nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, key, 16);
  if (chain) {
    nftnl_set_elem_set_u32(e, NFTNL_SET_ELEM_VERDICT, NFT_JUMP);
    nftnl_set_elem_set_str(e, NFTNL_SET_ELEM_CHAIN, chain->c_str());
  }
  nftnl_set_elem_add(s, e);
  nftnl_set_elems_nlmsg_build_payload(
      b.Hdr(chain ? NFT_MSG_NEWSETELEM : NFT_MSG_DELSETELEM, chain ? NLM_F_CREATE : 0), s);
  b.Next();
  nftnl_set_free(s);
}

static uint32_t Ip(const std::string& s) {
  in_addr a;
  inet_pton(AF_INET, s.c_str(), &a);
  return a.s_addr;  // network order
}

static bool NlAdd(int id) {
  const std::string s = std::to_string(id);
  const std::string fwd = "fwd_" + s, in = "in_" + s;
  Batch b;
  const uint32_t allow = AddSet(b, "allow4_" + s, true, false,
                                {{ntohl(Ip("198.18.0.0")), 15}, {ntohl(Ip("203.0.113.0")), 24}});
  const uint32_t deny = AddSet(b, "deny4_" + s, true, false, {{ntohl(Ip("198.18.3.0")), 24}});
  const uint32_t dns = AddSet(b, "dns4_" + s, false, true, {});
  AddChain(b, fwd);
  const uint32_t addr = Ip(Addr(id)), gw = Ip(Gw(id));
  const uint16_t p53 = htons(53);
  const uint8_t tcp = IPPROTO_TCP, udp = IPPROTO_UDP;
  auto v4 = [&] { return std::vector<nftnl_expr*>{Meta(NFT_META_NFPROTO), Cmp(NFT_CMP_EQ, &kIPv4, 1)}; };
  auto with = [](std::vector<nftnl_expr*> a, std::vector<nftnl_expr*> b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  AddRule(b, fwd, with(v4(), {Payload(NFT_PAYLOAD_NETWORK_HEADER, 12, 4), Cmp(NFT_CMP_NEQ, &addr, 4), Verdict(NF_DROP)}));
  AddRule(b, fwd, {Meta(NFT_META_NFPROTO), Cmp(NFT_CMP_EQ, &kIPv6, 1), Verdict(NF_DROP)});
  AddRule(b, fwd, with(v4(), {Payload(NFT_PAYLOAD_NETWORK_HEADER, 16, 4), Lookup("deny4_" + s, deny), Verdict(NF_DROP)}));
  AddRule(b, fwd, with(v4(), {Payload(NFT_PAYLOAD_NETWORK_HEADER, 16, 4), Lookup("allow4_" + s, allow), Verdict(NF_ACCEPT)}));
  AddRule(b, fwd, with(v4(), {Payload(NFT_PAYLOAD_NETWORK_HEADER, 16, 4), Lookup("never4", 0), Verdict(NF_DROP)}));
  AddRule(b, fwd, with(v4(), {Payload(NFT_PAYLOAD_NETWORK_HEADER, 16, 4), Lookup("dns4_" + s, dns), Verdict(NF_ACCEPT)}));
  AddRule(b, fwd, {Reject()});
  AddChain(b, in);
  for (uint8_t proto : {udp, tcp}) {
    AddRule(b, in, with(v4(), {Payload(NFT_PAYLOAD_NETWORK_HEADER, 12, 4), Cmp(NFT_CMP_EQ, &addr, 4),
                               Payload(NFT_PAYLOAD_NETWORK_HEADER, 16, 4), Cmp(NFT_CMP_EQ, &gw, 4),
                               Meta(NFT_META_L4PROTO), Cmp(NFT_CMP_EQ, &proto, 1),
                               Payload(NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2), Cmp(NFT_CMP_EQ, &p53, 2),
                               Verdict(NF_ACCEPT)}));
  }
  AddRule(b, in, {Reject()});
  if (!getenv("NOVMAP")) {
    VmapElem(b, "fwd_vmap", "ss-" + s, &fwd);
    VmapElem(b, "in_vmap", "ss-" + s, &in);
  }
  return b.Commit();
}

static bool NlDel(int id) {
  const std::string s = std::to_string(id);
  Batch b;
  if (!getenv("NOVMAP")) {
    VmapElem(b, "fwd_vmap", "ss-" + s, nullptr);
    VmapElem(b, "in_vmap", "ss-" + s, nullptr);
  }
  DelChain(b, "fwd_" + s);
  DelChain(b, "in_" + s);
  DelSet(b, "allow4_" + s);
  DelSet(b, "deny4_" + s);
  DelSet(b, "dns4_" + s);
  return b.Commit();
}

static bool NlPin(int id, int k) {
  Batch b;
  auto* s = nftnl_set_alloc();
  nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
  nftnl_set_set_str(s, NFTNL_SET_TABLE, kTable);
  const std::string name = "dns4_" + std::to_string(id);
  nftnl_set_set_str(s, NFTNL_SET_NAME, name.c_str());
  auto* e = nftnl_set_elem_alloc();
  const uint32_t a = htonl((198u << 24) | (51u << 16) | (100u << 8) | (uint32_t)(k % 250));
  nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, &a, 4);
  nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_TIMEOUT, 60000);  // ms
  nftnl_set_elem_add(s, e);
  // NLM_F_CREATE without NLM_F_EXCL: re-adding an element that exists is not an error
  // (it does not refresh its timeout either: see the memo).
  nftnl_set_elems_nlmsg_build_payload(b.Hdr(NFT_MSG_NEWSETELEM, NLM_F_CREATE), s);
  b.Next();
  nftnl_set_free(s);
  return b.Commit();
}

static bool Add(const std::string& mode, int id) {
  if (mode == "exec") return RunExec(AddText(id));
  if (mode == "lib") return RunLib(AddText(id));
  return NlAdd(id);
}
static bool Del(const std::string& mode, int id) {
  if (mode == "exec") return RunExec(DelText(id));
  if (mode == "lib") return RunLib(DelText(id));
  return NlDel(id);
}
static bool Pin(const std::string& mode, int id, int k) {
  if (mode == "exec") return RunExec(PinText(id, k));
  if (mode == "lib") return RunLib(PinText(id, k));
  return NlPin(id, k);
}

static void Report(const char* what, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  printf("%-6s n=%zu median=%8.1f us  p90=%8.1f us  min=%8.1f us\n", what, v.size(), v[v.size() / 2],
         v[v.size() * 9 / 10], v[0]);
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: nftbench exec|lib|nl ITER PREFILL\n");
    return 2;
  }
  const std::string mode = argv[1];
  const int iter = atoi(argv[2]), prefill = atoi(argv[3]);
  g_ctx = nft_ctx_new(NFT_CTX_DEFAULT);
  nft_ctx_buffer_output(g_ctx);
  nft_ctx_buffer_error(g_ctx);
  g_nl = mnl_socket_open(NETLINK_NETFILTER);
  mnl_socket_bind(g_nl, 0, MNL_SOCKET_AUTOPID);
  g_portid = mnl_socket_get_portid(g_nl);
  g_seq = (uint32_t)time(nullptr);

  // Other sandboxes already present (added with the fast path, not timed).
  for (int i = 0; i < prefill; i++)
    if (!NlAdd(10000 + i)) return 1;

  std::vector<double> add, del, pin;
  for (int i = 0; i < iter; i++) {
    const int id = 1 + i;
    double t0 = NowUs();
    if (!Add(mode, id)) { fprintf(stderr, "add %d failed\n", id); return 1; }
    double t1 = NowUs();
    if (!Pin(mode, id, i)) { fprintf(stderr, "pin %d failed\n", id); return 1; }
    double t2 = NowUs();
    if (!Del(mode, id)) { fprintf(stderr, "del %d failed\n", id); return 1; }
    double t3 = NowUs();
    add.push_back(t1 - t0);
    pin.push_back(t2 - t1);
    del.push_back(t3 - t2);
  }
  printf("mode=%s prefill=%d\n", mode.c_str(), prefill);
  Report("add", add);
  Report("pin", pin);
  Report("remove", del);
  if (!getenv("KEEP")) for (int i = 0; i < prefill; i++) NlDel(10000 + i);
  nft_ctx_free(g_ctx);
  mnl_socket_close(g_nl);
  return 0;
}
