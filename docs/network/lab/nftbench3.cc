// nftbench3: the recommended shape. Each sandbox gets its own `table netdev ss_<id>` whose one
// base chain hooks ingress on the sandbox's host-side veth: it classifies each packet from the
// sandbox into a mark (resolver / explicit / world); the shared `table inet sandstream`
// (sandstream.nft) accepts or rejects by mark, with conntrack. No jumps between tables, so a
// commit validates only the sandbox's own table; removal is one DELTABLE.
//
// Usage: nftbench3 MODE ITER PREFILL   (MODE = exec | lib | nl)
//   The host-side devices ss-<id> must exist (ids 1..ITER and 10000..10000+PREFILL-1).
//   nftbench3 apply ID ADDR GW ALLOW_CIDRS DENY_CIDRS ALLOWPRIV_CIDRS  (one table, via nl; CIDRs
//   comma-separated or "-"), used by the topology test.
//   nftbench3 pin ID ADDR SECONDS
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
#include <linux/if_ether.h>
#include <nftables/libnftables.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;
static uint32_t g_family = NFPROTO_NETDEV;
static std::string g_table;

#include "nl_helpers.inc"

// Mark bits owned by sandstream (configurable in the real daemon).
constexpr uint32_t kMask = 0x0f000000, kExplicit = 0x01000000, kResolver = 0x02000000, kWorld = 0x04000000;

static double NowUs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}
static std::string Dotted(uint32_t host) {
  return std::to_string(host >> 24) + "." + std::to_string((host >> 16) & 255) + "." +
         std::to_string((host >> 8) & 255) + "." + std::to_string(host & 255);
}
static uint32_t ParseIp(const std::string& s) {
  in_addr a{};
  inet_pton(AF_INET, s.c_str(), &a);
  return ntohl(a.s_addr);
}
static std::vector<Cidr> ParseCidrs(const std::string& s) {
  std::vector<Cidr> v;
  if (s == "-" || s.empty()) return v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto slash = item.find('/');
    v.push_back({ParseIp(item.substr(0, slash)), slash == std::string::npos ? 32u : (uint32_t)std::stoi(item.substr(slash + 1))});
  }
  return v;
}
static const std::vector<Cidr> kNever = ParseCidrs(
    "0.0.0.0/8,10.0.0.0/8,100.64.0.0/10,127.0.0.0/8,169.254.0.0/16,172.16.0.0/12,192.0.0.0/24,192.168.0.0/16,224.0.0.0/3");

struct Policy {
  uint32_t addr, gw;  // host order
  std::vector<Cidr> allow, deny, allowpriv;
};

// ---------- text form ----------
static std::string CidrText(const std::vector<Cidr>& v) {
  std::string s;
  for (auto c : v) s += (s.empty() ? "" : ", ") + Dotted(c.a) + "/" + std::to_string(c.plen);
  return s;
}
static std::string SetText(const std::string& t, const char* name, const std::vector<Cidr>& v) {
  std::string s = "add set " + t + " " + name + " { type ipv4_addr; flags interval; ";
  if (!v.empty()) s += "elements = { " + CidrText(v) + " } ";
  return s + "}\n";
}
static std::string Hex(uint32_t x) {
  char b[16];
  snprintf(b, sizeof b, "0x%08x", x);
  return b;
}
static std::string AddText(int id, const Policy& p) {
  const std::string t = "netdev ss_" + std::to_string(id), c = "add rule " + t + " from_sandbox ";
  const std::string A = Dotted(p.addr), G = Dotted(p.gw);
  std::string b = "add table " + t + "\n";
  b += SetText(t, "allow4", p.allow) + SetText(t, "allowpriv4", p.allowpriv) + SetText(t, "deny4", p.deny) +
       SetText(t, "never4", kNever);
  b += "add set " + t + " dns4 { type ipv4_addr; flags timeout; }\n";
  b += "add chain " + t + " from_sandbox { type filter hook ingress device \"ss-" + std::to_string(id) +
       "\" priority 0; policy accept; }\n";
  b += c + "meta mark set meta mark & " + Hex(~kMask) + "\n";
  b += c + "meta protocol arp accept\n";
  b += c + "meta protocol != ip drop\n";
  b += c + "ip saddr != " + A + " drop\n";
  b += c + "ip daddr " + G + " udp dport 53 meta mark set meta mark | " + Hex(kResolver) + " accept\n";
  b += c + "ip daddr " + G + " tcp dport 53 meta mark set meta mark | " + Hex(kResolver) + " accept\n";
  b += c + "ip daddr @deny4 accept\n";
  b += c + "ip daddr @allowpriv4 meta mark set meta mark | " + Hex(kExplicit) + " accept\n";
  b += c + "ip daddr @never4 accept\n";
  b += c + "ip daddr @allow4 meta mark set meta mark | " + Hex(kWorld) + " accept\n";
  b += c + "ip daddr @dns4 meta mark set meta mark | " + Hex(kWorld) + " accept\n";
  return b;
}
static std::string DelText(int id) { return "delete table netdev ss_" + std::to_string(id) + "\n"; }
static std::string PinText(int id, uint32_t ip, int secs) {
  return "add element netdev ss_" + std::to_string(id) + " dns4 { " + Dotted(ip) + " timeout " +
         std::to_string(secs) + "s }\n";
}

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
static nft_ctx* g_ctx;
static bool RunLib(const std::string& text) {
  const int rc = nft_run_cmd_from_buffer(g_ctx, text.c_str());
  if (rc != 0) fprintf(stderr, "lib: %s", nft_ctx_get_error_buffer(g_ctx));
  return rc == 0;
}

