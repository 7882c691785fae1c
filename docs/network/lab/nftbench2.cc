// nftbench2: the "shared sets" ruleset shape (base2.nft): one set of chains for all sandboxes,
// per-sandbox state only as set elements keyed by the sandbox's address. Measures adding and
// removing one sandbox (a handful of elements in one transaction) and pinning one DNS answer:
//   exec: `nft -f -`,  lib: libnftables,  nl: libnftnl + libmnl (elements only)
// Usage: nftbench2 MODE ITER PREFILL      (table inet ss2 from base2.nft must be loaded)
#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <libnftnl/common.h>
#include <libnftnl/set.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <nftables/libnftables.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
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
static std::string Ip(uint32_t host) {
  return std::to_string(host >> 24) + "." + std::to_string((host >> 16) & 255) + "." +
         std::to_string((host >> 8) & 255) + "." + std::to_string(host & 255);
}
static uint32_t AddrOf(int id) { return (10u << 24) | (200u << 16) | (uint32_t)(2 * id + 1); }
static uint32_t GwOf(int id) { return (10u << 24) | (200u << 16) | (uint32_t)(2 * id); }
static uint32_t P(const char* s) {
  in_addr a;
  inet_pton(AF_INET, s, &a);
  return ntohl(a.s_addr);
}
struct Cidr { uint32_t a; int plen; };
static const std::vector<Cidr> kAllow = {{P("198.18.0.0"), 15}, {P("203.0.113.0"), 24}};
static const std::vector<Cidr> kDeny = {{P("198.18.3.0"), 24}};

// ---------- text ----------
static std::string Elems(uint32_t a, const std::vector<Cidr>& v) {
  std::string s;
  for (auto c : v) s += (s.empty() ? "" : ", ") + Ip(a) + " . " + Ip(c.a) + "/" + std::to_string(c.plen);
  return s;
}
static std::string Text(int id, bool add) {
  const std::string verb = add ? "add" : "delete", t = " element inet ss2 ";
  const uint32_t a = AddrOf(id);
  std::string b;
  b += verb + t + "sbx4 { \"ss-" + std::to_string(id) + "\" . " + Ip(a) + " }\n";
  b += verb + t + "resolver4 { " + Ip(a) + " . " + Ip(GwOf(id)) + " }\n";
  b += verb + t + "allow4 { " + Elems(a, kAllow) + " }\n";
  b += verb + t + "deny4 { " + Elems(a, kDeny) + " }\n";
  return b;
}
static std::string PinText(int id, int k, bool add) {
  return std::string(add ? "add" : "delete") + " element inet ss2 dns4 { " + Ip(AddrOf(id)) + " . 198.51.100." +
         std::to_string(k % 250) + (add ? " timeout 60s" : "") + " }\n";
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

// ---------- netlink ----------
static mnl_socket* g_nl;
static uint32_t g_seq;

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
  // One message of elements for one set.
  void Elems(const char* set, bool add, const std::vector<nftnl_set_elem*>& elems) {
    auto* s = nftnl_set_alloc();
    nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
    nftnl_set_set_str(s, NFTNL_SET_TABLE, "ss2");
    nftnl_set_set_str(s, NFTNL_SET_NAME, set);
    for (auto* e : elems) nftnl_set_elem_add(s, e);
    msgs++;
    auto* nlh = nftnl_nlmsg_build_hdr((char*)mnl_nlmsg_batch_current(b),
                                      add ? NFT_MSG_NEWSETELEM : NFT_MSG_DELSETELEM, NFPROTO_INET,
                                      (add ? NLM_F_CREATE : 0) | NLM_F_ACK, g_seq++);
    nftnl_set_elems_nlmsg_build_payload(nlh, s);
    mnl_nlmsg_batch_next(b);
    nftnl_set_free(s);
  }
  bool Commit() {
    nftnl_batch_end((char*)mnl_nlmsg_batch_current(b), g_seq++);
    mnl_nlmsg_batch_next(b);
    if (mnl_socket_sendto(g_nl, mnl_nlmsg_batch_head(b), mnl_nlmsg_batch_size(b)) < 0) return false;
    char rbuf[MNL_SOCKET_BUFFER_SIZE];
    int acks = 0;
    bool ok = true;
    while (acks < msgs) {
      int n = mnl_socket_recvfrom(g_nl, rbuf, sizeof rbuf);
      if (n <= 0) return false;
      for (nlmsghdr* h = (nlmsghdr*)rbuf; mnl_nlmsg_ok(h, n); h = mnl_nlmsg_next(h, &n)) {
        if (h->nlmsg_type != NLMSG_ERROR) continue;
        auto* e = (nlmsgerr*)mnl_nlmsg_get_payload(h);
        if (e->error) {
          fprintf(stderr, "nl: %s\n", strerror(-e->error));
          ok = false;
        }
        acks++;
      }
    }
    return ok;
  }
};

