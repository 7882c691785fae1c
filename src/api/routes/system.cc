// GET /healthz (open; a cluster node's record to the admin key only) and GET /metrics
// (Prometheus text format 0.0.4).
#include <cstdio>

#include <boost/json.hpp>

#include "api/routes/routes.h"
#include "api/server.h"
#include "base/ids.h"
#include "base/version.h"
#include "http/prometheus.h"
#include "service/service.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {
const SteadyTime kStarted = SteadyNow();
}  // namespace

asio::awaitable<void> GetHealth(Context& ctx) {
  const auto up = std::chrono::duration_cast<std::chrono::seconds>(SteadyNow() - kStarted).count();
  json::object body;
  body["status"] = ctx.service.shutting_down() ? "stopping" : "ok";
  body["version"] = kVersion;
  body["runtime"] = ctx.service.runtime_name();
  body["uptime_seconds"] = up;
  if (ctx.server.options().node_record) {
    // The record (address, load, every tenant's template names) is for the admin key, which a
    // gateway without etcd holds; anyone else hears the node's id alone (every sandbox id of
    // the node says it).
    const std::string_view auth = ctx.Header(http::field::authorization);
    const bool admin =
        auth.starts_with("Bearer ") && SecretEquals(auth.substr(7), ctx.server.options().api_key);
    json::object record = ctx.server.options().node_record();
    if (!admin) record = json::object{{"id", record["id"]}};
    body["node"] = std::move(record);
  }
  co_await ReplyJson(ctx, http::status::ok, body);
}