// ---------- netlink form ----------
// mark = (mark & and_mask) ^ xor_bits, through reg 1: load, bitwise, set.
static std::vector<nftnl_expr*> SetMark(uint32_t and_mask, uint32_t xor_bits) {
  auto* load = nftnl_expr_alloc("meta");
  nftnl_expr_set_u32(load, NFTNL_EXPR_META_KEY, NFT_META_MARK);
  nftnl_expr_set_u32(load, NFTNL_EXPR_META_DREG, NFT_REG_1);
  auto* bw = nftnl_expr_alloc("bitwise");
  nftnl_expr_set_u32(bw, NFTNL_EXPR_BITWISE_SREG, NFT_REG_1);
  nftnl_expr_set_u32(bw, NFTNL_EXPR_BITWISE_DREG, NFT_REG_1);
  nftnl_expr_set_u32(bw, NFTNL_EXPR_BITWISE_LEN, 4);
  nftnl_expr_set(bw, NFTNL_EXPR_BITWISE_MASK, &and_mask, 4);  // host order: meta mark is host order
  nftnl_expr_set(bw, NFTNL_EXPR_BITWISE_XOR, &xor_bits, 4);
  auto* set = nftnl_expr_alloc("meta");
  nftnl_expr_set_u32(set, NFTNL_EXPR_META_KEY, NFT_META_MARK);
  nftnl_expr_set_u32(set, NFTNL_EXPR_META_SREG, NFT_REG_1);
  return {load, bw, set};
}
static std::vector<nftnl_expr*> Cat(std::initializer_list<std::vector<nftnl_expr*>> parts) {
  std::vector<nftnl_expr*> out;
  for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

static bool NlAdd(int id, const Policy& p) {
  g_table = "ss_" + std::to_string(id);
  Batch b;
  {
    auto* t = nftnl_table_alloc();
    nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, g_family);
    nftnl_table_set_str(t, NFTNL_TABLE_NAME, g_table.c_str());
    nftnl_table_nlmsg_build_payload(b.Hdr(NFT_MSG_NEWTABLE, NLM_F_CREATE), t);
    b.Next();
    nftnl_table_free(t);
  }
  const uint32_t allow = AddSet(b, "allow4", true, false, p.allow);
  const uint32_t allowpriv = AddSet(b, "allowpriv4", true, false, p.allowpriv);
  const uint32_t deny = AddSet(b, "deny4", true, false, p.deny);
  const uint32_t never = AddSet(b, "never4", true, false, kNever);
  const uint32_t dns = AddSet(b, "dns4", false, true, {});
  if (getenv("SETSONLY")) return b.Commit();
  {
    auto* c = nftnl_chain_alloc();
    nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, g_family);
    nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, g_table.c_str());
    nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, "from_sandbox");
    const std::string dev = "ss-" + std::to_string(id);
    if (!getenv("NOHOOK")) {
      nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, NF_NETDEV_INGRESS);
      nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, 0);
      nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, "filter");
      nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, NF_ACCEPT);
      nftnl_chain_set_str(c, NFTNL_CHAIN_DEV, dev.c_str());
    }
    nftnl_chain_nlmsg_build_payload(b.Hdr(NFT_MSG_NEWCHAIN, NLM_F_CREATE), c);
    b.Next();
    nftnl_chain_free(c);
  }
  const std::string ch = "from_sandbox";
  const uint16_t arp = htons(ETH_P_ARP), ip = htons(ETH_P_IP), p53 = htons(53);
  const uint32_t A = htonl(p.addr), G = htonl(p.gw);
  const uint8_t udp = IPPROTO_UDP, tcp = IPPROTO_TCP;
  auto isip = [&] { return std::vector<nftnl_expr*>{Meta(NFT_META_PROTOCOL), Cmp(NFT_CMP_EQ, &ip, 2)}; };
  auto daddr = [] { return std::vector<nftnl_expr*>{Payload(NFT_PAYLOAD_NETWORK_HEADER, 16, 4)}; };
  AddRule(b, ch, SetMark(~kMask, 0));
  AddRule(b, ch, {Meta(NFT_META_PROTOCOL), Cmp(NFT_CMP_EQ, &arp, 2), Verdict(NF_ACCEPT)});
  AddRule(b, ch, {Meta(NFT_META_PROTOCOL), Cmp(NFT_CMP_NEQ, &ip, 2), Verdict(NF_DROP)});
  AddRule(b, ch, Cat({isip(), {Payload(NFT_PAYLOAD_NETWORK_HEADER, 12, 4), Cmp(NFT_CMP_NEQ, &A, 4), Verdict(NF_DROP)}}));
  for (uint8_t proto : {udp, tcp})
    AddRule(b, ch, Cat({isip(), daddr(), {Cmp(NFT_CMP_EQ, &G, 4), Meta(NFT_META_L4PROTO), Cmp(NFT_CMP_EQ, &proto, 1),
                                           Payload(NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2), Cmp(NFT_CMP_EQ, &p53, 2)},
                        SetMark(~kResolver, kResolver), {Verdict(NF_ACCEPT)}}));
  AddRule(b, ch, Cat({isip(), daddr(), {Lookup("deny4", deny), Verdict(NF_ACCEPT)}}));
  AddRule(b, ch, Cat({isip(), daddr(), {Lookup("allowpriv4", allowpriv)}, SetMark(~kExplicit, kExplicit), {Verdict(NF_ACCEPT)}}));
  AddRule(b, ch, Cat({isip(), daddr(), {Lookup("never4", never), Verdict(NF_ACCEPT)}}));
  AddRule(b, ch, Cat({isip(), daddr(), {Lookup("allow4", allow)}, SetMark(~kWorld, kWorld), {Verdict(NF_ACCEPT)}}));
  AddRule(b, ch, Cat({isip(), daddr(), {Lookup("dns4", dns)}, SetMark(~kWorld, kWorld), {Verdict(NF_ACCEPT)}}));
  return b.Commit();
}
static bool NlDel(int id) {
  g_table = "ss_" + std::to_string(id);
  Batch b;
  auto* t = nftnl_table_alloc();
  nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, g_family);
  nftnl_table_set_str(t, NFTNL_TABLE_NAME, g_table.c_str());
  nftnl_table_nlmsg_build_payload(b.Hdr(NFT_MSG_DELTABLE, 0), t);
  b.Next();
  nftnl_table_free(t);
  return b.Commit();
}
static bool NlPin(int id, uint32_t ipaddr, int secs) {
  g_table = "ss_" + std::to_string(id);
  Batch b;
  auto* s = nftnl_set_alloc();
  nftnl_set_set_u32(s, NFTNL_SET_FAMILY, g_family);
  nftnl_set_set_str(s, NFTNL_SET_TABLE, g_table.c_str());
  nftnl_set_set_str(s, NFTNL_SET_NAME, "dns4");
  auto* e = nftnl_set_elem_alloc();
  const uint32_t a = htonl(ipaddr);
  nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, &a, 4);
  nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_TIMEOUT, (uint64_t)secs * 1000);
  nftnl_set_elem_add(s, e);
  nftnl_set_elems_nlmsg_build_payload(b.Hdr(NFT_MSG_NEWSETELEM, NLM_F_CREATE), s);
  b.Next();
  nftnl_set_free(s);
  return b.Commit();
}