static nftnl_set_elem* Elem(const void* key, size_t len, const void* key_end = nullptr, uint64_t timeout_ms = 0) {
  auto* e = nftnl_set_elem_alloc();
  nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, key, len);
  if (key_end) nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY_END, key_end, len);
  if (timeout_ms) nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_TIMEOUT, timeout_ms);
  return e;
}
// addr . range as the pipapo set wants it: key = addr . first, key_end = addr . last.
static std::vector<nftnl_set_elem*> Ranges(uint32_t a, const std::vector<Cidr>& v) {
  std::vector<nftnl_set_elem*> out;
  for (auto c : v) {
    const uint32_t first = c.a, last = c.a + (uint32_t)((1ull << (32 - c.plen)) - 1);
    uint32_t k[2] = {htonl(a), htonl(first)}, ke[2] = {htonl(a), htonl(last)};
    out.push_back(Elem(k, 8, ke));
  }
  return out;
}
static bool Nl(int id, bool add) {
  Batch b;
  const uint32_t a = AddrOf(id);
  char k1[20] = {};
  snprintf(k1, 16, "ss-%d", id);
  const uint32_t na = htonl(a);
  memcpy(k1 + 16, &na, 4);
  b.Elems("sbx4", add, {Elem(k1, 20)});
  uint32_t k2[2] = {na, htonl(GwOf(id))};
  b.Elems("resolver4", add, {Elem(k2, 8)});
  b.Elems("allow4", add, Ranges(a, kAllow));
  b.Elems("deny4", add, Ranges(a, kDeny));
  return b.Commit();
}
static bool NlPin(int id, int k, bool add) {
  Batch b;
  uint32_t key[2] = {htonl(AddrOf(id)), htonl(P("198.51.100.0") + (uint32_t)(k % 250))};
  b.Elems("dns4", add, {Elem(key, 8, nullptr, add ? 60000 : 0)});
  return b.Commit();
}

static bool Do(const std::string& m, int id, bool add) {
  if (m == "exec") return RunExec(Text(id, add));
  if (m == "lib") return RunLib(Text(id, add));
  return Nl(id, add);
}
static bool Pin(const std::string& m, int id, int k, bool add) {
  if (m == "exec") return RunExec(PinText(id, k, add));
  if (m == "lib") return RunLib(PinText(id, k, add));
  return NlPin(id, k, add);
}
static void Report(const char* what, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  printf("%-7s n=%zu median=%8.1f us  p90=%8.1f us  min=%8.1f us\n", what, v.size(), v[v.size() / 2],
         v[v.size() * 9 / 10], v[0]);
}

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  const std::string mode = argv[1];
  int iter = atoi(argv[2]);
  const int prefill = atoi(argv[3]);
  g_ctx = nft_ctx_new(NFT_CTX_DEFAULT);
  nft_ctx_buffer_output(g_ctx);
  nft_ctx_buffer_error(g_ctx);
  g_nl = mnl_socket_open(NETLINK_NETFILTER);
  mnl_socket_bind(g_nl, 0, MNL_SOCKET_AUTOPID);
  g_seq = (uint32_t)time(nullptr);
  for (int i = 0; i < prefill; i++) {
    if (!Nl(5000 + i, true)) return 1;
    for (int k = 0; k < 4; k++) NlPin(5000 + i, k, true);  // a few live DNS pins each
  }
  if (mode == "breakdown") {
    std::vector<double> h, al, de;
    for (int i = 0; i < iter; i++) {
      const int id = 1 + i;
      const uint32_t a = AddrOf(id), na = htonl(a);
      if (!Nl(id, true)) return 1;
      char k1[20] = {};
      snprintf(k1, 16, "ss-%d", id);
      memcpy(k1 + 16, &na, 4);
      uint32_t k2[2] = {na, htonl(GwOf(id))};
      double t0 = NowUs();
      { Batch b; b.Elems("sbx4", false, {Elem(k1, 20)}); b.Elems("resolver4", false, {Elem(k2, 8)}); if (!b.Commit()) return 1; }
      double t1 = NowUs();
      { Batch b; b.Elems("allow4", false, Ranges(a, kAllow)); if (!b.Commit()) return 1; }
      double t2 = NowUs();
      { Batch b; b.Elems("deny4", false, Ranges(a, kDeny)); if (!b.Commit()) return 1; }
      double t3 = NowUs();
      h.push_back(t1 - t0); al.push_back(t2 - t1); de.push_back(t3 - t2);
    }
    printf("breakdown prefill=%d\n", prefill);
    Report("hash2", h); Report("allow2", al); Report("deny1", de);
    // bulk: 50 sandboxes in one transaction each way
    Batch b;
    for (int i = 0; i < 50; i++) {
      const uint32_t a = AddrOf(20000 + i);
      b.Elems("allow4", true, Ranges(a, kAllow));
      b.Elems("deny4", true, Ranges(a, kDeny));
    }
    double t0 = NowUs();
    if (!b.Commit()) return 1;
    double t1 = NowUs();
    Batch d;
    for (int i = 0; i < 50; i++) {
      const uint32_t a = AddrOf(20000 + i);
      d.Elems("allow4", false, Ranges(a, kAllow));
      d.Elems("deny4", false, Ranges(a, kDeny));
    }
    double t2 = NowUs();
    if (!d.Commit()) return 1;
    double t3 = NowUs();
    printf("bulk50  add=%.1f us  remove=%.1f us\n", t1 - t0, t3 - t2);
    iter = 0;
  }
  std::vector<double> add, pin, unpin, del;
  for (int i = 0; i < iter; i++) {
    const int id = 1 + i;
    double t0 = NowUs();
    if (!Do(mode, id, true)) return 1;
    double t1 = NowUs();
    if (!Pin(mode, id, i, true)) return 1;
    double t2 = NowUs();
    if (!Pin(mode, id, i, false)) return 1;
    double t3 = NowUs();
    if (!Do(mode, id, false)) return 1;
    double t4 = NowUs();
    add.push_back(t1 - t0);
    pin.push_back(t2 - t1);
    unpin.push_back(t3 - t2);
    del.push_back(t4 - t3);
  }
  if (iter > 0) {
  printf("mode=%s prefill=%d\n", mode.c_str(), prefill);
  Report("add", add);
  Report("pin", pin);
  Report("unpin", unpin);
  Report("remove", del);
  }
  if (!getenv("KEEP"))
    for (int i = 0; i < prefill; i++) {
      for (int k = 0; k < 4; k++) NlPin(5000 + i, k, false);
      Nl(5000 + i, false);
    }
  return 0;
}
