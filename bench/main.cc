// sandstream-bench: starts the real sandstreamd and measures the brief's performance figures,
// each beside a baseline measured in the same run, and prints them as a table with ratios.
// It never fails on a number (the machine is shared and noisy); it fails only when a figure
// cannot be measured at all. Usage: see --help and bench/README.md.
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "baselines.h"
#include "client.h"
#include "daemon.h"
#include "image.h"
#include "netns.h"
#include "stats.h"

namespace sandstream::bench {
namespace {

namespace json = boost::json;

constexpr const char* kApiKey = "sandstream-bench-key";
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = kMiB * 1024.0;
constexpr int kFigures = 12;
constexpr int kInFlight = 8;  // figure 6d/6e
// Figure 9: the egress daemon's pool, and its upstream DNS, a stub in the bench that answers
// every A query with kStubAnswer; both in the figure's private network namespace.
constexpr const char* kEgressPool = "10.200.0.0/16";
constexpr const char* kStubDnsAddress = "127.0.0.53";
constexpr uint32_t kStubAnswer = 0xc6120001;  // 198.18.0.1, inside the policy's CIDR
constexpr const char* kEgressName = "pypi.org";

struct Options {
  std::string daemon;
  std::string runtime = "namespace";
  bool quick = false;
  std::set<int> only;  // figure numbers; empty: all
};

struct Row {
  std::string figure, value, baseline, baseline_value, ratio, target;
};

std::string Format(const char* fmt, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, a);
  return buf;
}

std::string Ms(double ms) {
  return ms < 1 ? Format("%.3f ms", ms) : Format("%.2f ms", ms);
}
std::string Us(double us) {
  return Format("%.1f us", us);
}
std::string Gib(double gibps) {
  return Format("%.2f", gibps);
}
std::string Count(double n) {
  return Format("%.0f", n);
}
std::string Ratio(double a, double b) {
  return b > 0 ? Format("%.2fx", a / b) : "-";
}
std::string KiB(double bytes) {
  return Format("%.1f KiB", bytes / 1024);
}
std::string Met(bool met) {
  return met ? " (met)" : " (missed)";
}

json::object ParseObject(const std::string& text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) throw BenchError("not a JSON object: " + text.substr(0, 200));
  return v.as_object();
}

double SelfCpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// An exec result (HTTP) or an exec/ws exit record that says exit code 0.
bool ExitedZero(const json::object& o) {
  const json::value* code = o.if_contains("exit_code");
  return code != nullptr && code->is_int64() && code->as_int64() == 0;
}

void CheckExecTrue(const std::string& response) {
  if (!ExitedZero(ParseObject(response))) throw BenchError("exec true answered " + response);
}

std::string StringField(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_string()) throw BenchError("no string field " + std::string(key));
  return std::string(v->as_string());
}

// Counts the bytes a JSON string body (between the quotes, escapes intact) decodes to in UTF-8.
uint64_t DecodedUtf8Bytes(std::string_view s) {
  uint64_t n = 0;
  const char* p = s.data();
  const char* end = p + s.size();
  while (p < end) {
    const char* bs = static_cast<const char*>(std::memchr(p, '\\', static_cast<size_t>(end - p)));
    if (bs == nullptr) return n + static_cast<uint64_t>(end - p);
    n += static_cast<uint64_t>(bs - p);
    // Runs of NULs (3b) are one escape every six bytes: take them without a memchr each.
    while (bs + 6 <= end && std::memcmp(bs, "\\u0000", 6) == 0) {
      ++n;
      bs += 6;
    }
    if (bs >= end) return n;
    if (*bs != '\\') {
      p = bs;
      continue;
    }
    if (bs + 1 < end && bs[1] == 'u' && bs + 6 <= end) {
      unsigned cp = 0;
      for (int i = 2; i < 6; ++i) {
        const char h = bs[i];
        cp = cp * 16 + static_cast<unsigned>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      }
      if (cp >= 0xd800 && cp < 0xdc00) {
        n += 4;  // a surrogate pair; its low half adds nothing
      } else if (cp < 0xdc00 || cp >= 0xe000) {
        n += cp < 0x80 ? 1 : cp < 0x800 ? 2 : 3;
      }
      p = bs + 6;
    } else {
      n += 1;
      p = bs + 2;
    }
  }
  return n;
}

uint64_t DecodedBase64Bytes(std::string_view s) {
  uint64_t padding = 0;
  while (!s.empty() && s.back() == '=') {
    s.remove_suffix(1);
    ++padding;
  }
  return (s.size() + padding) / 4 * 3 - padding;
}

// The string value of "chunk" in a pandastack chunk event's data, escapes intact.
std::string_view ChunkOf(std::string_view data) {
  constexpr std::string_view kKey = "{\"chunk\":\"";
  if (!data.starts_with(kKey) || !data.ends_with("\"}")) throw BenchError("unexpected chunk event");
  return data.substr(kKey.size(), data.size() - kKey.size() - 2);
}

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

// Commands of `true` over one exec/ws WebSocket, each checked: one start, then an exit with code
// 0, and nothing else (`true` prints nothing).
class TrueOverWs {
 public:
  TrueOverWs(uint16_t port, const std::string& sandbox)
      : ws_(port, kApiKey, "/v1/sandboxes/" + sandbox + "/exec/ws") {}

  int64_t Send() {
    const int64_t id = static_cast<int64_t>(state_.size());
    const std::string message = "{\"id\":" + std::to_string(id) + ",\"cmd\":\"true\"}";
    state_.push_back(kSent);
    sent_ns_.push_back(MonotonicNs());
    ws_.SendText(message);
    return id;
  }

  // Reads until a command exits; returns its id and sets *ms to the time since its Send().
  int64_t AwaitExit(double* ms) {
    for (;;) {
      const std::optional<std::string> text = ws_.Receive();
      if (!text) throw BenchError("exec/ws: the server closed the WebSocket");
      const int64_t now = MonotonicNs();
      const json::object o = ParseObject(*text);
      const json::value* id = o.if_contains("id");
      if (id == nullptr || !id->is_int64() || id->as_int64() < 0 ||
          id->as_int64() >= static_cast<int64_t>(state_.size())) {
        throw BenchError("exec/ws: a message for no command sent: " + text->substr(0, 300));
      }
      const auto k = static_cast<size_t>(id->as_int64());
      if (o.contains("start") && state_[k] == kSent) {
        state_[k] = kStarted;
        continue;
      }
      const json::value* exit = o.if_contains("exit");
      if (exit == nullptr || !exit->is_object() || state_[k] != kStarted ||
          !ExitedZero(exit->as_object())) {
        throw BenchError("exec/ws `true` answered " + text->substr(0, 300));
      }
      state_[k] = kExited;
      *ms = static_cast<double>(now - sent_ns_[k]) / 1e6;
      return id->as_int64();
    }
  }

