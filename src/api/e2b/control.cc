// E2B's control plane: sandboxes created, listed, described, kept alive and killed as its SDKs
// ask, on the service calls sandstream's own /v1/sandboxes routes use.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <tuple>

#include <boost/json.hpp>
#include <boost/url/decode_view.hpp>

#include "api/common/metrics.h"
#include "api/e2b/connect.h"
#include "api/e2b/routes.h"
#include "api/request.h"
#include "api/routes/routes.h"
#include "base/clock.h"
#include "base/ids.h"
#include "base/log.h"
#include "net/ipv4.h"

namespace sandstream::api::e2b {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// The envd version the SDKs are told: they turn features on and off by it (docs/e2b.md).
constexpr std::string_view kEnvdVersion = "0.5.7";
// E2B's default sandbox timeout, for a create that names none.
constexpr int64_t kDefaultTimeoutSeconds = 300;

// A sandbox the caller may see, by the route's first parameter.
Result<const SandboxEntry*> Visible(Context& ctx) {
  const std::string& id = ctx.params.at(0);
  const SandboxEntry* sb = ctx.service.Find(id);
  if (!sb || sb->deleting || !ctx.principal.Sees(sb->tenant, sb->id)) {
    return Error{ErrorCode::kNotFound, "sandbox " + id + " not found"};
  }
  return sb;
}

// metadata as E2B has it: strings only.
json::object Metadata(const json::object& metadata) {
  json::object out;
  for (const auto& [key, value] : metadata) {
    out[key] =
        value.is_string() ? json::value(value.as_string()) : json::value(json::serialize(value));
  }
  return out;
}

// The access token of `sb` for the caller: the admin's, or one that stands on the caller's key
// and ends when it is revoked.
std::string AccessToken(const Context& ctx, const SandboxEntry& sb) {
  const std::string_view holder = ctx.principal.admin() ? kAdminHolder : ctx.principal.key;
  return SandboxAccessToken(ctx.server.options().api_key, sb.id, holder);
}

// E2B knows two states: a sandbox being paused is paused to it, one being resumed running.
std::string_view E2bState(const SandboxEntry& sb) {
  const std::string_view state = SandboxState(sb);
  return state == "paused" || state == "pausing" ? "paused" : "running";
}

// The Sandbox of a create or connect, with the token the SDK sends to envd.
json::object Created(const Context& ctx, const SandboxEntry& sb) {
  json::object o;
  o["templateID"] = sb.template_name;
  o["sandboxID"] = sb.id;
  o["alias"] = sb.template_name;
  o["clientID"] = "sandstream";
  o["envdVersion"] = kEnvdVersion;
  o["envdAccessToken"] = AccessToken(ctx, sb);
  // The same token: the code interpreter SDKs show only this one on /contexts.
  o["trafficAccessToken"] = o["envdAccessToken"];
  o["domain"] = PreviewDomain(ctx);
  return o;
}

// A ListedSandbox; with `detail`, a SandboxDetail.
json::object Described(const Context& ctx, const SandboxEntry& sb, bool detail) {
  json::object o;
  o["templateID"] = sb.template_name;
  o["sandboxID"] = sb.id;
  o["alias"] = sb.template_name;
  o["clientID"] = "sandstream";
  o["startedAt"] = FormatRfc3339(sb.created_at);
  // A sandbox without a TTL has no end: the SDKs need a date, so the last one there is.
  // Paused, it ends when its paused_ttl does unless resumed.
  const std::optional<SystemTime> end = EndsAt(sb);
  o["endAt"] = end ? FormatRfc3339(*end) : "9999-12-31T23:59:59.000Z";
  o["cpuCount"] = std::max<int64_t>(1, (sb.limits.cpu_percent + 99) / 100);
  o["memoryMB"] = sb.limits.memory_mb;
  o["diskSizeMB"] = sb.limits.disk_mb;
  o["state"] = E2bState(sb);
  o["envdVersion"] = kEnvdVersion;
  o["metadata"] = Metadata(sb.metadata);
  json::array mounts;
  for (const SandboxVolume& v : sb.volumes) {
    mounts.push_back(json::object{{"name", v.name}, {"path", v.path}});
  }
  o["volumeMounts"] = std::move(mounts);
  if (detail) {
    o["domain"] = PreviewDomain(ctx);
    o["envdAccessToken"] = AccessToken(ctx, sb);
    o["trafficAccessToken"] = o["envdAccessToken"];
    o["allowInternetAccess"] = sb.network == sandbox::NetworkMode::kEgress;
  }
  return o;
}

// The body's `timeout` (seconds), if it has one.
Result<std::optional<int64_t>> TimeoutOf(const json::object& body) {
  return OptInt(body, "timeout", {}, 0, kMaxTtlSeconds);
}

// The route's sandbox and the body's `timeout`: connect and timeout.
struct TimeoutRequest {
  const SandboxEntry* sb = nullptr;
  std::optional<int64_t> timeout;
};
Result<TimeoutRequest> ReadTimeout(Context& ctx) {
  auto sb = Visible(ctx);
  if (!sb) return std::move(sb).error();
  auto body = ParseBody(ctx);
  if (!body) return std::move(body).error();
  auto timeout = TimeoutOf(*body);
  if (!timeout) return std::move(timeout).error();
  return TimeoutRequest{*sb, *timeout};
}

// A map of strings (metadata, envVars) as sandstream's request has it.
Result<json::value> Strings(const json::object& body, std::string_view key) {
  const json::value* v = Field(body, key);
  if (!v) return json::value(json::object());
  if (!v->is_object()) return Invalid(std::string(key) + " must be an object of strings");
  for (const auto& [name, value] : v->as_object()) {
    if (!value.is_string())
      return Invalid(std::string(key) + "." + std::string(name) + " must be a string");
  }
  return *v;
}

// ?metadata=k%3Dv%26k2%3Dv2 (the pairs url-encoded once more): whether `sb` has all of them.
bool MetadataMatches(const SandboxEntry& sb, std::string_view filter) {
  while (!filter.empty()) {
    const size_t amp = filter.find('&');
    const std::string_view pair = filter.substr(0, amp);
    filter = amp == std::string_view::npos ? std::string_view() : filter.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    auto decode = [](std::string_view text) {
      auto view = boost::urls::make_pct_string_view(text);
      return view ? std::string(boost::urls::decode_view(*view).begin(),
                                boost::urls::decode_view(*view).end())
                  : std::string(text);
    };
    const std::string key = decode(pair.substr(0, eq));
    const std::string value = eq == std::string_view::npos ? "" : decode(pair.substr(eq + 1));
    const json::value* have = sb.metadata.if_contains(key);
    if (!have || !have->is_string() || have->as_string() != value) return false;
  }
  return true;
}

// A list of strings at `key` of E2B's network object (allowOut, denyOut), empty when absent.
Result<std::vector<std::string>> RuleList(const json::object& network, std::string_view key) {
  std::vector<std::string> out;
  const json::value* v = Field(network, key);
  if (!v) return out;
  if (!v->is_array()) return Invalid("network." + std::string(key) + " must be a list of strings");
  for (const json::value& item : v->as_array()) {
    if (!item.is_string()) {
      return Invalid("network." + std::string(key) + " must be a list of strings");
    }
    out.emplace_back(item.as_string());
  }
  return out;
}

// Whether EgressOf reads rules for a create or for a running sandbox.
enum class NetworkUse { kCreate, kUpdate };

// E2B's egress rules as sandstream's `network`. In E2B an allowOut entry wins over denyOut; in
// sandstream deny wins, so: a denyOut of 0.0.0.0/0, or no internet (`open` false), allows
// allowOut alone (less the other denials); otherwise every public address is open but
// denyOut's. An allowOut address inside a denied CIDR, which would win on E2B, cannot here and
// is refused. No rules: open, or nothing: at create no network, for a running sandbox (whose
// network mode is fixed at create) egress that allows nothing.
Result<json::value> EgressOf(const json::object& network, bool open, NetworkUse use) {
  auto allow_out = RuleList(network, "allowOut");
  if (!allow_out) return std::move(allow_out).error();
  auto deny_out = RuleList(network, "denyOut");
  if (!deny_out) return std::move(deny_out).error();
  if (allow_out->empty() && deny_out->empty()) {
    if (open) return json::value("egress");
    if (use == NetworkUse::kCreate) return json::value("loopback");
    json::object nothing{{"allow", json::array()}};
    return json::value(json::object{{"egress", std::move(nothing)}});
  }
  bool closed = !open;
  json::array deny;
  std::vector<net::Ipv4Prefix> denied;
  for (const std::string& rule : *deny_out) {
    auto prefix = net::ParsePrefix(rule);
    if (prefix && prefix->len == 0) {
      closed = true;
      continue;
    }
    if (prefix) denied.push_back(*prefix);
    deny.emplace_back(rule);
  }
  for (const std::string& rule : *allow_out) {
    auto prefix = net::ParsePrefix(rule);
    if (!prefix) continue;
    for (const net::Ipv4Prefix& d : denied) {
      if (d.Contains(*prefix)) {
        return Invalid("network: allowOut " + rule + " lies in denyOut " + net::FormatPrefix(d) +
                       "; in E2B allow wins, in sandstream deny does: leave it out of denyOut");
      }
    }
  }
  json::object egress;
  if (closed) {
    json::array allow;
    for (const std::string& rule : *allow_out) allow.emplace_back(rule);
    egress["allow"] = std::move(allow);
  }
  egress["deny"] = std::move(deny);
  return json::value(json::object{{"egress", std::move(egress)}});
}

}  // namespace

