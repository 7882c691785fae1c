// Sandboxes: create, list, get, delete, pause and resume, and their lifecycle journal as logs or
// events.
#include <boost/json.hpp>

#include "api/common/lookup.h"
#include "api/common/metrics.h"
#include "api/request.h"
#include "api/routes/routes.h"
#include "api/stream.h"
#include "service/codec.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

asio::awaitable<void> Journal(Context& ctx, bool as_logs) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  std::shared_ptr<EventLog> journal = (*sb)->journal;
  auto after = StartPoint(ctx, *journal, 0);
  if (!after) co_return co_await ReplyError(ctx, after.error());
  const uint64_t start = *after;
  auto follow = ctx.QueryFlag("follow");
  if (!follow) co_return co_await ReplyError(ctx, follow.error());

  if (!WantsStream(ctx, *follow)) {
    json::array items;
    for (const Event* e : journal->Read(start, UINT64_MAX).entries) {
      items.push_back(json::parse(as_logs ? e->summary : e->data));
    }
    json::object body;
    body[as_logs ? "logs" : "events"] = std::move(items);
    co_return co_await ReplyJson(ctx, http::status::ok, body);
  }
  EventRender render = RenderEvent;
  if (as_logs) {
    render = [](std::string& out, const Event& e) {
      sse::AppendEvent(out, e.seq, "log", e.summary);
    };
  }
  co_await ServeEvents(ctx, std::move(journal), start, *follow, std::move(render));
}

}  // namespace

asio::awaitable<void> CreateSandbox(Context& ctx) {
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  auto req = ParseSandboxRequest(*body);
  if (!req) co_return co_await ReplyError(ctx, req.error());
  // A tenant's sandbox is its own; the admin may make one for a tenant.
  req->tenant = ctx.principal.tenant;
  req->by = ctx.principal.credential;
  if (const json::value* tenant = body->if_contains("tenant"); tenant && !tenant->is_null()) {
    if (!tenant->is_string())
      co_return co_await ReplyError(ctx, Invalid("tenant must be a string"));
    const std::string name(tenant->as_string());
    if (!ctx.principal.admin() && name != ctx.principal.tenant) {
      co_return co_await ReplyError(ctx, ErrorCode::kForbidden,
                                    "only the admin makes sandboxes for another tenant");
    }
    if (!ctx.service.quotas().TenantOf(name)) {
      co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest, "no tenant '" + name + "'");
    }
    req->tenant = name;
  }
  Result<const SandboxEntry*> sb = co_await ctx.service.CreateSandbox(std::move(*req));
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  co_await ReplyJson(ctx, http::status::created, SandboxJson(**sb));
}

asio::awaitable<void> ListSandboxes(Context& ctx) {
  json::array items;
  for (const SandboxEntry* sb : ctx.service.List()) {
    if (ctx.principal.Sees(sb->tenant, sb->id)) items.push_back(SandboxJson(*sb));
  }
  json::object body;
  body["sandboxes"] = std::move(items);
  co_await ReplyJson(ctx, http::status::ok, body);
}

asio::awaitable<void> GetSandbox(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  co_await ReplyJson(ctx, http::status::ok, SandboxJson(**sb));
}

asio::awaitable<void> SandboxMetrics(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto start = TimeQuery(ctx, "start");
  if (!start) co_return co_await ReplyError(ctx, start.error());
  auto end = TimeQuery(ctx, "end");
  if (!end) co_return co_await ReplyError(ctx, end.error());
  const auto& sampler = ctx.service.resources();
  json::object body;
  body["sandbox_id"] = (*sb)->id;
  body["interval_seconds"] = static_cast<double>(sampler.interval().count()) / 1000;
  json::array samples;
  if (const ResourceSeries* series = sampler.Find((*sb)->id)) {
    body["cpu_count"] = series->cpu_count;
    body["memory_total_bytes"] = series->memory_total;
    body["disk_total_bytes"] = series->disk_total;
    for (const ResourceSample* s : SamplesIn(*series, *start, *end)) {
      samples.push_back(json::object{{"timestamp", FormatRfc3339(s->at)},
                                     {"cpu_used_pct", s->cpu_used_pct},
                                     {"memory_used_bytes", s->memory_used},
                                     {"memory_cache_bytes", s->memory_cache},
                                     {"disk_used_bytes", s->disk_used}});
    }
  } else {
    // Before its first sample: its limits, and no samples yet.
    body["cpu_count"] = static_cast<double>((*sb)->limits.cpu_percent) / 100;
    body["memory_total_bytes"] = static_cast<uint64_t>((*sb)->limits.memory_mb) << 20;
    body["disk_total_bytes"] = nullptr;
  }
  body["samples"] = std::move(samples);
  co_await ReplyJson(ctx, http::status::ok, body);
}

asio::awaitable<void> DeleteSandbox(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto deleted = co_await ctx.service.DeleteSandbox(ctx.params.at(0));
  if (!deleted) co_return co_await ReplyError(ctx, deleted.error());
  co_await ReplyEmpty(ctx, http::status::no_content);
}

asio::awaitable<void> PauseSandbox(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  auto mode = ParsePauseRequest(*body);
  if (!mode) co_return co_await ReplyError(ctx, mode.error());
  auto paused =
      co_await ctx.service.PauseSandbox(ctx.params.at(0), *mode, ctx.principal.credential);
  if (!paused) co_return co_await ReplyError(ctx, paused.error());
  co_await ReplyJson(ctx, http::status::ok, SandboxJson(**paused));
}

asio::awaitable<void> UpdateSandbox(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  auto change = ParseLifecycleUpdate(*body);
  if (!change) co_return co_await ReplyError(ctx, change.error());
  auto updated = ctx.service.UpdateLifecycle(ctx.params.at(0), *change);
  if (!updated) co_return co_await ReplyError(ctx, updated.error());
  co_await ReplyJson(ctx, http::status::ok, SandboxJson(**updated));
}

asio::awaitable<void> UpdateNetwork(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  // A `network` as at create: an object ({"egress": ...}) or a string ("egress").
  auto body = ParseBodyValue(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  auto policy = ParseEgressUpdate(*body);
  if (!policy) co_return co_await ReplyError(ctx, policy.error());
  auto updated = co_await ctx.service.UpdateEgress(ctx.params.at(0), std::move(*policy),
                                                   ctx.principal.credential);
  if (!updated) co_return co_await ReplyError(ctx, updated.error());
  co_await ReplyJson(ctx, http::status::ok, SandboxJson(**updated));
}

asio::awaitable<void> ResumeSandbox(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto resumed = co_await ctx.service.ResumeSandbox(ctx.params.at(0), ctx.principal.credential);
  if (!resumed) co_return co_await ReplyError(ctx, resumed.error());
  co_await ReplyJson(ctx, http::status::ok, SandboxJson(**resumed));
}

asio::awaitable<void> SandboxLogs(Context& ctx) {
  co_await Journal(ctx, true);
}
asio::awaitable<void> SandboxEvents(Context& ctx) {
  co_await Journal(ctx, false);
}

}  // namespace sandstream::api