asio::awaitable<void> GetMetrics(Context& ctx) {
  const Metrics& m = ctx.service.metrics();
  sandstream::http::PrometheusText p;
  auto count = [](auto n) { return static_cast<double>(n); };
  p.Single("sandstream_sandboxes", "gauge", "Live sandboxes.", count(ctx.service.sandbox_count()));
  p.Family("sandstream_sandboxes_by_state", "gauge",
           "Live sandboxes by state: running, paused, lost (and pausing, resuming, deleting).");
  for (const auto& [state, n] : ctx.service.CountByState()) {
    p.Sample("sandstream_sandboxes_by_state", {{"state", state}}, count(n));
  }
  p.Single("sandstream_pauses_total", "counter", "Sandboxes paused.", count(m.pauses_total));
  p.Single("sandstream_resumes_total", "counter",
           "Paused sandboxes resumed, asked for or by a request for one.", count(m.resumes_total));
  p.Single("sandstream_auto_resumes_total", "counter",
           "Paused sandboxes resumed by a request for them (auto_resume).",
           count(m.auto_resumes_total));
  p.Single("sandstream_processes_running", "gauge", "Running processes.",
           count(ctx.service.running_processes()));
  p.Single("sandstream_processes_started_total", "counter", "Processes started.",
           count(m.processes_started_total));
  p.Single("sandstream_sandboxes_created_total", "counter", "Sandboxes created.",
           count(m.sandboxes_created_total));
  p.Single("sandstream_streams_open", "gauge", "Open SSE streams.", count(m.streams_open));
  p.Single("sandstream_stream_bytes_total", "counter", "Bytes written to SSE streams.",
           count(m.stream_bytes_total));
  p.Single("sandstream_gaps_total", "counter", "Gap events sent to readers that fell behind.",
           count(m.gaps_total));
  p.Family("sandstream_http_requests_total", "counter", "HTTP requests answered, by status.");
  for (const auto& [code, n] : m.http_requests_total) {
    p.Sample("sandstream_http_requests_total", {{"code", std::to_string(code)}}, count(n));
  }
  p.Single("sandstream_sandboxes_egress", "gauge", "Live sandboxes with egress.",
           count(ctx.service.egress_sandboxes()));
  p.Family("sandstream_dns_queries_total", "counter",
           "Queries of sandboxes with egress, by outcome.");
  for (const auto& [outcome, n] : m.dns_queries_total) {
    p.Sample("sandstream_dns_queries_total", {{"outcome", outcome}}, count(n));
  }
  if (const Access* access = ctx.service.access(); access && !access->tenants().empty()) {
    const std::pair<const char*, int64_t TenantUsage::*> gauges[] = {
        {"sandboxes", &TenantUsage::sandboxes},
        {"running_processes", &TenantUsage::running_processes},
        {"memory_mb", &TenantUsage::memory_mb},
        {"cpu_percent", &TenantUsage::cpu_percent},
        {"disk_mb", &TenantUsage::disk_mb},
        {"streams", &TenantUsage::streams}};
    std::vector<std::pair<std::string, TenantUsage>> usage;
    for (const auto& [name, t] : access->tenants())
      usage.emplace_back(name, ctx.service.Usage(name));
    for (const auto& [gauge, field] : gauges) {
      const std::string metric = std::string("sandstream_tenant_") + gauge;
      p.Family(metric, "gauge", std::string("What a tenant's sandboxes take now (") + gauge + ").");
      for (const auto& [name, u] : usage) p.Sample(metric, {{"tenant", name}}, count(u.*field));
    }
  }
  if (ctx.server.options().metrics_per_sandbox) {
    const ResourceSampler& sampler = ctx.service.resources();
    const std::pair<const char*, const char*> families[] = {
        {"sandstream_sandbox_cpu_used_percent", "Share of its CPUs a sandbox used (last sample)."},
        {"sandstream_sandbox_memory_used_bytes", "Memory a sandbox uses, file cache aside."},
        {"sandstream_sandbox_disk_used_bytes", "What a sandbox wrote to its filesystem."}};
    for (size_t k = 0; k < std::size(families); ++k) {
      p.Family(families[k].first, "gauge", families[k].second);
      for (const SandboxEntry* sb : ctx.service.List()) {
        const ResourceSeries* series = sampler.Find(sb->id);
        if (!series || series->samples.empty()) continue;
        const ResourceSample& s = series->samples.back();
        const double value = k == 0   ? s.cpu_used_pct
                             : k == 1 ? count(s.memory_used)
                                      : count(s.disk_used);
        p.Sample(families[k].first, {{"sandbox", sb->id}}, value);
      }
    }
  }
  // Each family's help, then its histograms, each under its labels.
  using Label = sandstream::http::PrometheusText::Label;
  using Labelled = std::pair<std::vector<Label>, const Histogram*>;
  const auto by_mode = [](const Histogram(&h)[2]) {
    return std::vector<Labelled>{{{{"mode", "freeze"}}, &h[0]}, {{{"mode", "checkpoint"}}, &h[1]}};
  };
  const std::tuple<const char*, const char*, std::vector<Labelled>> histograms[] = {
      {"sandstream_exec_duration_seconds",
       "Buffered exec, request to result.",
       {{{}, &m.exec_duration}}},
      {"sandstream_pause_duration_seconds",
       "Pausing a sandbox, asked to its processes stopped (mode checkpoint: written to disk).",
       by_mode(m.pause_duration)},
      {"sandstream_resume_duration_seconds", "Resuming a paused sandbox, asked to running.",
       by_mode(m.resume_duration)},
      {"sandstream_fork_duration_seconds",
       "Forks with memory, asked to every fork running (one call, however many forks).",
       {{{}, &m.fork_duration}}}};
  for (const auto& [name, help, labelled] : histograms) {
    const std::string family = name;
    p.Family(family, "histogram", help);
    for (const auto& [labels, h] : labelled) {
      uint64_t cumulative = 0;
      for (size_t i = 0; i <= Histogram::kBounds.size(); ++i) {
        cumulative += h->counts[i];
        char le[32];
        if (i < Histogram::kBounds.size()) {
          std::snprintf(le, sizeof le, "%g", Histogram::kBounds[i]);
        } else {
          std::snprintf(le, sizeof le, "+Inf");
        }
        auto with_le = labels;
        with_le.emplace_back("le", le);
        p.Sample(family + "_bucket", with_le, count(cumulative));
      }
      p.Sample(family + "_sum", labels, h->sum);
      p.Sample(family + "_count", labels, count(h->count));
    }
  }
  p.Single("sandstream_forks_total", "counter", "Sandboxes made by forks with memory.",
           count(m.forks_total));
  co_await Reply(ctx, http::status::ok, p.Take(),
                 std::string(sandstream::http::kPrometheusContentType));
}

}  // namespace sandstream::api
