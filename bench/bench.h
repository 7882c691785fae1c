// What sandstream-bench's figures share: the harness (class Bench, which starts the daemon,
// runs each figure and keeps the report's rows), the number formats of the report, and the
// checks of the daemon's answers. Each figure's own code is in its fig_*.cc; main.cc holds the
// flags, the list of figures and the harness itself.
#pragma once

#include <sys/resource.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "baselines.h"
#include "client.h"
#include "daemon.h"
#include "netns.h"
#include "stats.h"

namespace sandstream::bench {

namespace json = boost::json;

constexpr const char* kApiKey = "sandstream-bench-key";
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = kMiB * 1024.0;
constexpr int kFigures = 13;
constexpr int kInFlight = 8;  // figure 6d/6e
// Figure 9: the egress daemon's pool, and its upstream DNS, a stub in the bench that answers
// every A query with kStubAnswer; both in the figure's private network namespace.
constexpr const char* kEgressPool = "10.200.0.0/16";
constexpr const char* kStubDnsAddress = "127.0.0.53";

struct Options {
  std::string daemon;
  std::string runtime = "namespace";
  bool quick = false;
  std::set<int> only;  // figure numbers; empty: all
  std::string json;    // where to write the rows as JSON lines too (bench/compare reads them)
};

struct Row {
  std::string figure, value, baseline, baseline_value, ratio, target;
};

inline std::string Format(const char* fmt, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, a);
  return buf;
}

inline std::string Ms(double ms) {
  return ms < 1 ? Format("%.3f ms", ms) : Format("%.2f ms", ms);
}
inline std::string Us(double us) {
  return Format("%.1f us", us);
}
inline std::string Gib(double gibps) {
  return Format("%.2f", gibps);
}
inline std::string Count(double n) {
  return Format("%.0f", n);
}
inline std::string Ratio(double a, double b) {
  return b > 0 ? Format("%.2fx", a / b) : "-";
}
inline std::string KiB(double bytes) {
  return Format("%.1f KiB", bytes / 1024);
}
inline std::string Met(bool met) {
  return met ? " (met)" : " (missed)";
}

inline json::object ParseObject(const std::string& text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) throw BenchError("not a JSON object: " + text.substr(0, 200));
  return v.as_object();
}

inline double SelfCpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// An exec result (HTTP) or an exec/ws exit record that says exit code 0.
inline bool ExitedZero(const json::object& o) {
  const json::value* code = o.if_contains("exit_code");
  return code != nullptr && code->is_int64() && code->as_int64() == 0;
}

inline void CheckExecTrue(const std::string& response) {
  if (!ExitedZero(ParseObject(response))) throw BenchError("exec true answered " + response);
}

inline std::string StringField(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_string()) throw BenchError("no string field " + std::string(key));
  return std::string(v->as_string());
}

// The string value of "chunk" in a pandastack chunk event's data, escapes intact.
inline std::string_view ChunkOf(std::string_view data) {
  constexpr std::string_view kKey = "{\"chunk\":\"";
  if (!data.starts_with(kKey) || !data.ends_with("\"}")) throw BenchError("unexpected chunk event");
  return data.substr(kKey.size(), data.size() - kKey.size() - 2);
}

// The harness: one daemon (restarted between figures that must not see each other's heap), the
// figures as members, and the rows and detail lines of the report.
class Bench {
 public:
  Bench(const Options& options, DaemonOptions daemon_options, BenchCgroups& cgroups,
        std::string raw_dir);

  // A fresh daemon: the memory figures must not see the heap that earlier figures grew.
  void Restart();
  // Runs `figure` unless --only leaves `number` out; a figure that throws is a failed row.
  void Run(int number, const std::string& label, const std::function<void()>& figure);
  void PrintTable() const;
  // The rows as JSON lines at `path`: each row's cells, its ratio also as a number (null when
  // it has none). False when the file cannot be written.
  bool WriteJson(const std::string& path) const;
  bool failed() const { return failed_; }

  // The figures, numbered as in the report and bench/README.md.
  void ExecWarm();                 // 1, fig_exec.cc
  void FirstByte();                // 2, fig_stream.cc
  void Throughput();               // 3, fig_stream.cc
  void CreateEcho();               // 4, fig_create.cc
  void StreamMemory(int streams);  // 5a, fig_memory.cc
  void SandboxMemory(int count);   // 5b, fig_memory.cc
  void ManyCommands();             // 6, fig_exec.cc
  void Adoption(int count);        // 7, fig_restart.cc
  void ExposedPort();              // 8, fig_port.cc
  void Egress();                   // 9, fig_egress.cc
  void Templates();                // 10, fig_templates.cc
  void Gateway();                  // 11, fig_gateway.cc
  void Soak();                     // 12, fig_soak.cc
  void PauseResume();              // 13, fig_pause.cc
  void CheckpointRestore(int mib, int cycles, const std::string& row_c, const std::string& row_r);
  void HoldMemory(const std::string& base, int mib);
  void Forks(int cycles);

 private:
  // Figures' parts, in their figure's file.
  void TenantCreate();  // 11d
  void EgressInPrivateNetns();
  void EgressFigures(Daemon& daemon, const StubDns& upstream);
  void DnsRoundTrip(HttpClient& http, const std::string& egress_body, const StubDns& upstream);
  int SettledFds() const;

  // Shared by the figures; in main.cc.
  std::string CreateSandbox(std::string_view body = "{}") { return CreateVia(*http_, body); }
  void DeleteSandbox(const std::string& id) { DeleteVia(*http_, id); }
  static std::string CreateVia(HttpClient& c, std::string_view body = "{}");
  static void DeleteVia(HttpClient& c, const std::string& id);
  double MetricValue(std::string_view name);
  int64_t PeakRss() const;
  // Lets exiting processes and freed pages settle before a memory reading.
  static void Settle();
  // One exec/stream of `cmd` in `sb`, read through `port` (the daemon's, or a gateway's).
  double StreamOnce(uint16_t port, const std::string& sb, const std::string& cmd,
                    const char* encoding, uint64_t bytes);
  // `count` POST exec requests of `true`, a thread per client with one request in flight each;
  // returns commands per second.
  static double ParallelRequests(std::vector<std::unique_ptr<HttpClient>>& clients,
                                 const std::string& path, const std::string& body, int count,
                                 Samples* latency_ms);
  RawRuntime& Raw();
  static std::string Dist(Samples& s, std::string (*unit)(double)) {
    return unit(s.P(.1)) + "/" + unit(s.P(.5)) + "/" + unit(s.P(.9)) + "/" + unit(s.P(.99));
  }
  void Detail(const std::string& figure, const std::string& text);
  void Fail(const std::string& label, const std::string& message);

  const Options& options_;
  DaemonOptions daemon_options_;
  DaemonOptions egress_daemon_options_;  // figure 9's daemon, in a network namespace of its own
  BenchCgroups& cgroups_;
  std::string raw_dir_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<HttpClient> http_;
  std::unique_ptr<RawRuntime> raw_;
  std::vector<Row> rows_;
  std::vector<std::string> details_;
  bool failed_ = false;
};

}  // namespace sandstream::bench