  void Close() { ws_.Close(); }

 private:
  enum State : uint8_t { kSent, kStarted, kExited };
  WebSocketClient ws_;
  std::vector<State> state_;  // by id
  std::vector<int64_t> sent_ns_;
};

class Bench {
 public:
  Bench(const Options& options, DaemonOptions daemon_options, BenchCgroups& cgroups,
        std::string raw_dir)
      : options_(options),
        daemon_options_(std::move(daemon_options)),
        cgroups_(cgroups),
        raw_dir_(std::move(raw_dir)) {
    egress_daemon_options_ = daemon_options_;
    egress_daemon_options_.extra_args.insert(
        egress_daemon_options_.extra_args.end(),
        {"--egress-pool", kEgressPool, "--egress-dns", kStubDnsAddress});
    // Every other daemon runs in the host's network namespace: egress off there, so that
    // nothing the bench starts turns forwarding on or loads (or cleans up) nftables tables in it.
    daemon_options_.extra_args.insert(daemon_options_.extra_args.end(), {"--egress-pool", "none"});
    Restart();
  }

  // A fresh daemon: the memory figures must not see the heap that earlier figures grew.
  void Restart() {
    http_.reset();
    daemon_.reset();
    daemon_ = std::make_unique<Daemon>(daemon_options_, cgroups_);
    http_ = std::make_unique<HttpClient>(daemon_->port(), kApiKey);
  }

  void Run(int number, const std::string& label, const std::function<void()>& figure) {
    if (!options_.only.empty() && !options_.only.contains(number)) return;
    std::fprintf(stderr, "measuring: %s\n", label.c_str());
    try {
      figure();
    } catch (const std::exception& e) {
      Fail(label, e.what());
    }
    if (!daemon_->Alive()) {
      Detail(label,
             "sandstreamd exited during this figure; its log ends: " + daemon_->LogTail(800));
      Restart();
    }
  }

  void ExecWarm() {
    const int n = options_.quick ? 60 : 400;
    const std::string sb = CreateSandbox();
    const std::string path = "/v1/sandboxes/" + sb + "/exec";
    const std::string body = R"({"cmd":"echo hi"})";
    Samples http, base, daemon_side;
    double daemon_cpu = 0;
    for (int i = -5; i < n; ++i) {  // the first five warm both paths up
      if (i == 0) daemon_cpu = -ProcessCpuSeconds(daemon_->pid());
      const int64_t t0 = MonotonicNs();
      const std::string res = http_->Expect(200, "POST", path, body);
      const int64_t t1 = MonotonicNs();
      const json::object o = ParseObject(res);
      if (StringField(o, "stdout") != "hi\n" || o.at("exit_code").to_number<int64_t>() != 0) {
        throw BenchError("exec echo hi answered " + res);
      }
      double ms = 0;
      if (RunShell("echo hi", &ms) != "hi\n") throw BenchError("sh -c 'echo hi' printed otherwise");
      if (i < 0) continue;
      http.Add(static_cast<double>(t1 - t0) / 1e6);
      daemon_side.Add(o.at("duration_ms").to_number<double>());
      base.Add(ms);
    }
    daemon_cpu += ProcessCpuSeconds(daemon_->pid());
    DeleteSandbox(sb);
    rows_.push_back({"1. exec `echo hi`, warm sandbox, request -> result",
                     Ms(http.P(.5)) + " (" + Ms(http.P(.9)) + ")", "fork+exec+wait sh -c 'echo hi'",
                     Ms(base.P(.5)), Ratio(http.P(.5), base.P(.5)),
                     "p50 <= 1 ms" + Met(http.P(.5) <= 1)});
    Detail("1", "n=" + std::to_string(n) + " interleaved; sandstream p10/p50/p90/p99 " +
                    Dist(http, Ms) + "; baseline " + Dist(base, Ms) +
                    "; daemon-reported duration_ms p50 " + Format("%.0f", daemon_side.P(.5)) +
                    "; daemon CPU per exec " + Ms(daemon_cpu * 1e3 / n));
  }

  void FirstByte() {
    const int ticks = options_.quick ? 100 : 500;
    // The pause is a `read -t` on a pipe that never has data, not `sleep`: a fork and exec of
    // /bin/sleep right after each write would compete with the reader for the two CPUs.
    const std::string script = "exec 9< <(exec sleep 3600 2>/dev/null); for ((i=0;i<" +
                               std::to_string(ticks) +
                               ";i++)); do printf '%s\\n' \"$EPOCHREALTIME\"; read -t 0.01 -u 9; "
                               "done; kill $! 2>/dev/null";
    const std::string sb = CreateSandbox();
    json::object req{{"argv", json::array{"bash", "-c", script}}};
    Samples http;
    int index = 0;
    bool exited = false;
    {
      SseStream stream(daemon_->port(), kApiKey, "POST", "/v1/sandboxes/" + sb + "/exec/stream",
                       json::serialize(req));
      while (!exited && stream.Pump([&](const SseStream::Event& e) {
        if (e.type == "stdout") {
          const int64_t now = RealtimeNs();
          std::string_view chunk = ChunkOf(e.data);
          size_t nl;
          while ((nl = chunk.find("\\n")) != std::string_view::npos) {
            int64_t stamp = 0;
            if (ParseStamp(chunk.substr(0, nl), &stamp) && index++ >= 5) {
              http.Add(static_cast<double>(now - stamp) / 1e3);
            }
            chunk.remove_prefix(nl + 2);
          }
        } else if (e.type == "exit" || e.type == "error" || e.type == "gap") {
          if (e.type != "exit") throw BenchError("stream ended with " + std::string(e.data));
          exited = true;
          return false;
        }
        return true;
      })) {
      }
    }
    DeleteSandbox(sb);
    if (!exited || http.size() < static_cast<size_t>(ticks) / 2) {
      throw BenchError("the ticking process's stream ended early (" + std::to_string(http.size()) +
                       " stamps)");
    }
    Samples base;
    const auto raw = PipeStampLatencies(script);
    for (size_t i = 5; i < raw.size(); ++i) base.Add(raw[i]);
    rows_.push_back({"2. first byte: process write -> SSE client read",
                     Us(http.P(.5)) + " (" + Us(http.P(.9)) + ")",
                     "same writer, raw pipe -> reader", Us(base.P(.5)),
                     Ratio(http.P(.5), base.P(.5)), "p50 <= 100 us" + Met(http.P(.5) <= 100)});
    Detail("2", "a bash loop printing $EPOCHREALTIME every 10 ms, exec/stream; n=" +
                    std::to_string(http.size()) + "; sandstream p10/p50/p90/p99 " + Dist(http, Us) +
                    "; baseline " + Dist(base, Us));
  }

