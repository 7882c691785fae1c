// Figure 12: a soak; the daemon's descriptors, RSS and exec latency as rounds go by.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench.h"

namespace sandstream::bench {

// Figure 12: a soak. Rounds of short commands, each round in a sandbox of its own, 8 in
// flight, the sandbox deleted at its end. At the start, the middle and the end (all sandboxes
// deleted, the daemon settled): its descriptors and RSS, and exec's p50 on a kept connection.
void Bench::Soak() {
  const int total = options_.quick ? 500 : 200000;
  const int rounds = 10;
  const int samples = options_.quick ? 50 : 200;
  const std::string body = R"({"cmd":"true"})";
  struct Point {
    int commands;
    int fds;
    int64_t rss;
    double p50_ms;
  };
  std::vector<Point> points;
  int done = 0;
  auto measure = [&] {
    const std::string sb = CreateSandbox();
    const std::string path = "/v1/sandboxes/" + sb + "/exec";
    Samples ms;
    for (int i = -5; i < samples; ++i) {
      const int64_t t0 = MonotonicNs();
      CheckExecTrue(http_->Expect(200, "POST", path, body));
      if (i >= 0) ms.Add(static_cast<double>(MonotonicNs() - t0) / 1e6);
    }
    DeleteSandbox(sb);
    points.push_back({done, SettledFds(), daemon_->Rss(), ms.P(.5)});
  };
  std::vector<std::unique_ptr<HttpClient>> clients;
  clients.reserve(kInFlight);
  for (int c = 0; c < kInFlight; ++c) {
    clients.push_back(std::make_unique<HttpClient>(daemon_->port(), kApiKey));
  }
  Samples latency;
  {
    // A round before the start's reading: the connections are open, what the daemon makes
    // once (on first use) is made.
    const std::string sb = CreateSandbox();
    (void)ParallelRequests(clients, "/v1/sandboxes/" + sb + "/exec", body, 5 * kInFlight, &latency);
    DeleteSandbox(sb);
    latency = Samples();
  }
  measure();
  const int64_t t0 = MonotonicNs();
  for (int r = 0; r < rounds; ++r) {
    const std::string sb = CreateSandbox();
    const int count = total / rounds;
    (void)ParallelRequests(clients, "/v1/sandboxes/" + sb + "/exec", body, count, &latency);
    DeleteSandbox(sb);
    done += count;
    if (r + 1 == rounds / 2 || r + 1 == rounds) measure();
  }
  const double seconds = static_cast<double>(MonotonicNs() - t0) / 1e9;
  const Point& start = points[0];
  const auto add = [&](const std::string& what, const std::string& value,
                       const std::string& start_value, double ratio, const std::string& target) {
    rows_.push_back(
        {"12. soak: " + what, value, "at the start", start_value, Format("%.2fx", ratio), target});
  };
  for (size_t i = 1; i < points.size(); ++i) {
    const Point& p = points[i];
    const std::string at =
        (i + 1 == points.size() ? "end, " : "middle, ") + std::to_string(p.commands) + " cmds";
    add("descriptors, " + at, Count(p.fds), Count(start.fds),
        static_cast<double>(p.fds) / start.fds, "= start" + Met(p.fds == start.fds));
    add("RSS, " + at, Format("%.1f MiB", static_cast<double>(p.rss) / kMiB),
        Format("%.1f MiB", static_cast<double>(start.rss) / kMiB),
        static_cast<double>(p.rss) / static_cast<double>(start.rss), "-");
    add("exec p50, " + at, Ms(p.p50_ms), Ms(start.p50_ms), p.p50_ms / start.p50_ms, "-");
  }
  Detail("12", std::to_string(total) + " `true` execs in " + std::to_string(rounds) +
                   " sandboxes (one per round, created and deleted), " + std::to_string(kInFlight) +
                   " kept connections in flight, " + Format("%.0f", total / seconds) +
                   " execs/s, p50/p99 " + Ms(latency.P(.5)) + " / " + Ms(latency.P(.99)) +
                   "; each reading after its round's sandbox was deleted and the descriptor "
                   "count held still for 1 s (at most 15 s), exec p50 of " +
                   std::to_string(samples) + " on one kept connection in a fresh sandbox");
}

// The daemon's descriptor count once it has not changed for a second (a deleted sandbox's
// last descriptors go as its teardown ends), or after 15 s.
int Bench::SettledFds() const {
  int last = ProcessFds(daemon_->pid());
  auto since = std::chrono::steady_clock::now();
  const auto limit = since + std::chrono::seconds(15);
  while (std::chrono::steady_clock::now() < limit &&
         std::chrono::steady_clock::now() - since < std::chrono::seconds(1)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const int now = ProcessFds(daemon_->pid());
    if (now != last) since = std::chrono::steady_clock::now();
    last = now;
  }
  return last;
}

}  // namespace sandstream::bench
