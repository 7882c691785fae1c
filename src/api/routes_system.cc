// GET /healthz and GET /metrics (Prometheus text format 0.0.4).
#include <boost/json.hpp>
#include <cstdio>

#include "api/routes.h"
#include "api/server.h"
#include "base/version.h"
#include "service/service.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {
const SteadyTime kStarted = SteadyNow();

void Metric(std::string& out, std::string_view name, std::string_view type, std::string_view help,
            double value) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
  out += name;
  char buf[64];
  std::snprintf(buf, sizeof buf, " %.17g\n", value);
  out += buf;
}
}  // namespace

asio::awaitable<void> GetHealth(Context& ctx) {
  const auto up = std::chrono::duration_cast<std::chrono::seconds>(SteadyNow() - kStarted).count();
  json::object body;
  body["status"] = ctx.service.shutting_down() ? "stopping" : "ok";
  body["version"] = kVersion;
  body["runtime"] = ctx.service.runtime_name();
  body["uptime_seconds"] = up;
  if (ctx.server.options().node_record) body["node"] = ctx.server.options().node_record();
  co_await ReplyJson(ctx, http::status::ok, body);
}

asio::awaitable<void> GetMetrics(Context& ctx) {
  const Metrics& m = ctx.service.metrics();
  std::string out;
  Metric(out, "sandstream_sandboxes", "gauge", "Live sandboxes.",
         static_cast<double>(ctx.service.sandbox_count()));
  Metric(out, "sandstream_processes_running", "gauge", "Running processes.",
         static_cast<double>(ctx.service.running_processes()));
  Metric(out, "sandstream_processes_started_total", "counter", "Processes started.",
         static_cast<double>(m.processes_started_total));
  Metric(out, "sandstream_sandboxes_created_total", "counter", "Sandboxes created.",
         static_cast<double>(m.sandboxes_created_total));
  Metric(out, "sandstream_streams_open", "gauge", "Open SSE streams.",
         static_cast<double>(m.streams_open));
  Metric(out, "sandstream_stream_bytes_total", "counter", "Bytes written to SSE streams.",
         static_cast<double>(m.stream_bytes_total));
  Metric(out, "sandstream_gaps_total", "counter", "Gap events sent to readers that fell behind.",
         static_cast<double>(m.gaps_total));
  out += "# HELP sandstream_http_requests_total HTTP requests answered, by status.\n";
  out += "# TYPE sandstream_http_requests_total counter\n";
  for (const auto& [code, n] : m.http_requests_total) {
    out += "sandstream_http_requests_total{code=\"" + std::to_string(code) + "\"} " +
           std::to_string(n) + "\n";
  }
  Metric(out, "sandstream_sandboxes_egress", "gauge", "Live sandboxes with egress.",
         static_cast<double>(ctx.service.egress_sandboxes()));
  out += "# HELP sandstream_dns_queries_total Queries of sandboxes with egress, by outcome.\n";
  out += "# TYPE sandstream_dns_queries_total counter\n";
  for (const auto& [outcome, n] : m.dns_queries_total) {
    out += "sandstream_dns_queries_total{outcome=\"" + outcome + "\"} " + std::to_string(n) +
           "\n";
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
    for (const auto& [name, t] : access->tenants()) usage.emplace_back(name, ctx.service.Usage(name));
    for (const auto& [gauge, field] : gauges) {
      const std::string metric = std::string("sandstream_tenant_") + gauge;
      out += "# HELP " + metric + " What a tenant's sandboxes take now (" + gauge + ").\n";
      out += "# TYPE " + metric + " gauge\n";
      for (const auto& [name, u] : usage) {
        out += metric + "{tenant=\"" + name + "\"} " + std::to_string(u.*field) + "\n";
      }
    }
  }
  out += "# HELP sandstream_exec_duration_seconds Buffered exec, request to result.\n";
  out += "# TYPE sandstream_exec_duration_seconds histogram\n";
  uint64_t cumulative = 0;
  const auto& h = m.exec_duration;
  for (size_t i = 0; i <= Histogram::kBounds.size(); ++i) {
    cumulative += h.counts[i];
    char le[32];
    if (i < Histogram::kBounds.size()) {
      std::snprintf(le, sizeof le, "%g", Histogram::kBounds[i]);
    } else {
      std::snprintf(le, sizeof le, "+Inf");
    }
    out += "sandstream_exec_duration_seconds_bucket{le=\"" + std::string(le) + "\"} " +
           std::to_string(cumulative) + "\n";
  }
  char sum[64];
  std::snprintf(sum, sizeof sum, "%.9g", h.sum);
  out += "sandstream_exec_duration_seconds_sum " + std::string(sum) + "\n";
  out += "sandstream_exec_duration_seconds_count " + std::to_string(h.count) + "\n";
  co_await Reply(ctx, http::status::ok, std::move(out), "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace sandstream::api
