// Figure 5: the daemon's memory per open stream (5a) and per idle sandbox (5b).
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "bench.h"

namespace sandstream::bench {

void Bench::StreamMemory(int streams) {
  Restart();
  const int processes = 10;
  const std::string sb = CreateSandbox();
  std::vector<std::string> pids;
  for (int i = 0; i < processes; ++i) {
    const json::object o = ParseObject(http_->Expect(
        201, "POST", "/v1/sandboxes/" + sb + "/processes", R"({"cmd":"sleep 3600"})"));
    pids.push_back(StringField(o, "id"));
  }
  Settle();
  const int64_t rss0 = daemon_->Rss();
  const int64_t avail0 = MemInfo("MemAvailable");
  std::vector<std::unique_ptr<SseStream>> open;
  open.reserve(static_cast<size_t>(streams));
  const int64_t t0 = MonotonicNs();
  for (int i = 0; i < streams; ++i) {
    open.push_back(std::make_unique<SseStream>(daemon_->port(), kApiKey, "GET",
                                               "/v1/sandboxes/" + sb + "/processes/" +
                                                   pids[static_cast<size_t>(i % processes)] +
                                                   "/logs?follow=1"));
  }
  const double open_ms = static_cast<double>(MonotonicNs() - t0) / 1e6;
  const double reported = MetricValue("sandstream_streams_open");
  Settle();
  const int64_t rss1 = daemon_->Rss();
  const int64_t avail1 = MemInfo("MemAvailable");
  open.clear();
  DeleteSandbox(sb);
  if (reported < streams) {
    throw BenchError("sandstream_streams_open is " + Format("%.0f", reported) + " with " +
                     std::to_string(streams) + " streams open");
  }
  const double per = static_cast<double>(rss1 - rss0) / streams;
  rows_.push_back(
      {"5a. daemon RSS, " + std::to_string(streams) + " open SSE streams (logs?follow=1)",
       Format("%.1f MiB", static_cast<double>(rss1) / kMiB) + " (+" + KiB(per) + "/stream)",
       "daemon RSS before opening them", Format("%.1f MiB", static_cast<double>(rss0) / kMiB),
       Ratio(static_cast<double>(rss1), static_cast<double>(rss0)),
       "10,000 streams; projected +" + Format("%.0f MiB", per * 10000 / kMiB)});
  Detail("5a", std::to_string(streams) + " streams over " + std::to_string(processes) +
                   " idle processes, opened in " + Ms(open_ms) +
                   "; MemAvailable drop (both socket ends, whole host) " +
                   KiB(static_cast<double>(avail0 - avail1) / streams) + "/stream");
}

void Bench::SandboxMemory(int count) {
  struct Reading {
    int64_t avail, slab, rss, cgroup;
  };
  auto read = [&](pid_t pid, const char* leaf) {
    Settle();
    return Reading{MemInfo("MemAvailable"), MemInfo("Slab"), ProcessRss(pid),
                   cgroups_.MemoryUsage(leaf)};
  };
  Restart();
  const Reading d0 = read(daemon_->pid(), "daemon");
  std::vector<std::string> ids;
  Samples create_ms, delete_ms;
  for (int i = 0; i < count; ++i) {
    const int64_t t0 = MonotonicNs();
    ids.push_back(CreateSandbox());
    create_ms.Add(static_cast<double>(MonotonicNs() - t0) / 1e6);
  }
  const Reading d1 = read(daemon_->pid(), "daemon");
  for (const auto& id : ids) {
    const int64_t t0 = MonotonicNs();
    DeleteSandbox(id);
    delete_ms.Add(static_cast<double>(MonotonicNs() - t0) / 1e6);
  }

  RawRuntime& raw = Raw();
  const Reading b0 = read(::getpid(), "bench");
  raw.CreateIdle(count);
  const Reading b1 = read(::getpid(), "bench");
  raw.DestroyIdle();

  const std::string n = std::to_string(count);
  const std::string base = options_.runtime + " runtime Create x" + n + ", in-process";
  auto per = [count](int64_t before, int64_t after) {
    return static_cast<double>(after - before) / count;
  };
  const double avail = per(d1.avail, d0.avail), base_avail = per(b1.avail, b0.avail);
  if (d0.cgroup >= 0) {
    rows_.push_back({"5b. memory charged per idle sandbox (memory cgroup, " + n + ")",
                     KiB(per(d0.cgroup, d1.cgroup)), base + " (bench cgroup)",
                     KiB(per(b0.cgroup, b1.cgroup)),
                     Ratio(per(d0.cgroup, d1.cgroup), per(b0.cgroup, b1.cgroup)),
                     "1,000 live sandboxes; kernel ~300-500 KiB each (notes)"});
  }
  rows_.push_back({"5c. host MemAvailable drop per idle sandbox", KiB(avail), base, KiB(base_avail),
                   Ratio(avail, base_avail), "-"});
  rows_.push_back({"5d. slab per idle sandbox", KiB(per(d0.slab, d1.slab)), base,
                   KiB(per(b0.slab, b1.slab)), Ratio(per(d0.slab, d1.slab), per(b0.slab, b1.slab)),
                   "-"});
  rows_.push_back({"5e. process RSS per idle sandbox", KiB(per(d0.rss, d1.rss)) + " (daemon)",
                   base + " (bench RSS)", KiB(per(b0.rss, b1.rss)),
                   Ratio(per(d0.rss, d1.rss), per(b0.rss, b1.rss)), "-"});
  Detail("5b", n + " sandboxes: POST /sandboxes " + Dist(create_ms, Ms) + ", DELETE " +
                   Dist(delete_ms, Ms) +
                   "; the cgroup charge counts only the daemon's (or the bench's) subtree; "
                   "MemAvailable and Slab are host-wide, so other work on the machine moves them");
}

}  // namespace sandstream::bench
