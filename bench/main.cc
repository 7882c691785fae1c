// sandstream-bench: starts the real sandstreamd and measures the brief's performance figures,
// each beside a baseline measured in the same run, and prints them as a table with ratios.
// It never fails on a number (the machine is shared and noisy); it fails only when a figure
// cannot be measured at all. Usage: see --help and bench/README.md.
// This file: the flags, the figures in their order (--only picks some), and the harness that
// bench.h declares; each figure's own code is in its fig_*.cc.
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
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

#include "bench.h"

namespace sandstream::bench {
namespace {

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

}  // namespace

Bench::Bench(const Options& options, DaemonOptions daemon_options, BenchCgroups& cgroups,
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

void Bench::Restart() {
  http_.reset();
  daemon_.reset();
  daemon_ = std::make_unique<Daemon>(daemon_options_, cgroups_);
  http_ = std::make_unique<HttpClient>(daemon_->port(), kApiKey);
}

void Bench::Run(int number, const std::string& label, const std::function<void()>& figure) {
  if (!options_.only.empty() && !options_.only.contains(number)) return;
  std::fprintf(stderr, "measuring: %s\n", label.c_str());
  try {
    figure();
  } catch (const std::exception& e) {
    Fail(label, e.what());
  }
  if (!daemon_->Alive()) {
    Detail(label, "sandstreamd exited during this figure; its log ends: " + daemon_->LogTail(800));
    Restart();
  }
}

void Bench::PrintTable() const {
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

bool Bench::WriteJson(const std::string& path) const {
  std::FILE* out = std::fopen(path.c_str(), "w");
  if (!out) return false;
  for (const Row& r : rows_) {
    boost::json::object o{{"figure", r.figure},     {"value", r.value},
                          {"baseline", r.baseline}, {"baseline_value", r.baseline_value},
                          {"ratio_text", r.ratio},  {"target", r.target}};
    // "1.55x", as Ratio writes it.
    double ratio = 0;
    const auto [end, ec] = std::from_chars(r.ratio.data(), r.ratio.data() + r.ratio.size(), ratio);
    const bool number = ec == std::errc() && end != r.ratio.data() && *end == 'x' &&
                        end + 1 == r.ratio.data() + r.ratio.size();
    o["ratio"] = number ? boost::json::value(ratio) : boost::json::value(nullptr);
    const std::string line = boost::json::serialize(o) + "\n";
    std::fputs(line.c_str(), out);
  }
  return std::fclose(out) == 0;
}

std::string Bench::CreateVia(HttpClient& c, std::string_view body) {
  return StringField(ParseObject(c.Expect(201, "POST", "/v1/sandboxes", body)), "id");
}

void Bench::DeleteVia(HttpClient& c, const std::string& id) {
  c.Expect(204, "DELETE", "/v1/sandboxes/" + id);
}

double Bench::MetricValue(std::string_view name) {
  const std::string text = http_->Expect(200, "GET", "/metrics");
  const std::string key = "\n" + std::string(name) + " ";
  const size_t at = text.find(key);
  if (at == std::string::npos) throw BenchError("metric " + std::string(name) + " is missing");
  return std::strtod(text.c_str() + at + key.size(), nullptr);
}

int64_t Bench::PeakRss() const {
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

void Bench::Settle() {
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
}

double Bench::StreamOnce(uint16_t port, const std::string& sb, const std::string& cmd,
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
      throw BenchError("stream of `" + cmd + "` (" + encoding + ") carried " + std::string(e.type) +
                       ": " + std::string(e.data).substr(0, 300));
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

double Bench::ParallelRequests(std::vector<std::unique_ptr<HttpClient>>& clients,
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

RawRuntime& Bench::Raw() {
  if (!raw_) {
    raw_ = std::make_unique<RawRuntime>(options_.runtime, raw_dir_,
                                        static_cast<uint32_t>(options_.quick ? 200 : 1100));
  }
  return *raw_;
}

void Bench::Detail(const std::string& figure, const std::string& text) {
  details_.push_back("[" + figure + "] " + text);
}

void Bench::Fail(const std::string& label, const std::string& message) {
  failed_ = true;
  rows_.push_back({label, "FAILED", "-", "-", "-", "-"});
  Detail(label, "FAILED: " + message);
  std::fprintf(stderr, "FAILED %s: %s\n", label.c_str(), message.c_str());
}

namespace {

std::string DefaultDaemonPath() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (ec ? std::filesystem::path(".") : self.parent_path()).string() + "/sandstreamd";
}

constexpr const char* kUsage =
    "usage: sandstream-bench [--quick] [--daemon PATH] [--runtime namespace|directory] "
    "[--only LIST] [--json PATH]\n"
    "  --quick    short smoke of every figure (< 60 s); never a pass/fail on numbers\n"
    "  --daemon   sandstreamd to start (default: next to this program)\n"
    "  --runtime  passed to sandstreamd and used for the in-process baselines (default "
    "namespace)\n"
    "  --only     comma-separated figure numbers to measure, e.g. 1,4,6 (default: all)\n"
    "  --json     also write the table's rows to PATH as JSON lines (bench/compare reads them)\n";

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
    } else if ((a == "--daemon" || a == "--runtime" || a == "--only" || a == "--json") &&
               i + 1 < argc) {
      value = argv[++i];
    }
    if (a == "--quick" && !value) {
      options.quick = true;
    } else if (a == "--daemon" && value) {
      options.daemon = *value;
    } else if (a == "--runtime" && value) {
      options.runtime = *value;
    } else if (a == "--json" && value) {
      options.json = *value;
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
    bench.Run(13, "13. pause and resume", [&] { bench.PauseResume(); });
    std::printf("\n");
    bench.PrintTable();
    failed = bench.failed();
    if (!options.json.empty() && !bench.WriteJson(options.json)) {
      std::fprintf(stderr, "sandstream-bench: cannot write %s\n", options.json.c_str());
      failed = true;
    }
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
