// Figures 2 and 3: an exec/stream's first byte against a pipe's, and its throughput.
#include <cstdint>
#include <string>
#include <string_view>

#include "bench.h"

namespace sandstream::bench {

void Bench::FirstByte() {
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
                   Us(http.P(.5)) + " (" + Us(http.P(.9)) + ")", "same writer, raw pipe -> reader",
                   Us(base.P(.5)), Ratio(http.P(.5), base.P(.5)),
                   "p50 <= 100 us" + Met(http.P(.5) <= 100)});
  Detail("2", "a bash loop printing $EPOCHREALTIME every 10 ms, exec/stream; n=" +
                  std::to_string(http.size()) + "; sandstream p10/p50/p90/p99 " + Dist(http, Us) +
                  "; baseline " + Dist(base, Us));
}

void Bench::Throughput() {
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
                     Ratio(gibps.P(.5), chain.P(.5)), ">= 0.8 GiB/s, >= 70% of chain" + Met(met)});
  }
  Detail("3", "N=" + std::to_string(bytes >> 20) + " MiB, " + std::to_string(repeats) +
                  " run(s) each; the client counts decoded bytes and checks for gaps; "
                  "CPU seconds per GiB of output" +
                  cpu + "; daemon peak RSS (VmHWM) " +
                  Format("%.0f MiB", static_cast<double>(PeakRss()) / kMiB) +
                  " at default settings (8 MiB log window, flow wait)");
}

}  // namespace sandstream::bench