asio::awaitable<void> CreateSandbox(Context& ctx) {
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  // sandstream's own request, from E2B's fields; the rest of theirs are not offered.
  json::object request;
  auto template_id = OptString(*body, "templateID");
  if (!template_id) co_return co_await ReplyError(ctx, template_id.error());
  if (*template_id) {
    const auto& aliases = ctx.server.options().e2b_template_aliases;
    const auto alias = aliases.find(**template_id);
    request["template"] = alias == aliases.end() ? **template_id : alias->second;
  }
  auto timeout = TimeoutOf(*body);
  if (!timeout) co_return co_await ReplyError(ctx, timeout.error());
  request["ttl_seconds"] = timeout->value_or(kDefaultTimeoutSeconds) > 0
                               ? timeout->value_or(kDefaultTimeoutSeconds)
                               : kDefaultTimeoutSeconds;
  auto metadata = Strings(*body, "metadata");
  if (!metadata) co_return co_await ReplyError(ctx, metadata.error());
  request["metadata"] = std::move(*metadata);
  auto env = Strings(*body, "envVars");
  if (!env) co_return co_await ReplyError(ctx, env.error());
  // The home E2B's templates have, which their users' code expects.
  if (!env->as_object().contains("HOME")) env->as_object()["HOME"] = "/home/user";
  request["env"] = std::move(*env);
  request["cwd"] = "/home/user";
  // Deny by default, as everywhere in sandstream: the internet only when asked for.
  auto internet = OptBool(*body, "allow_internet_access", "allowInternetAccess");
  if (!internet) co_return co_await ReplyError(ctx, internet.error());
  // network={"allow_out", "deny_out"}: E2B's rules (EgressOf), over the internet unless
  // allow_internet_access is false (rules given ask for egress, as they do on E2B).
  const json::value* network = Field(*body, "network");
  if (network && network->is_object() &&
      (Field(network->as_object(), "allowOut") || Field(network->as_object(), "denyOut"))) {
    auto egress = EgressOf(network->as_object(), internet->value_or(true), NetworkUse::kCreate);
    if (!egress) co_return co_await ReplyError(ctx, egress.error());
    request["network"] = std::move(*egress);
  } else {
    request["network"] = internet->value_or(false) ? "egress" : "loopback";
  }
  // lifecycle={"on_timeout": "pause"}: paused at the timeout, memory kept (autoPauseMemory
  // false, a filesystem-only pause, is not offered); auto_resume: {"enabled": bool}.
  auto auto_pause = OptBool(*body, "autoPause");
  if (!auto_pause) co_return co_await ReplyError(ctx, auto_pause.error());
  auto pause_memory = OptBool(*body, "autoPauseMemory");
  if (!pause_memory) co_return co_await ReplyError(ctx, pause_memory.error());
  if (auto_pause->value_or(false) && !pause_memory->value_or(true)) {
    co_return co_await Fail(ctx, http::status::not_implemented,
                            "a pause without memory (mode \"filesystem\") is not supported by "
                            "sandstream: on_timeout pause keeps the memory (mode \"full\")");
  }
  if (auto_pause->value_or(false)) request["on_timeout"] = "pause";
  if (const json::value* resume = Field(*body, "autoResume"); resume && resume->is_object()) {
    if (const json::value* on = resume->as_object().if_contains("enabled"); on && on->is_bool()) {
      request["auto_resume"] = on->as_bool();
    }
  }

  auto req = ParseSandboxRequest(request);
  if (!req) co_return co_await ReplyError(ctx, req.error());
  // volume_mounts={"/mnt/data": volume}: by the volume's name.
  if (const json::value* mounts = Field(*body, "volumeMounts")) {
    auto volumes = ParseVolumeMounts(*mounts, "volumeMounts");
    if (!volumes) co_return co_await ReplyError(ctx, volumes.error());
    req->volumes = std::move(*volumes);
  }
  req->tenant = ctx.principal.tenant;
  req->by = ctx.principal.credential;
  Result<const SandboxEntry*> sb = co_await ctx.service.CreateSandbox(std::move(*req));
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  co_await ReplyJson(ctx, http::status::created, Created(ctx, **sb));
}

