// Figure 8: a server in a sandbox reached through an exposed port, against a direct connection.
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "bench.h"

namespace sandstream::bench {

namespace {

// Figure 8's server, run in a sandbox as `python3 -c SERVER PORT MARKER`: GET /bytes/N answers N
// bytes (Content-Length, written 1 MiB at a time), then the connection ends (the daemon asks
// for `Connection: close`, and so does the bench). Standard library only.
constexpr const char* kPortServer = R"(import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
BLOCK = memoryview(bytes(range(256)) * 4096)
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args):
        pass
    def do_GET(self):
        size = int(self.path.rsplit("/", 1)[1])
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        while size > 0:
            n = min(size, len(BLOCK))
            self.wfile.write(BLOCK[:n])
            size -= n
HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
)";

}  // namespace

// 8: a server in a sandbox reached through an exposed port (the path form), against the same
// GET on a direct loopback connection to that server from a socket in the sandbox's network
// namespace (made as the daemon makes its own): what the daemon's relay costs, and nothing
// else. Run by run interleaved; the bench's HTTP client keeps nothing it reads.
void Bench::ExposedPort() {
  const uint64_t bytes = options_.quick ? 32ull << 20 : 256ull << 20;
  const int repeats = options_.quick ? 2 : 5;
  const int small = options_.quick ? 50 : 500;
  constexpr int kWarmups = 2;
  constexpr uint16_t kPort = 8000;
  constexpr uint64_t kSmall = 2;
  const std::string marker = "sandstream-bench-port-" + std::to_string(::getpid());
  const std::string sb = CreateSandbox();
  const std::string base = "/v1/sandboxes/" + sb;
  const std::string port = std::to_string(kPort);
  json::object req{{"argv", json::array{"python3", "-c", kPortServer, port, marker}}};
  http_->Expect(201, "POST", base + "/processes", json::serialize(req));
  http_->Expect(200, "GET", base + "/ports/" + port + "/wait?timeout_seconds=30");
  http_->Expect(201, "POST", base + "/ports", "{\"port\":" + port + "}");
  // Sockets to the server for the direct GETs and for the bare relay's.
  const int direct_gets = 2 * repeats + small + 3 * kWarmups;
  std::vector<int> direct_fds =
      SocketsInNetns(FindProcessWithArg(marker), static_cast<size_t>(direct_gets));
  size_t next_direct = 0;

  const std::string proxied_head = "Host: 127.0.0.1\r\nAuthorization: Bearer " +
                                   std::string(kApiKey) + "\r\nConnection: close\r\n\r\n";
  const std::string direct_head = "Host: 127.0.0.1:" + port + "\r\nConnection: close\r\n\r\n";
  auto take_direct = [&] {
    const int fd = direct_fds.at(next_direct);
    direct_fds[next_direct++] = -1;
    return fd;
  };
  auto direct_request = [&](uint64_t size) {
    return "GET /bytes/" + std::to_string(size) + " HTTP/1.1\r\n" + direct_head;
  };
  // One GET of /bytes/size; returns its seconds, from connect() to the end of the body.
  auto get = [&](bool proxied, uint64_t size) {
    const std::string request = proxied ? "GET " + base + "/ports/" + port + "/bytes/" +
                                              std::to_string(size) + " HTTP/1.1\r\n" + proxied_head
                                        : direct_request(size);
    int fd = -1;
    if (proxied) {
      fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) throw BenchError("socket: " + std::string(std::strerror(errno)));
    } else {
      fd = take_direct();
    }
    uint64_t got = 0;
    const int64_t t0 = MonotonicNs();
    try {
      ConnectSocket(fd, proxied ? daemon_->port() : kPort);
      got = ExchangeToEof(fd, request, 200);
    } catch (...) {
      ::close(fd);
      throw;
    }
    const int64_t t1 = MonotonicNs();
    ::close(fd);
    if (got != size) {
      throw BenchError(std::string(proxied ? "through the daemon" : "direct") + ": " +
                       std::to_string(got) + " bytes of " + std::to_string(size));
    }
    return static_cast<double>(t1 - t0) / 1e9;
  };

  Samples through, direct, bare, through_ms, direct_ms;
  double daemon_cpu = 0;
  try {
    for (int i = -kWarmups; i < repeats; ++i) {
      const double d0 = ProcessCpuSeconds(daemon_->pid());
      const double via = get(true, bytes);
      const double cpu = ProcessCpuSeconds(daemon_->pid()) - d0;
      const double straight = get(false, bytes);
      const double relayed = BareRelayGet(take_direct(), kPort, direct_request(bytes), bytes);
      if (i < 0) continue;
      daemon_cpu += cpu;
      through.Add(static_cast<double>(bytes) / via / kGiB);
      direct.Add(static_cast<double>(bytes) / straight / kGiB);
      bare.Add(static_cast<double>(bytes) / relayed / kGiB);
    }
    for (int i = -kWarmups; i < small; ++i) {
      const double via = get(true, kSmall);
      const double straight = get(false, kSmall);
      if (i < 0) continue;
      through_ms.Add(via * 1e3);
      direct_ms.Add(straight * 1e3);
    }
  } catch (...) {
    for (int fd : direct_fds) {
      if (fd >= 0) ::close(fd);
    }
    throw;
  }
  DeleteSandbox(sb);

  const std::string mib = std::to_string(bytes >> 20);
  const std::string baseline = "the same GET, direct loopback TCP to the server";
  const double ratio = through.P(.5) / direct.P(.5);
  rows_.push_back({"8a. exposed port: GET of " + mib + " MiB from a server in the sandbox, " +
                       "through the daemon (path form)",
                   Format("%.2f GiB/s", through.P(.5)) + Format(" (%.2f)", through.P(.1)), baseline,
                   Format("%.2f GiB/s", direct.P(.5)), Ratio(through.P(.5), direct.P(.5)),
                   ">= 80% of direct" + Met(ratio >= 0.8)});
  rows_.push_back({"8b. exposed port: GET of " + std::to_string(kSmall) +
                       " bytes, a new connection each, through the daemon",
                   Ms(through_ms.P(.5)) + " (" + Ms(through_ms.P(.9)) + ")", baseline,
                   Ms(direct_ms.P(.5)), Ratio(through_ms.P(.5), direct_ms.P(.5)), "-"});
  auto gibps = [](double v) { return Format("%.2f", v); };
  auto per_second = [](Samples& s) { return Count(static_cast<double>(s.size()) * 1e3 / s.Sum()); };
  Detail("8",
         "a Python (http.server, 1 MiB writes) server in a sandbox (loopback network, its "
         "default limits); the baseline's socket is made in the sandbox's network "
         "namespace, as the daemon's are; " +
             std::to_string(repeats) + " runs of " + mib +
             " MiB each way, interleaved; GiB/s p10/p50/p90/p99 through the daemon " +
             Dist(through, gibps) + ", direct " + Dist(direct, gibps) +
             "; a bare relay in the bench (blocking, a 64 KiB buffer, copying; the daemon "
             "splices) " +
             Dist(bare, gibps) + ", the daemon at " + Ratio(through.P(.5), bare.P(.5)) +
             " of it; daemon CPU seconds per GiB relayed " +
             Format("%.2f", daemon_cpu * kGiB / (static_cast<double>(bytes) * repeats)));
  Detail("8b", std::to_string(small) + " GETs each way, interleaved, one connection each; " +
                   "p10/p50/p90/p99 through the daemon " + Dist(through_ms, Ms) + ", direct " +
                   Dist(direct_ms, Ms) + "; requests/s " + per_second(through_ms) + " and " +
                   per_second(direct_ms));
}

}  // namespace sandstream::bench
