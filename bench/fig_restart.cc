// Figure 7: a restart under load, the daemon SIGKILLed and started on the same data dir.
#include <memory>
#include <string>
#include <vector>

#include "bench.h"

namespace sandstream::bench {

// 7: a restart under load: `count` sandboxes, each with a process printing every 100 ms and
// a client following its output; the daemon is SIGKILLed and started on the same data dir.
// Serving again means: listening, every sandbox listed running, an exec answered.
void Bench::Adoption(int count) {
  DaemonOptions keep = daemon_options_;
  keep.extra_args.insert(keep.extra_args.end(), {"--teardown-on-exit", "false"});
  auto first = std::make_unique<Daemon>(keep, cgroups_);
  std::vector<std::string> ids;
  std::vector<std::string> processes;
  {
    HttpClient http(first->port(), kApiKey);
    std::vector<std::unique_ptr<SseStream>> followers;
    for (int i = 0; i < count; ++i) {
      ids.push_back(
          StringField(ParseObject(http.Expect(201, "POST", "/v1/sandboxes", "{}")), "id"));
      const std::string base = "/v1/sandboxes/" + ids.back() + "/processes";
      processes.push_back(StringField(
          ParseObject(http.Expect(201, "POST", base,
                                  R"({"cmd":"while :; do echo tick; sleep 0.1; done"})")),
          "id"));
      followers.push_back(std::make_unique<SseStream>(
          first->port(), kApiKey, "GET", base + "/" + processes.back() + "/logs?follow=1"));
    }
    first->Kill();
  }
  keep.dir = first->data_dir();
  double adopt_ms = 0;
  size_t running = 0;
  {
    const int64_t t0 = MonotonicNs();
    Daemon second(keep, cgroups_);
    HttpClient again(second.port(), kApiKey);
    const json::object listed = ParseObject(again.Expect(200, "GET", "/v1/sandboxes"));
    for (const auto& v : listed.at("sandboxes").as_array()) {
      running += v.as_object().at("status") == "running" ? 1 : 0;
    }
    CheckExecTrue(
        again.Expect(200, "POST", "/v1/sandboxes/" + ids.back() + "/exec", R"({"cmd":"true"})"));
    adopt_ms = static_cast<double>(MonotonicNs() - t0) / 1e6;
    if (running != ids.size()) {
      throw BenchError(std::to_string(running) + " of " + std::to_string(ids.size()) +
                       " sandboxes came back running");
    }
    const json::object p = ParseObject(
        again.Expect(200, "GET", "/v1/sandboxes/" + ids[0] + "/processes/" + processes[0]));
    if (p.at("status") != "running") throw BenchError("the process was not taken back running");
    for (const auto& id : ids) again.Expect(204, "DELETE", "/v1/sandboxes/" + id);
  }
  first.reset();
  // Baseline: the same daemon started on an empty data dir, until its first answer.
  const int64_t b0 = MonotonicNs();
  double empty_ms = 0;
  {
    Daemon empty(daemon_options_, cgroups_);
    HttpClient h(empty.port(), kApiKey);
    h.Expect(200, "GET", "/healthz");
    empty_ms = static_cast<double>(MonotonicNs() - b0) / 1e6;
  }
  rows_.push_back({"7. restart after SIGKILL: " + std::to_string(count) +
                       " sandboxes with a running process and a follower each taken back, an "
                       "exec answered",
                   Ms(adopt_ms), "a start on an empty data dir, /healthz answered", Ms(empty_ms),
                   Ratio(adopt_ms, empty_ms), "<= 1 s" + Met(adopt_ms <= 1000)});
  Detail("7",
         "one restart; every sandbox listed running and its process running with the same "
         "id; the followers' connections were cut by the kill (they resume with "
         "Last-Event-ID, see tests/integration/test_restart.py)");
}

}  // namespace sandstream::bench