asio::awaitable<void> ListSandboxes(Context& ctx) {
  // ?state=running,paused (either, or both; both when not given).
  const std::string_view state = ctx.Query("state").value_or("running,paused");
  const bool running = state.find("running") != std::string_view::npos;
  const bool paused = state.find("paused") != std::string_view::npos;
  const std::string_view metadata = ctx.Query("metadata").value_or("");
  json::array items;
  for (const SandboxEntry* sb : ctx.service.List()) {
    if (sb->deleting || !ctx.principal.Sees(sb->tenant, sb->id)) continue;
    if (!(E2bState(*sb) == "paused" ? paused : running)) continue;
    if (!MetadataMatches(*sb, metadata)) continue;
    items.push_back(Described(ctx, *sb, false));
  }
  co_await ReplyJson(ctx, http::status::ok, items);
}

asio::awaitable<void> GetSandbox(Context& ctx) {
  auto sb = Visible(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  co_await ReplyJson(ctx, http::status::ok, Described(ctx, **sb, true));
}

asio::awaitable<void> KillSandbox(Context& ctx) {
  auto sb = Visible(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  Result<void> deleted = co_await ctx.service.DeleteSandbox((*sb)->id);
  if (!deleted) co_return co_await ReplyError(ctx, deleted.error());
  co_await ReplyEmpty(ctx, http::status::no_content);
}

// Connect (and the older resume): a paused sandbox is resumed (201, as E2B answers a resume),
// a running one answered as it is (200); the timeout only ever lengthens its life.
asio::awaitable<void> Reconnect(Context& ctx, bool resume_only) {
  auto req = ReadTimeout(ctx);
  if (!req) co_return co_await ReplyError(ctx, req.error());
  const std::string id = req->sb->id;
  const bool was_paused = req->sb->paused.has_value();
  if (resume_only && !was_paused) {
    co_return co_await Fail(ctx, http::status::conflict, "sandbox " + id + " is not paused");
  }
  if (was_paused) {
    auto resumed = co_await ctx.service.ResumeSandbox(id, ctx.principal.credential);
    if (!resumed) co_return co_await ReplyError(ctx, resumed.error());
  }
  if (req->timeout && *req->timeout > 0) {
    if (auto set = ctx.service.SetTimeout(id, *req->timeout, true); !set) {
      co_return co_await ReplyError(ctx, set.error());
    }
  }
  const SandboxEntry* sb = ctx.service.Find(id);
  if (!sb) co_return co_await ReplyError(ctx, ErrorCode::kNotFound, "no sandbox '" + id + "'");
  co_await ReplyJson(ctx, was_paused ? http::status::created : http::status::ok, Created(ctx, *sb));
}

asio::awaitable<void> ConnectSandbox(Context& ctx) {
  co_await Reconnect(ctx, false);
}

asio::awaitable<void> ResumeSandbox(Context& ctx) {
  co_await Reconnect(ctx, true);
}

// E2B's pause: 204 once paused, 409 when it was already (the SDK's pause() then says False).
// Its memory and processes go to disk (a checkpoint), as E2B's do, or, for a sandbox that
// cannot be checkpointed (an image template's, one with volumes or egress, one whose terminal
// CRIU cannot take), stay frozen in memory. `memory: false` (E2B's filesystem mode: the files kept,
// the processes stopped) is not offered: a paused sandstream sandbox keeps its processes.
asio::awaitable<void> PauseSandbox(Context& ctx) {
  auto sb = Visible(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  auto memory = OptBool(*body, "memory");
  if (!memory) co_return co_await ReplyError(ctx, memory.error());
  if (!memory->value_or(true)) {
    co_return co_await Fail(ctx, http::status::not_implemented,
                            "a pause without memory (mode \"filesystem\") is not supported by "
                            "sandstream: pause with memory (mode \"full\") keeps the processes");
  }
  if ((*sb)->paused) {
    co_return co_await Fail(ctx, http::status::conflict,
                            "sandbox " + (*sb)->id + " is already paused");
  }
  const std::string id = (*sb)->id;
  auto paused =
      co_await ctx.service.PauseSandbox(id, PauseMode::kCheckpoint, ctx.principal.credential);
  // A checkpoint that could not be made left the sandbox running as it was: frozen instead,
  // its memory kept in place (a sandbox gone or lost answers the same again).
  if (!paused) {
    log::Info("E2B pause: freezing a sandbox that could not be checkpointed",
              {{"sandbox", id}, {"error", paused.error().message}});
    paused = co_await ctx.service.PauseSandbox(id, PauseMode::kFreeze, ctx.principal.credential);
  }
  if (!paused) co_return co_await ReplyError(ctx, paused.error());
  co_await ReplyEmpty(ctx, http::status::no_content);
}

// E2B's fork: `count` sandboxes (1 by default) with the sandbox's memory and processes, each
// answered as a create is; `timeout` is each fork's. All or none: a fork that fails is the
// whole answer's error (E2B's per-fork errors are for forks that start on their own).
asio::awaitable<void> ForkSandbox(Context& ctx) {
  auto sb = Visible(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  auto timeout = TimeoutOf(*body);
  if (!timeout) co_return co_await ReplyError(ctx, timeout.error());
  auto count = OptInt(*body, "count", {}, 1, Service::kMaxForks);
  if (!count) co_return co_await ReplyError(ctx, count.error());
  auto forks = co_await ctx.service.ForkSandbox((*sb)->id, "", ctx.principal.credential,
                                                static_cast<int>(count->value_or(1)), true);
  if (!forks) co_return co_await ReplyError(ctx, forks.error());
  json::array answer;
  for (const SandboxEntry* fork : *forks) {
    if (timeout->value_or(0) > 0) (void)ctx.service.SetTimeout(fork->id, **timeout, false);
    json::object item;
    item["sandbox"] = Created(ctx, *fork);
    answer.push_back(std::move(item));
  }
  co_await ReplyJson(ctx, http::status::created, answer);
}

namespace {

// A SnapshotInfo: its id is the template's name, which Sandbox.create takes.
json::object SnapshotJson(const Template& t) {
  json::object o;
  o["snapshotID"] = t.name;
  o["names"] = json::array{json::value(t.name)};
  return o;
}

}  // namespace

// E2B's createSnapshot: a template of the sandbox with its memory (a sandbox made from it
// starts with its processes running where they were), or of its files only (`memory` false,
// the SDK's mode "filesystem"); `name` or a generated one. A name the caller's snapshot has
// already is that snapshot's again (E2B gives it a new build), unless a sandbox runs from it.
asio::awaitable<void> CreateSnapshot(Context& ctx) {
  auto sb = Visible(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  auto name = OptString(*body, "name");
  if (!name) co_return co_await ReplyError(ctx, name.error());
  auto memory = OptBool(*body, "memory");
  if (!memory) co_return co_await ReplyError(ctx, memory.error());
  const std::string id = (*sb)->id;
  const std::string template_name = name->value_or("snapshot-" + NewId("").substr(0, 12));
  if (const Template* old = ctx.service.templates().Find(template_name);
      old && old->kind == "snapshot" && old->tenant == ctx.principal.tenant) {
    if (auto replaced = co_await ctx.service.DeleteTemplate(template_name); !replaced) {
      co_return co_await ReplyError(ctx, replaced.error());
    }
  }
  auto made = co_await ctx.service.SnapshotSandbox(id, template_name, memory->value_or(true));
  if (!made) co_return co_await ReplyError(ctx, made.error());
  co_await ReplyJson(ctx, http::status::created, SnapshotJson(**made));
}

// E2B's listSnapshots: the snapshot templates the caller may use (with memory or of files),
// of `sandboxID` and named `name` when asked, newest first, `limit` (100) a page; the next
// page's `nextToken` (where it starts) is in the X-Next-Token header while there is one.
asio::awaitable<void> ListSnapshots(Context& ctx) {
  const std::string sandbox_id(ctx.Query("sandboxID").value_or(""));
  const std::string name(ctx.Query("name").value_or(""));
  int64_t limit = 100;
  int64_t from = 0;
  for (auto [key, value, min] :
       {std::tuple{"limit", &limit, int64_t{1}}, std::tuple{"nextToken", &from, int64_t{0}}}) {
    if (auto asked = ctx.Query(key)) {
      const std::string_view v = *asked;
      if (std::from_chars(v.data(), v.data() + v.size(), *value).ec != std::errc() ||
          *value < min) {
        co_return co_await ReplyError(
            ctx,
            Invalid(std::string(key) + " must be an integer of at least " + std::to_string(min)));
      }
    }
  }
  std::vector<const Template*> found;
  for (const Template* t : ctx.service.templates().List()) {
    if (t->kind != "snapshot" || !t->ready) continue;
    if (!TemplateService::MayUse(*t, ctx.principal.tenant, ctx.principal.admin())) continue;
    if ((!sandbox_id.empty() && t->source != sandbox_id) || (!name.empty() && t->name != name)) {
      continue;
    }
    found.push_back(t);
  }
  std::ranges::sort(
      found, [](const Template* a, const Template* b) { return a->created_at > b->created_at; });
  json::array answer;
  for (size_t i = static_cast<size_t>(from);
       i < found.size() && static_cast<int64_t>(answer.size()) < limit; ++i) {
    answer.push_back(SnapshotJson(*found[i]));
  }
  std::vector<std::pair<std::string, std::string>> fields;
  if (const size_t next = static_cast<size_t>(from) + answer.size(); next < found.size()) {
    fields.emplace_back("X-Next-Token", std::to_string(next));
  }
  co_await Reply(ctx, http::status::ok, json::serialize(answer), "application/json",
                 std::move(fields));
}

// E2B's deleteSnapshot (and template deletion): sandstream's DELETE /v1/templates/{name}, its
// errors in E2B's shape (the route's dialect).
asio::awaitable<void> DeleteTemplate(Context& ctx) {
  co_await api::DeleteTemplate(ctx);
}

asio::awaitable<void> SetTimeout(Context& ctx) {
  auto req = ReadTimeout(ctx);
  if (!req) co_return co_await ReplyError(ctx, req.error());
  if (!req->timeout) co_return co_await ReplyError(ctx, Invalid("timeout (seconds) is required"));
  if (auto set = ctx.service.SetTimeout(req->sb->id, *req->timeout, false); !set) {
    co_return co_await ReplyError(ctx, set.error());
  }
  co_await ReplyEmpty(ctx, http::status::no_content);
}

namespace {

// What sandstream offers instead of an E2B route it does not serve, by the route's path.
std::string_view Instead(std::string_view path) {
  if (path.starts_with("/secrets")) return "secrets are not available; pass envs at create";
  if (path.starts_with("/templates") || path.starts_with("/v2/templates") ||
      path.starts_with("/v3/templates")) {
    return "sandstream's POST /v1/templates imports an image archive or pulls an image";
  }
  // The routes of one sandbox, by their last segment.
  if (path.ends_with("/logs")) {
    return "sandstream's GET /v1/sandboxes/{id}/events (its journal) and each process's logs";
  }
  return "";
}

// One sample as E2B's SandboxMetric: CPU as a share of the sandbox's CPUs, bytes for the rest.
json::object MetricJson(const ResourceSeries& series, const ResourceSample& s) {
  json::object o;
  o["timestamp"] = FormatRfc3339(s.at);
  o["timestampUnix"] = ToUnixMillis(s.at) / 1000;
  o["cpuCount"] = static_cast<int64_t>(std::ceil(series.cpu_count));
  o["cpuUsedPct"] = s.cpu_used_pct;
  o["memUsed"] = s.memory_used;
  o["memTotal"] = series.memory_total;
  o["memCache"] = s.memory_cache;
  o["diskUsed"] = s.disk_used;
  o["diskTotal"] = series.disk_total;
  return o;
}

}  // namespace

asio::awaitable<void> UpdateNetwork(Context& ctx) {
  auto sb = Visible(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  // What the body leaves out is cleared: no rules, every address (as E2B's default), unless
  // it says allow_internet_access false (denyOut 0.0.0.0/0 to E2B).
  auto internet = OptBool(*body, "allow_internet_access", "allowInternetAccess");
  if (!internet) co_return co_await ReplyError(ctx, internet.error());
  auto network = EgressOf(*body, internet->value_or(true), NetworkUse::kUpdate);
  if (!network) co_return co_await ReplyError(ctx, network.error());
  auto policy = ParseEgressUpdate(*network);
  if (!policy) co_return co_await ReplyError(ctx, policy.error());
  auto updated =
      co_await ctx.service.UpdateEgress((*sb)->id, std::move(*policy), ctx.principal.credential);
  if (!updated) co_return co_await ReplyError(ctx, updated.error());
  co_await ReplyEmpty(ctx, http::status::no_content);
}

asio::awaitable<void> SandboxMetrics(Context& ctx) {
  auto sb = Visible(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto start = TimeQuery(ctx, "start");
  if (!start) co_return co_await ReplyError(ctx, start.error());
  auto end = TimeQuery(ctx, "end");
  if (!end) co_return co_await ReplyError(ctx, end.error());
  json::array items;
  if (const ResourceSeries* series = ctx.service.resources().Find((*sb)->id)) {
    for (const ResourceSample* s : SamplesIn(*series, *start, *end)) {
      items.push_back(MetricJson(*series, *s));
    }
  }
  co_await ReplyJson(ctx, http::status::ok, items);
}

asio::awaitable<void> SandboxesMetrics(Context& ctx) {
  // ?sandbox_ids=a,b: the latest sample of each the caller sees (those it does not, or that
  // have none yet, are left out).
  json::object latest;
  std::string_view ids = ctx.Query("sandbox_ids").value_or("");
  while (!ids.empty()) {
    const size_t comma = ids.find(',');
    const std::string_view id = ids.substr(0, comma);
    ids = comma == std::string_view::npos ? std::string_view() : ids.substr(comma + 1);
    const SandboxEntry* sb = ctx.service.Find(id);
    if (!sb || sb->deleting || !ctx.principal.Sees(sb->tenant, sb->id)) continue;
    const ResourceSeries* series = ctx.service.resources().Find(id);
    if (!series || series->samples.empty()) continue;
    latest[id] = MetricJson(*series, series->samples.back());
  }
  json::object body;
  body["sandboxes"] = std::move(latest);
  co_await ReplyJson(ctx, http::status::ok, body);
}

asio::awaitable<void> NotSupported(Context& ctx) {
  const std::string_view target = ctx.req.target();
  const std::string_view path = target.substr(0, target.find('?'));
  // A route of one sandbox answers for the sandbox first: one that is not there is E2B's 404,
  // one that is never is (the SDKs would call it gone).
  if (path.starts_with("/sandboxes/") || path.starts_with("/v2/sandboxes/")) {
    if (auto sb = Visible(ctx); !sb) co_return co_await Fail(ctx, sb.error());
  }
  // 501 is no code of sandstream's own.
  std::string message = "not supported by sandstream: " + std::string(ctx.req.method_string()) +
                        " " + std::string(path);
  if (const std::string_view instead = Instead(path); !instead.empty()) {
    message += "; " + std::string(instead);
  }
  co_await Fail(ctx, http::status::not_implemented, message);
}

}  // namespace sandstream::api::e2b
