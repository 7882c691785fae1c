// Counters the daemon exports at /metrics. Plain integers: one io_context thread updates them.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

namespace sandstream {

struct Histogram {
  // Upper bounds in seconds, Prometheus style; the last bucket is +Inf.
  static constexpr std::array<double, 12> kBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                     0.05,   0.1,   0.25,   0.5,   1.0,  5.0};
  std::array<uint64_t, kBounds.size() + 1> counts{};
  double sum = 0;
  uint64_t count = 0;

  void Observe(double seconds) {
    size_t i = 0;
    while (i < kBounds.size() && seconds > kBounds[i]) ++i;
    ++counts[i];
    sum += seconds;
    ++count;
  }
};

struct Metrics {
  uint64_t processes_started_total = 0;
  uint64_t sandboxes_created_total = 0;
  int64_t streams_open = 0;
  uint64_t stream_bytes_total = 0;
  uint64_t gaps_total = 0;
  std::map<int, uint64_t> http_requests_total;  // by status code
  // What the egress resolvers did with each query: "answered" (forwarded and answered),
  // "refused" (a name the policy does not allow: NXDOMAIN), "empty" (AAAA, HTTPS, SVCB),
  // "failed" (SERVFAIL: no upstream, a bad answer, a pin refused), "malformed" (FORMERR,
  // NOTIMP), "dropped" (past the rate or the queries in flight).
  std::map<std::string, uint64_t> dns_queries_total;
  Histogram exec_duration;  // buffered exec, request to result
  // A sandbox's pause, asked to done (its processes stopped), and its resume, by PauseMode
  // (freeze, checkpoint): two orders of magnitude apart.
  Histogram pause_duration[2];
  Histogram resume_duration[2];
  uint64_t pauses_total = 0;
  uint64_t resumes_total = 0;  // auto-resumes (a request for a paused sandbox) among them
  uint64_t auto_resumes_total = 0;
  // Forks with memory: calls, asked to every fork running, and the sandboxes they made.
  Histogram fork_duration;
  uint64_t forks_total = 0;
};

}  // namespace sandstream
