// Figure 11: three nodes behind one gateway: a request and a stream through it against the
// node directly, its placement, and a tenant's create with quotas counted in etcd (11d).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench.h"

namespace sandstream::bench {

// Three nodes behind one gateway on this machine (the gateway reads its nodes' /healthz; with
// etcd it reads the same records from there): what a request and a stream cost through the
// gateway against the node directly, and how evenly it places.
void Bench::Gateway() {
  const int exec_runs = options_.quick ? 60 : 400;
  const uint64_t bytes = options_.quick ? 64ull << 20 : 1ull << 30;
  const int repeats = options_.quick ? 1 : 3;
  const int placements = options_.quick ? 60 : 1000;
  std::vector<std::unique_ptr<Daemon>> nodes;
  std::string addresses;
  for (int i = 1; i <= 3; ++i) {
    DaemonOptions o = daemon_options_;
    o.extra_args.insert(o.extra_args.end(), {"--node-id", "n" + std::to_string(i)});
    nodes.push_back(std::make_unique<Daemon>(o, cgroups_));
    addresses +=
        (i > 1 ? "," : "") + std::string("127.0.0.1:") + std::to_string(nodes.back()->port());
  }
  DaemonOptions o = daemon_options_;
  o.extra_args.insert(o.extra_args.end(), {"--role", "gateway", "--gateway-nodes", addresses});
  Daemon gateway(o, cgroups_);
  HttpClient via(gateway.port(), kApiKey);
  const int64_t deadline = MonotonicNs() + 10'000'000'000;
  for (;;) {
    const json::object health = ParseObject(via.Expect(200, "GET", "/healthz"));
    int up = 0;
    for (const json::value& n : health.at("nodes").as_array()) up += n.at("up").as_bool();
    if (up == 3) break;
    if (MonotonicNs() > deadline) throw BenchError("the gateway did not see its 3 nodes up");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // The node a sandbox id names: sb_n{i}_{hex}.
  auto node_of = [&](const std::string& id) -> size_t {
    if (id.size() < 5 || id.compare(0, 4, "sb_n") != 0 || id[4] < '1' || id[4] > '3')
      throw BenchError("a sandbox id naming no node of the bench: " + id);
    return static_cast<size_t>(id[4] - '1');
  };
  auto create = [&] { return CreateVia(via); };

  // 11a: the same exec through the gateway and to the node directly, each on a kept-alive
  // connection, as a client has it (the gateway keeps one when the answer has a length).
  const std::string sb = create();
  const Daemon& home = *nodes[node_of(sb)];
  HttpClient direct(home.port(), kApiKey);
  const std::string path = "/v1/sandboxes/" + sb + "/exec";
  const std::string body = R"({"cmd":"echo hi"})";
  Samples through, kept, fresh;
  const double gateway_cpu0 = ProcessCpuSeconds(gateway.pid());
  for (int i = -5; i < exec_runs; ++i) {
    auto timed = [&](HttpClient& c) {
      const int64_t t0 = MonotonicNs();
      const std::string res = c.Expect(200, "POST", path, body);
      const double ms = static_cast<double>(MonotonicNs() - t0) / 1e6;
      if (StringField(ParseObject(res), "stdout") != "hi\n")
        throw BenchError("exec answered " + res);
      return ms;
    };
    const double a = timed(via), b = timed(direct);
    HttpClient once(home.port(), kApiKey);
    const double c = timed(once);
    if (i < 0) continue;
    through.Add(a);
    kept.Add(b);
    fresh.Add(c);
  }
  const double gateway_cpu_ms =
      (ProcessCpuSeconds(gateway.pid()) - gateway_cpu0) * 1e3 / (exec_runs + 5);
  DeleteVia(via, sb);
  rows_.push_back(
      {"11a. exec `echo hi` through a gateway", Ms(through.P(.5)) + " (" + Ms(through.P(.9)) + ")",
       "the node directly, kept-alive connection", Ms(kept.P(.5)), Ratio(through.P(.5), kept.P(.5)),
       "p50 <= direct + 0.3 ms" + Met(through.P(.5) <= kept.P(.5) + 0.3)});
  Detail("11a", "n=" + std::to_string(exec_runs) +
                    " interleaved; p10/p50/p90/p99 through the gateway " + Dist(through, Ms) +
                    ", direct kept alive " + Dist(kept, Ms) +
                    ", direct with a new connection each " + Dist(fresh, Ms) +
                    "; gateway CPU per exec " + Ms(gateway_cpu_ms));

  // 11b: one stream's throughput, through the gateway and directly, a sandbox per repeat.
  const std::string cmd = "head -c " + std::to_string(bytes) + " /dev/zero";
  Samples via_gibps, direct_gibps;
  // CPU seconds of the node (without its sandbox), the bench's client and the gateway, per path.
  struct Cpu {
    double node = 0, client = 0, gateway = 0;
  } direct_cpu, via_cpu;
  auto stream = [&](uint16_t port, const std::string& s, pid_t node, Cpu& cpu) {
    const double n0 = ProcessCpuSeconds(node), c0 = SelfCpuSeconds(),
                 g0 = ProcessCpuSeconds(gateway.pid());
    const double gibps = StreamOnce(port, s, cmd, "base64", bytes) / kGiB;
    cpu.node += ProcessCpuSeconds(node) - n0;
    cpu.client += SelfCpuSeconds() - c0;
    cpu.gateway += ProcessCpuSeconds(gateway.pid()) - g0;
    return gibps;
  };
  for (int r = 0; r < repeats; ++r) {
    const std::string s = create();
    const Daemon& node = *nodes[node_of(s)];
    direct_gibps.Add(stream(node.port(), s, node.pid(), direct_cpu));
    via_gibps.Add(stream(gateway.port(), s, node.pid(), via_cpu));
    DeleteVia(via, s);
  }
  rows_.push_back({"11b. one stream through a gateway, base64, head -c N /dev/zero",
                   Format("%.2f GiB/s", via_gibps.P(.5)) + Format(" (%.2f)", via_gibps.P(.1)),
                   "the same stream from the node directly",
                   Format("%.2f GiB/s", direct_gibps.P(.5)),
                   Ratio(via_gibps.P(.5), direct_gibps.P(.5)),
                   ">= 80% of direct" + Met(via_gibps.P(.5) >= 0.8 * direct_gibps.P(.5))});
  const double gib = static_cast<double>(bytes) * repeats / kGiB;
  auto per_gib = [gib](const Cpu& c) {
    return "node " + Format("%.2f", c.node / gib) + ", client " + Format("%.2f", c.client / gib) +
           ", gateway " + Format("%.2f", c.gateway / gib);
  };
  Detail("11b", "N=" + std::to_string(bytes >> 20) + " MiB, " + std::to_string(repeats) +
                    " run(s) each, interleaved; GiB/s p10/p50/p90/p99 through the gateway " +
                    Dist(via_gibps, Gib) + ", direct " + Dist(direct_gibps, Gib) +
                    "; CPU seconds per GiB of output, direct: " + per_gib(direct_cpu) +
                    "; through the gateway (it splices the node's SSE): " + per_gib(via_cpu));

  // 11c: placement: `placements` sandboxes created through the gateway, counted per node.
  std::vector<std::string> made;
  std::array<int, 3> per_node{};
  Samples create_ms;
  for (int i = 0; i < placements; ++i) {
    const int64_t t0 = MonotonicNs();
    made.push_back(create());
    create_ms.Add(static_cast<double>(MonotonicNs() - t0) / 1e6);
    ++per_node[node_of(made.back())];
  }
  for (const std::string& id : made) DeleteVia(via, id);
  const double even = placements / 3.0;
  double worst = 0;
  for (int n : per_node) worst = std::max(worst, std::abs(n - even) / even);
  rows_.push_back({"11c. " + std::to_string(placements) + " sandboxes placed over 3 nodes",
                   Format("%.1f%% off even", worst * 100), "even: a third each",
                   Format("%.0f", even), "-", "within 10% of even" + Met(worst <= 0.10)});
  Detail("11c", "per node " + std::to_string(per_node[0]) + "/" + std::to_string(per_node[1]) +
                    "/" + std::to_string(per_node[2]) +
                    " (two random nodes with room, the less loaded; load from each node's record, "
                    "read every second, plus what the gateway placed since); create through the "
                    "gateway p10/p50/p90/p99 " +
                    Dist(create_ms, Ms));
  TenantCreate();
}

// 11d: a tenant's create on a node that counts its quotas across the cluster in etcd (a
// read and a transaction before the sandbox is made) against the admin's on the same node,
// which counts nothing.
void Bench::TenantCreate() {
  const std::string label = "11d. create by a tenant, its quotas counted in etcd";
  if (EtcdServer::Binary().empty()) {
    rows_.push_back({label, "skipped: no etcd", "-", "-", "-", "-"});
    return;
  }
  const int runs = options_.quick ? 20 : 300;
  EtcdServer etcd;
  DaemonOptions o = daemon_options_;
  o.extra_args.insert(o.extra_args.end(), {"--node-id", "e1", "--etcd", etcd.url()});
  Daemon node(o, cgroups_);
  HttpClient admin(node.port(), kApiKey);
  admin.Expect(201, "POST", "/v1/admin/tenants",
               R"({"name":"bench","quotas":{"sandboxes":100000,"memory_mb":100000000}})");
  const std::string key =
      StringField(ParseObject(admin.Expect(201, "POST", "/v1/admin/tenants/bench/keys")), "key");
  HttpClient tenant(node.port(), key);
  Samples counted, plain;
  auto timed = [](HttpClient& c, Samples* into) {
    const int64_t t0 = MonotonicNs();
    const std::string id = CreateVia(c);
    if (into) into->Add(static_cast<double>(MonotonicNs() - t0) / 1e6);
    DeleteVia(c, id);
  };
  for (int i = -5; i < runs; ++i) {
    timed(tenant, i < 0 ? nullptr : &counted);
    timed(admin, i < 0 ? nullptr : &plain);
  }
  rows_.push_back({label, Ms(counted.P(.5)) + " (" + Ms(counted.P(.9)) + ")",
                   "the admin's create on the same node (nothing counted)", Ms(plain.P(.5)),
                   Ratio(counted.P(.5), plain.P(.5)), "measured"});
  Detail("11d", "n=" + std::to_string(runs) +
                    " interleaved, a delete after each; p10/p50/p90/p99 a tenant's " +
                    Dist(counted, Ms) + ", the admin's " + Dist(plain, Ms) +
                    " (etcd on loopback: its HTTP/JSON gateway, a range and a txn per create; "
                    "a delete publishes in the background)");
}

}  // namespace sandstream::bench
