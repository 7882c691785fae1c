// Figure 9: sandboxes with egress, in a network namespace of the bench's own.
#include <algorithm>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "bench.h"

namespace sandstream::bench {

namespace {

// The stub upstream DNS (kStubDnsAddress) answers every A query with kStubAnswer.
constexpr uint32_t kStubAnswer = 0xc6120001;  // 198.18.0.1, inside the policy's CIDR
constexpr const char* kEgressName = "pypi.org";

// Figure 9c's lookups, timed in the interpreter: `python3 -c SCRIPT NAME ADDRESS N` prints the
// nanoseconds of 5 warm-ups and N more getaddrinfo calls, each checked against ADDRESS ("-":
// the name must not resolve).
constexpr const char* kLookups = R"(import socket, sys, time
name, expected, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = []
for i in range(5 + n):
    t0 = time.perf_counter_ns()
    try:
        addr = socket.getaddrinfo(name, 80, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except socket.gaierror as e:
        addr = "-" if e.errno == socket.EAI_NONAME else "error %d" % e.errno
    t1 = time.perf_counter_ns()
    if addr != expected:
        sys.exit(name + " resolved to " + addr)
    out.append(t1 - t0)
print(" ".join(map(str, out)))
)";

}  // namespace

// 9: sandboxes with egress. Their daemon turns forwarding on and loads nftables tables in its
// network namespace, so it runs in one the bench makes (RunInPrivateNetns), with `lo` only and
// a stub upstream DNS on it; the baseline is a plain (loopback) sandbox on the same daemon.
void Bench::Egress() {
  if (options_.runtime != "namespace") {
    Detail("9", "not measured: egress needs the namespace runtime");
    return;
  }
  RunInPrivateNetns([&] { EgressInPrivateNetns(); });
}

void Bench::EgressInPrivateNetns() {
  StubDns upstream(kStubDnsAddress, kStubAnswer);
  Daemon daemon(egress_daemon_options_, cgroups_);
  try {
    EgressFigures(daemon, upstream);
  } catch (const std::exception& e) {
    if (daemon.Alive()) throw;
    throw BenchError(std::string(e.what()) +
                     "; sandstreamd exited, its log ends: " + daemon.LogTail(800));
  }
}

void Bench::EgressFigures(Daemon& daemon, const StubDns& upstream) {
  const int n = options_.quick ? 10 : 100;
  HttpClient http(daemon.port(), kApiKey);
  const std::string egress_body =
      R"({"network":{"egress":{"allow":["198.18.0.0/15",")" + std::string(kEgressName) + R"("]}}})";
  // Create + exec `echo hi` (*run_ms), then delete (*delete_ms); the daemon's CPU to *cpu.
  auto create_echo_delete = [&](const std::string& body, double* run_ms, double* delete_ms,
                                double* cpu) {
    const double c0 = ProcessCpuSeconds(daemon.pid());
    const int64_t t0 = MonotonicNs();
    const std::string sb =
        StringField(ParseObject(http.Expect(201, "POST", "/v1/sandboxes", body)), "id");
    const std::string res =
        http.Expect(200, "POST", "/v1/sandboxes/" + sb + "/exec", R"({"cmd":"echo hi"})");
    const int64_t t1 = MonotonicNs();
    http.Expect(204, "DELETE", "/v1/sandboxes/" + sb);
    const int64_t t2 = MonotonicNs();
    *cpu += ProcessCpuSeconds(daemon.pid()) - c0;
    if (StringField(ParseObject(res), "stdout") != "hi\n") {
      throw BenchError("echo hi answered " + res);
    }
    *run_ms = static_cast<double>(t1 - t0) / 1e6;
    *delete_ms = static_cast<double>(t2 - t1) / 1e6;
  };
  // In blocks of two of a kind, only the second timed: a sandbox's network namespace is
  // torn down by the kernel after its DELETE has returned (an egress one's veth takes
  // longest), and the next create, of either kind, waits on that. Timing only creates that
  // follow their own kind, as in a loop of figure 4, keeps one kind's tail off the other's
  // figure; the first of each block, which follows the other kind, goes to a detail line.
  Samples egress, egress_delete, plain, plain_delete, egress_after_plain, plain_after_egress;
  double egress_cpu = 0, plain_cpu = 0, first_ms = 0;
  for (int i = -2; i < n; ++i) {  // the first egress run also loads the shared table
    for (const bool with_egress : {true, false}) {
      for (int k = 0; k < 2; ++k) {
        double run_ms = 0, delete_ms = 0, untimed_cpu = 0;
        double* cpu = i < 0 || k == 0 ? &untimed_cpu : with_egress ? &egress_cpu : &plain_cpu;
        create_echo_delete(with_egress ? egress_body : "{}", &run_ms, &delete_ms, cpu);
        if (i == -2 && k == 0 && with_egress) first_ms = run_ms;
        if (i < 0) continue;
        if (k == 0) {
          (with_egress ? egress_after_plain : plain_after_egress).Add(run_ms);
        } else {
          (with_egress ? egress : plain).Add(run_ms);
          (with_egress ? egress_delete : plain_delete).Add(delete_ms);
        }
      }
    }
  }
  rows_.push_back({"9a. POST /sandboxes with egress + POST exec `echo hi` -> output",
                   Ms(egress.P(.5)) + " (" + Ms(egress.P(.9)) + ")",
                   "the same, a plain (loopback) sandbox, same daemon", Ms(plain.P(.5)),
                   Ratio(egress.P(.5), plain.P(.5)), "p50 <= 15 ms" + Met(egress.P(.5) <= 15)});
  rows_.push_back({"9b. DELETE /sandboxes/{id} with egress",
                   Ms(egress_delete.P(.5)) + " (" + Ms(egress_delete.P(.9)) + ")",
                   "DELETE of the plain sandbox", Ms(plain_delete.P(.5)),
                   Ratio(egress_delete.P(.5), plain_delete.P(.5)), "-"});
  Detail("9", "the daemon in a network namespace of the bench's own (lo only, pool " +
                  std::string(kEgressPool) + "), policy allow 198.18.0.0/15 and " + kEgressName +
                  "; n=" + std::to_string(n) +
                  " of each, in blocks of two of a kind, the second timed; egress "
                  "p10/p50/p90/p99 " +
                  Dist(egress, Ms) + ", plain " + Dist(plain, Ms) + "; delete egress " +
                  Dist(egress_delete, Ms) + ", plain " + Dist(plain_delete, Ms) +
                  "; right after a delete of the other kind: egress " +
                  Dist(egress_after_plain, Ms) + ", plain " + Dist(plain_after_egress, Ms) +
                  "; the first egress create+exec (loads the shared table, turns forwarding "
                  "on) " +
                  Ms(first_ms) + "; daemon CPU per create+exec+delete egress " +
                  Ms(egress_cpu * 1e3 / n) + ", plain " + Ms(plain_cpu * 1e3 / n));
  DnsRoundTrip(http, egress_body, upstream);
}

// 9c: getaddrinfo in a sandbox with egress (its resolver forwards to the stub and pins the
// answer before it replies) against the same lookups by a host process whose resolv.conf
// names the stub, round by round; and, in the sandbox, a name its policy refuses (answered
// by the resolver itself). A sandbox per round keeps each within its resolver's burst.
void Bench::DnsRoundTrip(HttpClient& http, const std::string& egress_body,
                         const StubDns& upstream) {
  const int rounds = options_.quick ? 1 : 4;
  const int per_round = options_.quick ? 20 : 50;
  const std::string python = "/usr/bin/python3";  // the same binary in a sandbox
  auto lookups = [&](const char* name, const char* expected) {
    return std::vector<std::string>{python, "-c",     kLookups,
                                    name,   expected, std::to_string(per_round)};
  };
  // Adds the lookups after the warm-ups to *s (and the first, if asked, to *first); returns
  // how many were added to *s.
  auto add_all = [](const std::string& text, Samples* s, Samples* first = nullptr) {
    int count = -5;
    for (const char* p = text.c_str(); *p != '\0' && *p != '\n'; ++count) {
      char* end = nullptr;
      const double ns = std::strtod(p, &end);
      if (end == p) break;
      if (count == -5 && first != nullptr) first->Add(ns / 1e3);
      if (count >= 0) s->Add(ns / 1e3);
      p = end;
    }
    return static_cast<size_t>(std::max(count, 0));
  };
  auto in_sandbox = [&](const std::string& sb, const std::vector<std::string>& argv, Samples* s,
                        Samples* first) {
    json::object req{{"argv", json::array(argv.begin(), argv.end())}};
    const json::object o = ParseObject(
        http.Expect(200, "POST", "/v1/sandboxes/" + sb + "/exec", json::serialize(req)));
    if (!ExitedZero(o) ||
        add_all(StringField(o, "stdout"), s, first) != static_cast<size_t>(per_round)) {
      throw BenchError("lookups in the sandbox answered " + json::serialize(o).substr(0, 400));
    }
  };
  const std::string resolv_conf =
      "nameserver " + std::string(kStubDnsAddress) + "\noptions ndots:1 timeout:2 attempts:2\n";
  const std::string allowed_address = "198.18.0.1";  // kStubAnswer
  const uint64_t answered0 = upstream.answered();
  Samples via_resolver, direct, refused, cold, direct_cold;
  for (int r = 0; r < rounds; ++r) {
    const std::string sb =
        StringField(ParseObject(http.Expect(201, "POST", "/v1/sandboxes", egress_body)), "id");
    in_sandbox(sb, lookups(kEgressName, allowed_address.c_str()), &via_resolver, &cold);
    const std::string out =
        RunWithResolvConf(resolv_conf, lookups(kEgressName, allowed_address.c_str()));
    if (add_all(out, &direct, &direct_cold) != static_cast<size_t>(per_round)) {
      throw BenchError("lookups on the host printed " + out.substr(0, 400));
    }
    in_sandbox(sb, lookups("refused.example", "-"), &refused, nullptr);
    http.Expect(204, "DELETE", "/v1/sandboxes/" + sb);
  }
  const uint64_t answered = upstream.answered() - answered0;
  rows_.push_back(
      {"9c. DNS: getaddrinfo of an allowed name in a sandbox with egress (its "
       "resolver: forward, pin, reply)",
       Us(via_resolver.P(.5)) + " (" + Us(via_resolver.P(.9)) + ")",
       "the same lookups on the host, straight to the upstream", Us(direct.P(.5)),
       Ratio(via_resolver.P(.5), direct.P(.5)), "-"});
  Detail("9c", std::to_string(rounds) + " round(s), a new sandbox each, of " +
                   std::to_string(per_round) +
                   " sequential lookups (after 5 warm-ups) each way, interleaved, timed in "
                   "python3; upstream: a stub DNS in the bench on " +
                   kStubDnsAddress +
                   " (no veth between it and the host's lookups); "
                   "p10/p50/p90/p99 via the resolver " +
                   Dist(via_resolver, Us) + ", direct " + Dist(direct, Us) +
                   "; a name the policy refuses (NXDOMAIN from the resolver itself: the "
                   "sandbox's veth and the event loop, no upstream, no pin) " +
                   Dist(refused, Us) + "; a new sandbox's first lookup (its pin made) p50 " +
                   Ms(cold.P(.5) / 1e3) + ", max " + Ms(cold.P(1) / 1e3) +
                   " (the host process's first, direct: p50 " + Ms(direct_cold.P(.5) / 1e3) +
                   "); the stub answered " + std::to_string(answered) + " queries for the " +
                   std::to_string(2 * rounds * (per_round + 5)) +
                   " lookups of the allowed name (both sides, warm-ups included)");
}

}  // namespace sandstream::bench