  void Throughput() {
    const uint64_t bytes = options_.quick ? 64ull << 20 : 1ull << 30;
    const int repeats = options_.quick ? 1 : 3;
    auto zero = [](uint64_t n) { return "head -c " + std::to_string(n) + " /dev/zero"; };
    auto text = [](uint64_t n) {
      return "yes 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ | head -c " +
             std::to_string(n);
    };
    Samples chain_zero, chain_text;
    for (int r = 0; r < repeats; ++r) {
      chain_zero.Add(BareChainThroughput(zero(bytes), bytes) / kGiB);
      chain_text.Add(BareChainThroughput(text(bytes), bytes) / kGiB);
    }
    struct Variant {
      std::string label;
      bool zero;
      const char* encoding;
      uint64_t bytes;
    };
    // 3b puts six bytes on the wire per output byte; a quarter of N keeps its runs short.
    const Variant variants[] = {
        {"3a. one stream, base64, head -c N /dev/zero", true, "base64", bytes},
        {"3b. one stream, utf8, head -c N/4 /dev/zero (NUL -> \\u0000)", true, "utf8", bytes / 4},
        {"3c. one stream, utf8, printable text (yes | head -c N)", false, "utf8", bytes},
    };
    std::string cpu;
    for (const auto& v : variants) {
      const std::string cmd = v.zero ? zero(v.bytes) : text(v.bytes);
      Samples gibps;
      double daemon_cpu = 0, client_cpu = 0;
      for (int r = 0; r < repeats; ++r) {
        // A sandbox per run: an ended process keeps its log window until its sandbox goes.
        const std::string sb = CreateSandbox();
        const double d0 = ProcessCpuSeconds(daemon_->pid()), c0 = SelfCpuSeconds();
        gibps.Add(StreamOnce(daemon_->port(), sb, cmd, v.encoding, v.bytes) / kGiB);
        daemon_cpu += ProcessCpuSeconds(daemon_->pid()) - d0;
        client_cpu += SelfCpuSeconds() - c0;
        DeleteSandbox(sb);
      }
      const double gib = static_cast<double>(v.bytes) * repeats / kGiB;
      cpu += "; " + v.label.substr(0, 2) + " daemon " + Format("%.2f", daemon_cpu / gib) +
             ", client " + Format("%.2f", client_cpu / gib);
      Samples& chain = v.zero ? chain_zero : chain_text;
      const bool met = gibps.P(.5) >= 0.8 && gibps.P(.5) >= 0.7 * chain.P(.5);
      rows_.push_back({v.label, Format("%.2f GiB/s", gibps.P(.5)) + Format(" (%.2f)", gibps.P(.1)),
                       "bare C chain: pipe->epoll->SSE->TCP", Format("%.2f GiB/s", chain.P(.5)),
                       Ratio(gibps.P(.5), chain.P(.5)),
                       ">= 0.8 GiB/s, >= 70% of chain" + Met(met)});
    }
    Detail("3", "N=" + std::to_string(bytes >> 20) + " MiB, " + std::to_string(repeats) +
                    " run(s) each; the client counts decoded bytes and checks for gaps; "
                    "CPU seconds per GiB of output" +
                    cpu + "; daemon peak RSS (VmHWM) " +
                    Format("%.0f MiB", static_cast<double>(PeakRss()) / kMiB) +
                    " at default settings (8 MiB log window, flow wait)");
  }

  void CreateEcho() {
    const int n = options_.quick ? 15 : 100;
    RawRuntime& raw = Raw();
    Samples http, http_delete, base, base_destroy;
    double daemon_cpu = 0;
    for (int i = -2; i < n; ++i) {
      if (i == 0) daemon_cpu = -ProcessCpuSeconds(daemon_->pid());
      const int64_t t0 = MonotonicNs();
      const std::string sb = CreateSandbox();
      const std::string res =
          http_->Expect(200, "POST", "/v1/sandboxes/" + sb + "/exec", R"({"cmd":"echo hi"})");
      const int64_t t1 = MonotonicNs();
      DeleteSandbox(sb);
      const int64_t t2 = MonotonicNs();
      if (StringField(ParseObject(res), "stdout") != "hi\n")
        throw BenchError("echo hi answered " + res);
      double run_ms = 0, destroy_ms = 0;
      raw.CreateEchoDestroy(&run_ms, &destroy_ms);
      if (i < 0) continue;
      http.Add(static_cast<double>(t1 - t0) / 1e6);
      http_delete.Add(static_cast<double>(t2 - t1) / 1e6);
      base.Add(run_ms);
      base_destroy.Add(destroy_ms);
    }
    daemon_cpu += ProcessCpuSeconds(daemon_->pid());
    rows_.push_back({"4. POST /sandboxes + POST exec `echo hi` -> output",
                     Ms(http.P(.5)) + " (" + Ms(http.P(.9)) + ")",
                     options_.runtime + " runtime Create+Spawn+wait, in-process", Ms(base.P(.5)),
                     Ratio(http.P(.5), base.P(.5)), "p50 <= 10 ms" + Met(http.P(.5) <= 10)});
    rows_.push_back({"4b. DELETE /sandboxes/{id}",
                     Ms(http_delete.P(.5)) + " (" + Ms(http_delete.P(.9)) + ")",
                     options_.runtime + " runtime Destroy, in-process", Ms(base_destroy.P(.5)),
                     Ratio(http_delete.P(.5), base_destroy.P(.5)), "-"});
    Detail("4", "n=" + std::to_string(n) + " interleaved; sandstream " + Dist(http, Ms) +
                    "; baseline " + Dist(base, Ms) + "; delete " + Dist(http_delete, Ms) +
                    "; Destroy " + Dist(base_destroy, Ms) + "; daemon CPU per create+exec+delete " +
                    Ms(daemon_cpu * 1e3 / n));
  }