static Policy BenchPolicy(int id) {
  return {(10u << 24) | (200u << 16) | (uint32_t)(2 * id + 1), (10u << 24) | (200u << 16) | (uint32_t)(2 * id),
          ParseCidrs("198.18.0.0/15,203.0.113.0/24"), ParseCidrs("198.18.3.0/24"), {}};
}
static void Report(const char* what, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  printf("%-7s n=%zu median=%8.1f us  p90=%8.1f us  min=%8.1f us\n", what, v.size(), v[v.size() / 2],
         v[v.size() * 9 / 10], v[0]);
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const std::string mode = argv[1];
  g_ctx = nft_ctx_new(NFT_CTX_DEFAULT);
  nft_ctx_buffer_output(g_ctx);
  nft_ctx_buffer_error(g_ctx);
  g_nl = mnl_socket_open(NETLINK_NETFILTER);
  mnl_socket_bind(g_nl, 0, MNL_SOCKET_AUTOPID);
  g_seq = (uint32_t)time(nullptr);
  if (mode == "apply" && argc == 8) {
    Policy p{ParseIp(argv[3]), ParseIp(argv[4]), ParseCidrs(argv[5]), ParseCidrs(argv[6]), ParseCidrs(argv[7])};
    return NlAdd(atoi(argv[2]), p) ? 0 : 1;
  }
  if (mode == "text" && argc == 8) {  // print the same table as nft text
    Policy p{ParseIp(argv[3]), ParseIp(argv[4]), ParseCidrs(argv[5]), ParseCidrs(argv[6]), ParseCidrs(argv[7])};
    fputs(AddText(atoi(argv[2]), p).c_str(), stdout);
    return 0;
  }
  if (mode == "pin" && argc == 5) return NlPin(atoi(argv[2]), ParseIp(argv[3]), atoi(argv[4])) ? 0 : 1;
  if (mode == "remove" && argc == 3) return NlDel(atoi(argv[2])) ? 0 : 1;
  if (argc < 4) return 2;
  const int iter = atoi(argv[2]), prefill = atoi(argv[3]);
  for (int i = 0; i < prefill; i++) {
    if (!NlAdd(10000 + i, BenchPolicy(10000 + i))) return 1;
    for (int k = 0; k < 4; k++) NlPin(10000 + i, (198u << 24) | (51u << 16) | (100u << 8) | k, 300);
  }
  std::vector<double> add, pin, del;
  for (int i = 0; i < iter; i++) {
    const int id = 1 + i;
    const Policy p = BenchPolicy(id);
    const uint32_t ipaddr = (198u << 24) | (51u << 16) | (100u << 8) | (uint32_t)(i % 250);
    double t0 = NowUs();
    bool ok = mode == "exec" ? RunExec(AddText(id, p)) : mode == "lib" ? RunLib(AddText(id, p)) : NlAdd(id, p);
    double t1 = NowUs();
    ok = ok && (mode == "exec" ? RunExec(PinText(id, ipaddr, 60)) : mode == "lib" ? RunLib(PinText(id, ipaddr, 60)) : NlPin(id, ipaddr, 60));
    double t2 = NowUs();
    ok = ok && (mode == "exec" ? RunExec(DelText(id)) : mode == "lib" ? RunLib(DelText(id)) : NlDel(id));
    double t3 = NowUs();
    if (!ok) {
      fprintf(stderr, "iteration %d failed\n", i);
      return 1;
    }
    add.push_back(t1 - t0);
    pin.push_back(t2 - t1);
    del.push_back(t3 - t2);
  }
  printf("mode=%s prefill=%d\n", mode.c_str(), prefill);
  Report("add", add);
  Report("pin", pin);
  Report("remove", del);
  if (!getenv("KEEP"))
    for (int i = 0; i < prefill; i++) NlDel(10000 + i);
  return 0;
}

// For vethbench's combined mode (built with -Dmain=nftbench3_main): one sandbox's table.
bool SandboxTableAdd(int id, uint32_t addr_host, uint32_t gw_host) {
  if (!g_nl) {
    g_nl = mnl_socket_open(NETLINK_NETFILTER);
    mnl_socket_bind(g_nl, 0, MNL_SOCKET_AUTOPID);
    g_seq = (uint32_t)time(nullptr);
  }
  Policy p = BenchPolicy(id);
  p.addr = addr_host;
  p.gw = gw_host;
  return NlAdd(id, p);
}
bool SandboxTableDel(int id) { return NlDel(id); }
