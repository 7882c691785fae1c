// Figures 1 and 6: exec of a short command in a warm sandbox, one at a time (1) and many in
// a row over requests and over one exec/ws WebSocket, sequential and kInFlight at once (6).
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench.h"

namespace sandstream::bench {

namespace {

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

// `count` commands of `true` over `ws`, kInFlight at a time; returns commands per second.
double WindowOverWs(TrueOverWs& ws, int count, Samples* latency_ms) {
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

}  // namespace

void Bench::ExecWarm() {
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

// Many short commands: a request each (a new connection, or a kept-alive one) against one
// exec/ws WebSocket, sequential and interleaved run by run; then kInFlight at once.
void Bench::ManyCommands() {
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
  rows_.push_back({"6b." + label + "one kept-alive connection, POST exec each", latency(kept_alive),
                   per_connection, Ms(fresh.P(.5)), Ratio(kept_alive.P(.5), fresh.P(.5)), "-"});
  rows_.push_back({"6c." + label + "one exec/ws WebSocket, one at a time", latency(over_ws),
                   per_connection, Ms(fresh.P(.5)), Ratio(over_ws.P(.5), fresh.P(.5)),
                   "exec/ws saves the handshake: 6c below 6a" + Met(over_ws.P(.5) < fresh.P(.5))});
  rows_.push_back({"6d. `true`, one exec/ws WebSocket, " + std::to_string(kInFlight) + " in flight",
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

}  // namespace sandstream::bench