  void StreamMemory(int streams) {
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

  void SandboxMemory(int count) {
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
    rows_.push_back({"5c. host MemAvailable drop per idle sandbox", KiB(avail), base,
                     KiB(base_avail), Ratio(avail, base_avail), "-"});
    rows_.push_back({"5d. slab per idle sandbox", KiB(per(d0.slab, d1.slab)), base,
                     KiB(per(b0.slab, b1.slab)),
                     Ratio(per(d0.slab, d1.slab), per(b0.slab, b1.slab)), "-"});
    rows_.push_back({"5e. process RSS per idle sandbox", KiB(per(d0.rss, d1.rss)) + " (daemon)",
                     base + " (bench RSS)", KiB(per(b0.rss, b1.rss)),
                     Ratio(per(d0.rss, d1.rss), per(b0.rss, b1.rss)), "-"});
    Detail("5b",
           n + " sandboxes: POST /sandboxes " + Dist(create_ms, Ms) + ", DELETE " +
               Dist(delete_ms, Ms) +
               "; the cgroup charge counts only the daemon's (or the bench's) subtree; "
               "MemAvailable and Slab are host-wide, so other work on the machine moves them");
  }

  // Many short commands: a request each (a new connection, or a kept-alive one) against one
  // exec/ws WebSocket, sequential and interleaved run by run; then kInFlight at once.
  // 7: a restart under load: `count` sandboxes, each with a process printing every 100 ms and
  // a client following its output; the daemon is SIGKILLed and started on the same data dir.
  // Serving again means: listening, every sandbox listed running, an exec answered.
  void Adoption(int count) {
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

  // 8: a server in a sandbox reached through an exposed port (the path form), against the same
  // GET on a direct loopback connection to that server from a socket in the sandbox's network
  // namespace (made as the daemon makes its own): what the daemon's relay costs, and nothing
  // else. Run by run interleaved; the bench's HTTP client keeps nothing it reads.
  // Figure 10: sandboxes made from an imported image and from a snapshot, and the snapshot.
  void Templates() {
    const int n = options_.quick ? 10 : 100;
    const int mib = options_.quick ? 16 : 100;
    const std::string archive = ShellImageArchive();
    int64_t t0 = MonotonicNs();
    http_->Expect(201, "POST", "/v1/templates?name=bench-image", archive, "application/x-tar");
    const double import_ms = static_cast<double>(MonotonicNs() - t0) / 1e6;

    // A create + `echo hi` + delete from `body`; the create and exec are timed.
    auto create_echo = [&](std::string_view body) {
      const int64_t start = MonotonicNs();
      const std::string sb = CreateSandbox(body);
      const std::string res =
          http_->Expect(200, "POST", "/v1/sandboxes/" + sb + "/exec", R"({"cmd":"echo hi"})");
      const int64_t end = MonotonicNs();
      if (StringField(ParseObject(res), "stdout") != "hi\n") {
        throw BenchError("echo hi answered " + res);
      }
      DeleteSandbox(sb);
      return static_cast<double>(end - start) / 1e6;
    };
    Samples image, base;
    for (int i = -2; i < n; ++i) {
      const double from_image = create_echo(R"({"template":"bench-image"})");
      const double from_base = create_echo("{}");
      if (i < 0) continue;
      image.Add(from_image);
      base.Add(from_base);
    }
    rows_.push_back({"10a. create from a 3-layer imported image + `echo hi`",
                     Ms(image.P(.5)) + " (" + Ms(image.P(.9)) + ")",
                     "figure 4 from template base, interleaved", Ms(base.P(.5)),
                     Ratio(image.P(.5), base.P(.5)), "p50 <= 10 ms" + Met(image.P(.5) <= 10)});

    // 10b: a snapshot of a sandbox that wrote `mib` MiB, against the same bytes copied on the
    // host from a tmpfs into the data dir's filesystem and synced (what a snapshot must do).
    const std::string writer =
        CreateSandbox(R"({"template":"bench-image","disk_mb":)" + std::to_string(mib + 64) +
                      R"(,"memory_mb":)" + std::to_string(mib * 2 + 256) + "}");
    const std::string fill = "head -c " + std::to_string(mib) + "M /dev/urandom > /opt/data";
    const json::object wrote =
        ParseObject(http_->Expect(200, "POST", "/v1/sandboxes/" + writer + "/exec",
                                  json::serialize(json::object{{"cmd", fill}})));
    if (wrote.at("exit_code") != json::value(0)) {
      throw BenchError("writing " + std::to_string(mib) + " MiB answered " +
                       json::serialize(wrote));
    }
    const int rounds = options_.quick ? 1 : 3;
    Samples snapshot, copy;
    std::string snap;
    for (int i = 0; i < rounds; ++i) {
      if (!snap.empty()) http_->Expect(204, "DELETE", "/v1/templates/" + snap);
      snap = "bench-snap-" + std::to_string(i);
      t0 = MonotonicNs();
      http_->Expect(201, "POST", "/v1/sandboxes/" + writer + "/snapshot",
                    json::serialize(json::object{{"name", snap}}));
      snapshot.Add(static_cast<double>(MonotonicNs() - t0) / 1e6);
      copy.Add(CopyAndSync(static_cast<size_t>(mib) << 20, daemon_->data_dir()));
    }
    DeleteSandbox(writer);
    rows_.push_back({"10b. snapshot of a sandbox with " + std::to_string(mib) + " MiB written",
                     Ms(snapshot.P(.5)), "the bytes copied tmpfs -> data dir + fsync",
                     Ms(copy.P(.5)), Ratio(snapshot.P(.5), copy.P(.5)), "measured"});

    // 10c: create + `echo hi` from that snapshot (four layers), against 10a's image.
    Samples from_snapshot, from_image;
    const std::string snap_body = json::serialize(json::object{{"template", snap}});
    for (int i = -2; i < n; ++i) {
      const double a = create_echo(snap_body);
      const double b = create_echo(R"({"template":"bench-image"})");
      if (i < 0) continue;
      from_snapshot.Add(a);
      from_image.Add(b);
    }
    rows_.push_back({"10c. create from that snapshot + `echo hi`",
                     Ms(from_snapshot.P(.5)) + " (" + Ms(from_snapshot.P(.9)) + ")",
                     "10a's image, interleaved", Ms(from_image.P(.5)),
                     Ratio(from_snapshot.P(.5), from_image.P(.5)), "measured"});
    http_->Expect(204, "DELETE", "/v1/templates/" + snap);
    http_->Expect(204, "DELETE", "/v1/templates/bench-image");
    Detail("10", "n=" + std::to_string(n) + " interleaved; image " + Dist(image, Ms) + "; base " +
                     Dist(base, Ms) + "; from the snapshot " + Dist(from_snapshot, Ms) +
                     "; import of the image (" + std::to_string(archive.size() >> 10) +
                     " KiB, once) " + Ms(import_ms) + "; snapshot rounds " +
                     std::to_string(rounds) + ", copy " + Dist(copy, Ms));
  }

  // Three nodes behind one gateway on this machine (the gateway reads its nodes' /healthz; with
  // etcd it reads the same records from there): what a request and a stream cost through the
  // gateway against the node directly, and how evenly it places.
  void Gateway() {
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
    const double gateway_cpu_ms = (ProcessCpuSeconds(gateway.pid()) - gateway_cpu0) * 1e3 / (exec_runs + 5);
    DeleteVia(via, sb);
    rows_.push_back({"11a. exec `echo hi` through a gateway",
                     Ms(through.P(.5)) + " (" + Ms(through.P(.9)) + ")",
                     "the node directly, kept-alive connection", Ms(kept.P(.5)),
                     Ratio(through.P(.5), kept.P(.5)),
                     "p50 <= direct + 0.3 ms" + Met(through.P(.5) <= kept.P(.5) + 0.3)});
    Detail("11a", "n=" + std::to_string(exec_runs) +
                      " interleaved; p10/p50/p90/p99 through the gateway " + Dist(through, Ms) +
                      ", direct kept alive " + Dist(kept, Ms) +
                      ", direct with a new connection each " + Dist(fresh, Ms) +
                      "; gateway CPU per exec " +
                      Ms(gateway_cpu_ms));

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
    Detail("11c",
           "per node " + std::to_string(per_node[0]) + "/" + std::to_string(per_node[1]) + "/" +
               std::to_string(per_node[2]) +
               " (two random nodes with room, the less loaded; load from each node's record, "
               "read every second, plus what the gateway placed since); create through the "
               "gateway p10/p50/p90/p99 " +
               Dist(create_ms, Ms));
    TenantCreate();
  }

  // 11d: a tenant's create on a node that counts its quotas across the cluster in etcd (a
  // read and a transaction before the sandbox is made) against the admin's on the same node,
  // which counts nothing.
  void TenantCreate() {
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
    const std::string key = StringField(
        ParseObject(admin.Expect(201, "POST", "/v1/admin/tenants/bench/keys")), "key");
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

  void ExposedPort() {
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
    std::vector<int> direct_fds = SocketsInNetns(
        FindProcessWithArg(marker), static_cast<size_t>(2 * repeats + small + 3 * kWarmups));
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
      const std::string request = proxied
                                      ? "GET " + base + "/ports/" + port + "/bytes/" +
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
                     Format("%.2f GiB/s", through.P(.5)) + Format(" (%.2f)", through.P(.1)),
                     baseline, Format("%.2f GiB/s", direct.P(.5)),
                     Ratio(through.P(.5), direct.P(.5)), ">= 80% of direct" + Met(ratio >= 0.8)});
    rows_.push_back({"8b. exposed port: GET of " + std::to_string(kSmall) +
                         " bytes, a new connection each, through the daemon",
                     Ms(through_ms.P(.5)) + " (" + Ms(through_ms.P(.9)) + ")", baseline,
                     Ms(direct_ms.P(.5)), Ratio(through_ms.P(.5), direct_ms.P(.5)), "-"});
    auto gibps = [](double v) { return Format("%.2f", v); };
    auto per_second = [](Samples& s) {
      return Count(static_cast<double>(s.size()) * 1e3 / s.Sum());
    };
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

  // 9: sandboxes with egress. Their daemon turns forwarding on and loads nftables tables in its
  // network namespace, so it runs in one the bench makes (RunInPrivateNetns), with `lo` only and
  // a stub upstream DNS on it; the baseline is a plain (loopback) sandbox on the same daemon.
  void Egress() {
    if (options_.runtime != "namespace") {
      Detail("9", "not measured: egress needs the namespace runtime");
      return;
    }
    RunInPrivateNetns([&] { EgressInPrivateNetns(); });
  }

  // Figure 9c's lookups, timed in the interpreter: `python3 -c SCRIPT NAME ADDRESS N` prints the
  // nanoseconds of 5 warm-ups and N more getaddrinfo calls, each checked against ADDRESS ("-":
  // the name must not resolve).
  static constexpr const char* kLookups = R"(import socket, sys, time
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

  void EgressInPrivateNetns() {
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

  void EgressFigures(Daemon& daemon, const StubDns& upstream) {
    const int n = options_.quick ? 10 : 100;
    HttpClient http(daemon.port(), kApiKey);
    const std::string egress_body = R"({"network":{"egress":{"allow":["198.18.0.0/15",")" +
                                    std::string(kEgressName) + R"("]}}})";
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
  void DnsRoundTrip(HttpClient& http, const std::string& egress_body, const StubDns& upstream) {
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

  // Figure 12: a soak. Rounds of short commands, each round in a sandbox of its own, 8 in
  // flight, the sandbox deleted at its end. At the start, the middle and the end (all sandboxes
  // deleted, the daemon settled): its descriptors and RSS, and exec's p50 on a kept connection.
  void Soak() {
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
    for (int c = 0; c < kInFlight; ++c) {
      clients.push_back(std::make_unique<HttpClient>(daemon_->port(), kApiKey));
    }
    Samples latency;
    {
      // A round before the start's reading: the connections are open, what the daemon makes
      // once (on first use) is made.
      const std::string sb = CreateSandbox();
      (void)ParallelRequests(clients, "/v1/sandboxes/" + sb + "/exec", body, 5 * kInFlight,
                             &latency);
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
      rows_.push_back({"12. soak: " + what, value, "at the start", start_value,
                       Format("%.2fx", ratio), target});
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
                     " sandboxes (one per round, created and deleted), " +
                     std::to_string(kInFlight) + " kept connections in flight, " +
                     Format("%.0f", total / seconds) + " execs/s, p50/p99 " + Ms(latency.P(.5)) +
                     " / " + Ms(latency.P(.99)) +
                     "; each reading after its round's sandbox was deleted and the descriptor "
                     "count held still for 1 s (at most 15 s), exec p50 of " +
                     std::to_string(samples) + " on one kept connection in a fresh sandbox");
  }

  // The daemon's descriptor count once it has not changed for a second (a deleted sandbox's
  // last descriptors go as its teardown ends), or after 15 s.
  int SettledFds() const {
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

  void ManyCommands() {
    const int n = options_.quick ? 50 : 1000;
    const std::string sb = CreateSandbox();
    const std::string path = "/v1/sandboxes/" + sb + "/exec";
    const std::string body = R"({"cmd":"true"})";
    HttpClient kept(daemon_->port(), kApiKey);
    TrueOverWs ws(daemon_->port(), sb);
    Samples fresh, kept_alive, over_ws, base, handshake;
    for (int i = -5; i < n; ++i) {  // the first five warm every path up
      const int64_t t0 = MonotonicNs();
      std::string fresh_res;
      {
        HttpClient once(daemon_->port(), kApiKey);  // connects for its request, closes as it goes
        fresh_res = once.Expect(200, "POST", path, body);
      }
      const int64_t t1 = MonotonicNs();
      const std::string kept_res = kept.Expect(200, "POST", path, body);
      const int64_t t2 = MonotonicNs();
      CheckExecTrue(fresh_res);
      CheckExecTrue(kept_res);
      const int64_t id = ws.Send();
      double ws_ms = 0;
      if (ws.AwaitExit(&ws_ms) != id) throw BenchError("exec/ws: an exit for another command");
      double base_ms = 0;
      if (!RunShell("true", &base_ms).empty()) throw BenchError("sh -c 'true' printed something");
      const int64_t t3 = MonotonicNs();
      ::close(ConnectLoopback(daemon_->port()));
      const int64_t t4 = MonotonicNs();
      if (i < 0) continue;
      fresh.Add(static_cast<double>(t1 - t0) / 1e6);
      kept_alive.Add(static_cast<double>(t2 - t1) / 1e6);
      over_ws.Add(ws_ms);
      base.Add(base_ms);
      handshake.Add(static_cast<double>(t4 - t3) / 1e3);
    }

    std::vector<std::unique_ptr<HttpClient>> clients;
    for (int c = 0; c < kInFlight; ++c) {
      clients.push_back(std::make_unique<HttpClient>(daemon_->port(), kApiKey));
      clients.back()->Expect(200, "POST", path, body);  // connected before the clock starts
    }
    // Runs of at least five windows, so that the ramp at either end stays small.
    const int runs = 5, per_run = std::max(n / runs, 5 * kInFlight);
    Samples ws_rate, http_rate, ws_window_ms, http_window_ms;
    for (int r = 0; r < runs; ++r) {
      ws_rate.Add(WindowOverWs(ws, per_run, &ws_window_ms));
      http_rate.Add(ParallelRequests(clients, path, body, per_run, &http_window_ms));
    }
    ws.Close();
    DeleteSandbox(sb);

    const std::string label = " `true` x" + std::to_string(n) + ", ";
    const std::string per_connection = "6a: a TCP connection per command";
    auto latency = [](Samples& s) { return Ms(s.P(.5)) + " (" + Ms(s.P(.9)) + ")"; };
    auto rate = [](double per_second) { return Count(per_second) + " cmd/s"; };
    rows_.push_back({"6a." + label + "a new TCP connection per POST exec", latency(fresh),
                     "fork+exec+wait sh -c 'true'", Ms(base.P(.5)), Ratio(fresh.P(.5), base.P(.5)),
                     "-"});
    rows_.push_back({"6b." + label + "one kept-alive connection, POST exec each",
                     latency(kept_alive), per_connection, Ms(fresh.P(.5)),
                     Ratio(kept_alive.P(.5), fresh.P(.5)), "-"});
    rows_.push_back(
        {"6c." + label + "one exec/ws WebSocket, one at a time", latency(over_ws), per_connection,
         Ms(fresh.P(.5)), Ratio(over_ws.P(.5), fresh.P(.5)),
         "exec/ws saves the handshake: 6c below 6a" + Met(over_ws.P(.5) < fresh.P(.5))});
    rows_.push_back(
        {"6d. `true`, one exec/ws WebSocket, " + std::to_string(kInFlight) + " in flight",
         rate(ws_rate.P(.5)) + " (" + Count(ws_rate.P(.1)) + ")",
         "6e: " + std::to_string(kInFlight) + " kept-alive connections, a thread each",
         rate(http_rate.P(.5)), Ratio(ws_rate.P(.5), http_rate.P(.5)), "-"});
    auto per_second = [n](Samples& s) { return Count(n * 1e3 / s.Sum()); };
    Detail("6", "n=" + std::to_string(n) + " interleaved; per command p10/p50/p90/p99: 6a " +
                    Dist(fresh, Ms) + ", 6b " + Dist(kept_alive, Ms) + ", 6c " + Dist(over_ws, Ms) +
                    ", fork+exec+wait " + Dist(base, Ms) + "; commands/s 6a " + per_second(fresh) +
                    ", 6b " + per_second(kept_alive) + ", 6c " + per_second(over_ws) +
                    "; loopback TCP connect+close " + Dist(handshake, Us));
    Detail("6d", std::to_string(runs) + " runs of " + std::to_string(per_run) +
                     " commands each, interleaved; commands/s of the runs p10/p50/p90/p99 6d " +
                     Dist(ws_rate, Count) + ", 6e " + Dist(http_rate, Count) + "; per command 6d " +
                     Dist(ws_window_ms, Ms) + ", 6e " + Dist(http_window_ms, Ms));
  }

  void PrintTable() const {
    const std::vector<std::string> header = {
        "figure", "sandstream p50 (p90)", "baseline", "baseline p50", "ratio", "target"};
    std::vector<size_t> width(header.size());
    auto cells = [](const Row& r) {
      return std::vector<std::string>{r.figure,         r.value, r.baseline,
                                      r.baseline_value, r.ratio, r.target};
    };
    for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
    for (const auto& r : rows_) {
      const auto c = cells(r);
      for (size_t i = 0; i < c.size(); ++i) width[i] = std::max(width[i], c[i].size());
    }
    auto print = [&](const std::vector<std::string>& c) {
      std::string line;
      for (size_t i = 0; i < c.size(); ++i) {
        if (i > 0) line += " | ";
        line += c[i] + std::string(width[i] - c[i].size(), ' ');
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      std::printf("%s\n", line.c_str());
    };
    print(header);
    std::string rule;
    for (size_t i = 0; i < width.size(); ++i) rule += (i ? "-+-" : "") + std::string(width[i], '-');
    std::printf("%s\n", rule.c_str());
    for (const auto& r : rows_) print(cells(r));
    std::printf(
        "\nratio = sandstream / baseline (latency and memory: lower is better; "
        "throughput: higher is better). Throughput rows show median (slowest-decile run).\n\n");
    for (const auto& d : details_) std::printf("%s\n", d.c_str());
  }

  bool failed() const { return failed_; }

 private:
  std::string CreateSandbox(std::string_view body = "{}") { return CreateVia(*http_, body); }
  void DeleteSandbox(const std::string& id) { DeleteVia(*http_, id); }
  static std::string CreateVia(HttpClient& c, std::string_view body = "{}") {
    return StringField(ParseObject(c.Expect(201, "POST", "/v1/sandboxes", body)), "id");
  }
  static void DeleteVia(HttpClient& c, const std::string& id) {
    c.Expect(204, "DELETE", "/v1/sandboxes/" + id);
  }

  double MetricValue(std::string_view name) {
    const std::string text = http_->Expect(200, "GET", "/metrics");
    const std::string key = "\n" + std::string(name) + " ";
    const size_t at = text.find(key);
    if (at == std::string::npos) throw BenchError("metric " + std::string(name) + " is missing");
    return std::strtod(text.c_str() + at + key.size(), nullptr);
  }

  int64_t PeakRss() const {
    const std::string path = "/proc/" + std::to_string(daemon_->pid()) + "/status";
    FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) return 0;
    char line[256];
    int64_t kib = 0;
    while (std::fgets(line, sizeof line, f) != nullptr) {
      if (std::strncmp(line, "VmHWM:", 6) == 0) kib = std::strtoll(line + 6, nullptr, 10);
    }
    std::fclose(f);
    return kib * 1024;
  }

  // Lets exiting processes and freed pages settle before a memory reading.
  static void Settle() { std::this_thread::sleep_for(std::chrono::milliseconds(500)); }

  // One exec/stream of `cmd` in `sb`, read through `port` (the daemon's, or a gateway's).
  double StreamOnce(uint16_t port, const std::string& sb, const std::string& cmd,
                    const char* encoding, uint64_t bytes) {
    // Default settings: the daemon's log window, and the stream holding the producer back when
    // the client falls behind it (flow "wait"), so every byte must arrive without a gap.
    json::object req{{"cmd", cmd}, {"encoding", encoding}};
    const bool base64 = std::strcmp(encoding, "base64") == 0;
    uint64_t decoded = 0;
    bool exited = false;
    const int64_t t0 = MonotonicNs();
    SseStream stream(port, kApiKey, "POST", "/v1/sandboxes/" + sb + "/exec/stream",
                     json::serialize(req));
    while (!exited && stream.Pump([&](const SseStream::Event& e) {
      if (e.type == "stdout") {
        const std::string_view chunk = ChunkOf(e.data);
        decoded += base64 ? DecodedBase64Bytes(chunk) : DecodedUtf8Bytes(chunk);
      } else if (e.type == "exit") {
        exited = true;
        return false;
      } else if (e.type == "gap" || e.type == "error" || e.type == "stderr") {
        throw BenchError("stream of `" + cmd + "` (" + encoding + ") carried " +
                         std::string(e.type) + ": " + std::string(e.data).substr(0, 300));
      }
      return true;
    })) {
    }
    const int64_t t1 = MonotonicNs();
    if (!exited || decoded != bytes) {
      throw BenchError("stream of `" + cmd + "` (" + encoding + ") delivered " +
                       std::to_string(decoded) + " bytes" + (exited ? "" : " and no exit"));
    }
    return static_cast<double>(bytes) / (static_cast<double>(t1 - t0) / 1e9);
  }

  // `count` commands of `true` over `ws`, kInFlight at a time; returns commands per second.
  static double WindowOverWs(TrueOverWs& ws, int count, Samples* latency_ms) {
    const int64_t t0 = MonotonicNs();
    int sent = 0;
    for (; sent < std::min(count, kInFlight); ++sent) ws.Send();
    for (int done = 0; done < count; ++done) {
      double ms = 0;
      ws.AwaitExit(&ms);
      latency_ms->Add(ms);
      if (sent < count) {
        ws.Send();
        ++sent;
      }
    }
    return count / (static_cast<double>(MonotonicNs() - t0) / 1e9);
  }

  // `count` POST exec requests of `true`, a thread per client with one request in flight each;
  // returns commands per second.
  static double ParallelRequests(std::vector<std::unique_ptr<HttpClient>>& clients,
                                 const std::string& path, const std::string& body, int count,
                                 Samples* latency_ms) {
    std::atomic<int> next{0};
    std::vector<std::vector<double>> ms(clients.size());
    std::vector<std::exception_ptr> errors(clients.size());
    std::vector<std::thread> threads;
    const int64_t t0 = MonotonicNs();
    for (size_t c = 0; c < clients.size(); ++c) {
      threads.emplace_back([&, c] {
        try {
          while (next.fetch_add(1) < count) {
            const int64_t s = MonotonicNs();
            const std::string res = clients[c]->Expect(200, "POST", path, body);
            ms[c].push_back(static_cast<double>(MonotonicNs() - s) / 1e6);
            CheckExecTrue(res);
          }
        } catch (...) {
          errors[c] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    const int64_t t1 = MonotonicNs();
    for (const auto& e : errors) {
      if (e) std::rethrow_exception(e);
    }
    for (const auto& v : ms) {
      for (double x : v) latency_ms->Add(x);
    }
    return count / (static_cast<double>(t1 - t0) / 1e9);
  }

  RawRuntime& Raw() {
    if (!raw_) {
      raw_ = std::make_unique<RawRuntime>(options_.runtime, raw_dir_,
                                          static_cast<uint32_t>(options_.quick ? 200 : 1100));
    }
    return *raw_;
  }

  static std::string Dist(Samples& s, std::string (*unit)(double)) {
    return unit(s.P(.1)) + "/" + unit(s.P(.5)) + "/" + unit(s.P(.9)) + "/" + unit(s.P(.99));
  }

  void Detail(const std::string& figure, const std::string& text) {
    details_.push_back("[" + figure + "] " + text);
  }

  void Fail(const std::string& label, const std::string& message) {
    failed_ = true;
    rows_.push_back({label, "FAILED", "-", "-", "-", "-"});
    Detail(label, "FAILED: " + message);
    std::fprintf(stderr, "FAILED %s: %s\n", label.c_str(), message.c_str());
  }

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

std::string DefaultDaemonPath() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (ec ? std::filesystem::path(".") : self.parent_path()).string() + "/sandstreamd";
}

constexpr const char* kUsage =
    "usage: sandstream-bench [--quick] [--daemon PATH] [--runtime namespace|directory] "
    "[--only LIST]\n"
    "  --quick    short smoke of every figure (< 60 s); never a pass/fail on numbers\n"
    "  --daemon   sandstreamd to start (default: next to this program)\n"
    "  --runtime  passed to sandstreamd and used for the in-process baselines (default "
    "namespace)\n"
    "  --only     comma-separated figure numbers to measure, e.g. 1,4,6 (default: all)\n";

// "1,4,6" -> {1, 4, 6}; false unless every item is a figure number.
bool ParseFigures(const std::string& list, std::set<int>* figures) {
  size_t start = 0;
  for (;;) {
    const size_t comma = list.find(',', start);
    const std::string item = list.substr(start, comma - start);
    int number = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), number);
    if (ec != std::errc() || end != item.data() + item.size() || number < 1 || number > kFigures) {
      return false;
    }
    figures->insert(number);
    if (comma == std::string::npos) return true;
    start = comma + 1;
  }
}

int Main(int argc, char** argv) {
  Options options;
  options.daemon = DefaultDaemonPath();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::optional<std::string> value;  // --name=value or --name value
    if (const size_t eq = a.find('='); a.starts_with("--") && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a.resize(eq);
    } else if ((a == "--daemon" || a == "--runtime" || a == "--only") && i + 1 < argc) {
      value = argv[++i];
    }
    if (a == "--quick" && !value) {
      options.quick = true;
    } else if (a == "--daemon" && value) {
      options.daemon = *value;
    } else if (a == "--runtime" && value) {
      options.runtime = *value;
    } else if (a == "--only" && value) {
      if (!ParseFigures(*value, &options.only)) {
        std::fprintf(stderr, "--only takes figure numbers 1-%d, e.g. 1,4,6\n", kFigures);
        return 2;
      }
    } else {
      std::fputs(kUsage, a == "--help" || a == "-h" ? stdout : stderr);
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (options.runtime != "namespace" && options.runtime != "directory") {
    std::fprintf(stderr, "--runtime must be namespace or directory\n");
    return 2;
  }
  std::signal(SIGPIPE, SIG_IGN);

  // Thousands of streams and sandboxes need descriptors, in the bench and in the daemon.
  rlimit nofile{};
  ::getrlimit(RLIMIT_NOFILE, &nofile);
  nofile.rlim_cur = nofile.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &nofile);
  const int streams = static_cast<int>(std::min<rlim_t>(1000, (nofile.rlim_cur - 512) / 2));
  const int sandboxes = options.quick ? 100 : 1000;

  BenchCgroups cgroups;
  cgroups.EnterBench();
  char raw_template[] = "/tmp/sandstream-bench-raw.XXXXXX";
  if (::mkdtemp(raw_template) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string raw_dir = raw_template;

  bool failed = false;
  try {
    DaemonOptions daemon_options{options.daemon,
                                 options.runtime,
                                 kApiKey,
                                 {"--log-level", "warn", "--max-sandboxes",
                                  std::to_string(sandboxes + 120), "--teardown-on-exit", "true"},
                                 {}};
    utsname uts{};
    ::uname(&uts);
    std::printf("sandstream-bench%s: %s, runtime %s, %ld cores, kernel %s, cgroup accounting %s\n",
                options.quick ? " --quick" : "", options.daemon.c_str(), options.runtime.c_str(),
                ::sysconf(_SC_NPROCESSORS_ONLN), uts.release,
                cgroups.available() ? "private v1 cgroups" : "unavailable");
    std::fflush(stdout);
    Bench bench(options, daemon_options, cgroups, raw_dir);
    bench.Run(1, "1. exec warm", [&] { bench.ExecWarm(); });
    bench.Run(2, "2. first byte", [&] { bench.FirstByte(); });
    bench.Run(3, "3. throughput", [&] { bench.Throughput(); });
    bench.Run(4, "4. create + echo", [&] { bench.CreateEcho(); });
    bench.Run(5, "5a. stream memory", [&] { bench.StreamMemory(streams); });
    bench.Run(5, "5b. sandbox memory", [&] { bench.SandboxMemory(sandboxes); });
    bench.Run(6, "6. many short commands", [&] { bench.ManyCommands(); });
    bench.Run(7, "7. restart", [&] { bench.Adoption(options.quick ? 10 : 100); });
    bench.Run(8, "8. exposed port", [&] { bench.ExposedPort(); });
    bench.Run(9, "9. egress", [&] { bench.Egress(); });
    bench.Run(10, "10. templates", [&] { bench.Templates(); });
    bench.Run(11, "11. gateway", [&] { bench.Gateway(); });
    bench.Run(12, "12. soak", [&] { bench.Soak(); });
    std::printf("\n");
    bench.PrintTable();
    failed = bench.failed();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sandstream-bench: %s\n", e.what());
    failed = true;
  }
  std::error_code ec;
  std::filesystem::remove_all(raw_dir, ec);
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace sandstream::bench

int main(int argc, char** argv) {
  return sandstream::bench::Main(argc, argv);
}
