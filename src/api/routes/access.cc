// Access: tenants and their keys (the admin's), a tenant's usage, and scoped tokens of a
// sandbox (service/access.h).
#include "service/access.h"

#include <boost/json.hpp>

#include "api/common/lookup.h"
#include "api/request.h"
#include "api/routes/routes.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

json::object TenantJson(const Tenant& t, const TenantUsage& usage) {
  return {{"name", t.name},
          {"quotas", QuotasJson(t.quotas)},
          {"usage",
           {{"sandboxes", usage.sandboxes},
            {"running_processes", usage.running_processes},
            {"memory_mb", usage.memory_mb},
            {"cpu_percent", usage.cpu_percent},
            {"disk_mb", usage.disk_mb},
            {"streams", usage.streams},
            {"volume_storage_mb", usage.volume_storage_mb}}},
          {"created_at", FormatRfc3339(t.created_at)}};
}

json::object KeyJson(const KeyInfo& k) {
  return {{"id", k.id}, {"tenant", k.tenant}, {"created_at", FormatRfc3339(k.created_at)}};
}

json::object TokenJson(const TokenInfo& t) {
  json::array scopes;
  for (const auto& name : ScopeNames(t.grant)) scopes.emplace_back(name);
  return {{"id", t.id},
          {"sandbox_id", t.sandbox},
          {"scopes", std::move(scopes)},
          {"created_at", FormatRfc3339(t.created_at)},
          {"expires_at", FormatRfc3339(t.expires_at)}};
}

// The daemon's Access, or the 404 of a daemon without tenants (tests).
Result<Access*> AccessOf(Context& ctx) {
  Access* access = ctx.service.access();
  if (!access) return Error{ErrorCode::kNotFound, "this daemon has no tenants"};
  return access;
}

// What `tenant` takes: on this node, and in a cluster its sandboxes, memory, CPU and disk on
// every node (processes and streams are counted per node).
TenantUsage UsageOf(Context& ctx, std::string_view tenant) {
  TenantUsage u = ctx.service.Usage(tenant);
  u.volume_storage_mb = ctx.service.volumes().StorageMb(tenant);
  const Access* access = ctx.service.access();
  const SharedTenants* shared = access ? access->shared() : nullptr;
  if (shared && !tenant.empty()) {
    const TenantUsage all = shared->Total(tenant);
    u.sandboxes = all.sandboxes;
    u.memory_mb = all.memory_mb;
    u.cpu_percent = all.cpu_percent;
    u.disk_mb = all.disk_mb;
  }
  return u;
}

// In a cluster: tenants and keys as etcd has them now, for another node may have changed them
// a moment ago.
asio::awaitable<void> Fresh(Context& ctx) {
  const Access* access = ctx.service.access();
  if (SharedTenants* shared = access ? access->shared() : nullptr) co_await shared->Reread();
}

Result<const Tenant*> NamedTenant(Context& ctx) {
  const Tenant* t = ctx.service.quotas().TenantOf(ctx.params.at(0));
  if (!t) return Error{ErrorCode::kNotFound, "no tenant '" + ctx.params.at(0) + "'"};
  return t;
}

}  // namespace

asio::awaitable<void> CreateTenant(Context& ctx) {
  co_await Fresh(ctx);
  auto access = AccessOf(ctx);
  if (!access) co_return co_await ReplyError(ctx, access.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  const json::value* name = body->if_contains("name");
  if (!name || !name->is_string()) {
    co_return co_await ReplyError(ctx, Invalid("name must be a string"));
  }
  for (const auto& [k, unused] : *body) {
    if (k != "name" && k != "quotas") {
      co_return co_await ReplyError(ctx, Invalid("unknown field '" + std::string(k) + "'"));
    }
  }
  auto quotas = QuotasFromJson(body->contains("quotas") ? body->at("quotas") : json::value());
  if (!quotas) co_return co_await ReplyError(ctx, quotas.error());
  std::string tenant_name(name->as_string());
  auto tenant = co_await (*access)->CreateTenant(std::move(tenant_name), *quotas);
  if (!tenant) co_return co_await ReplyError(ctx, tenant.error());
  co_await ReplyJson(ctx, http::status::created, TenantJson(*tenant, {}));
}

asio::awaitable<void> ListTenants(Context& ctx) {
  co_await Fresh(ctx);
  auto access = AccessOf(ctx);
  if (!access) co_return co_await ReplyError(ctx, access.error());
  json::array items;
  for (const auto& [name, t] : (*access)->tenants()) {
    items.push_back(TenantJson(t, UsageOf(ctx, name)));
  }
  json::object body;
  body["tenants"] = std::move(items);
  co_await ReplyJson(ctx, http::status::ok, body);
}

asio::awaitable<void> GetTenant(Context& ctx) {
  co_await Fresh(ctx);
  auto t = NamedTenant(ctx);
  if (!t) co_return co_await ReplyError(ctx, t.error());
  co_await ReplyJson(ctx, http::status::ok, TenantJson(**t, UsageOf(ctx, (*t)->name)));
}

asio::awaitable<void> UpdateTenant(Context& ctx) {
  co_await Fresh(ctx);
  auto access = AccessOf(ctx);
  if (!access) co_return co_await ReplyError(ctx, access.error());
  // Every quota is set from the body: none at all is a mistake, not "no quotas".
  if (ctx.req.body().empty()) {
    co_return co_await ReplyError(ctx, Invalid("the body must be {\"quotas\": {...}}"));
  }
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  for (const auto& [k, unused] : *body) {
    if (k != "quotas") {
      co_return co_await ReplyError(ctx, Invalid("unknown field '" + std::string(k) + "'"));
    }
  }
  auto quotas = QuotasFromJson(body->contains("quotas") ? body->at("quotas") : json::value());
  if (!quotas) co_return co_await ReplyError(ctx, quotas.error());
  auto tenant = co_await (*access)->SetQuotas(ctx.params.at(0), *quotas);
  if (!tenant) co_return co_await ReplyError(ctx, tenant.error());
  co_await ReplyJson(ctx, http::status::ok, TenantJson(*tenant, UsageOf(ctx, tenant->name)));
}

asio::awaitable<void> DeleteTenant(Context& ctx) {
  co_await Fresh(ctx);
  auto access = AccessOf(ctx);
  if (!access) co_return co_await ReplyError(ctx, access.error());
  auto t = NamedTenant(ctx);
  if (!t) co_return co_await ReplyError(ctx, t.error());
  if (const int64_t left = ctx.service.Usage((*t)->name).sandboxes; left > 0) {
    co_return co_await ReplyError(ctx, ErrorCode::kConflict,
                                  "tenant '" + (*t)->name + "' has " + std::to_string(left) +
                                      " sandbox(es): delete them first");
  }
  // Its volumes are kept by its name: a tenant made again under it would have them.
  if (const size_t left = ctx.service.volumes().List((*t)->name, false).size(); left > 0) {
    co_return co_await ReplyError(ctx, ErrorCode::kConflict,
                                  "tenant '" + (*t)->name + "' has " + std::to_string(left) +
                                      " volume(s) on this node: delete them first");
  }
  auto deleted = co_await (*access)->DeleteTenant((*t)->name);
  if (!deleted) co_return co_await ReplyError(ctx, deleted.error());
  co_await ReplyEmpty(ctx, http::status::no_content);
}

asio::awaitable<void> CreateKey(Context& ctx) {
  co_await Fresh(ctx);
  auto access = AccessOf(ctx);
  if (!access) co_return co_await ReplyError(ctx, access.error());
  auto made = co_await (*access)->CreateKey(ctx.params.at(0));
  if (!made) co_return co_await ReplyError(ctx, made.error());
  json::object o = KeyJson(made->first);
  o["key"] = made->second;  // shown this once
  co_await ReplyJson(ctx, http::status::created, o);
}

asio::awaitable<void> ListKeys(Context& ctx) {
  co_await Fresh(ctx);
  auto access = AccessOf(ctx);
  if (!access) co_return co_await ReplyError(ctx, access.error());
  auto t = NamedTenant(ctx);
  if (!t) co_return co_await ReplyError(ctx, t.error());
  json::array items;
  for (const auto& k : (*access)->Keys((*t)->name)) items.push_back(KeyJson(k));
  json::object body;
  body["keys"] = std::move(items);
  co_await ReplyJson(ctx, http::status::ok, body);
}

asio::awaitable<void> RevokeKey(Context& ctx) {
  co_await Fresh(ctx);
  auto access = AccessOf(ctx);
  if (!access) co_return co_await ReplyError(ctx, access.error());
  auto revoked = co_await (*access)->RevokeKey(ctx.params.at(0), ctx.params.at(1));
  if (!revoked) co_return co_await ReplyError(ctx, revoked.error());
  co_await ReplyEmpty(ctx, http::status::no_content);
}

asio::awaitable<void> GetUsage(Context& ctx) {
  const std::string& tenant = ctx.principal.tenant;
  const Tenant* t = ctx.service.quotas().TenantOf(tenant);
  const TenantUsage usage = UsageOf(ctx, tenant);
  json::object o = TenantJson(t ? *t : Tenant{}, usage);
  o["name"] = tenant.empty() ? json::value(nullptr) : json::value(tenant);
  if (!t) o.erase("created_at");
  co_await ReplyJson(ctx, http::status::ok, o);
}

asio::awaitable<void> CreateToken(Context& ctx) {
  auto access = AccessOf(ctx);
  if (!access) co_return co_await ReplyError(ctx, access.error());
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  std::vector<std::string> names;
  const json::value* scopes = body->if_contains("scopes");
  if (!scopes || !scopes->is_array()) {
    co_return co_await ReplyError(ctx, Invalid("scopes must be an array of scope names"));
  }
  for (const auto& s : scopes->as_array()) {
    if (!s.is_string()) co_return co_await ReplyError(ctx, Invalid("scopes must be strings"));
    names.emplace_back(s.as_string());
  }
  auto grant = ParseScopes(names);
  if (!grant) co_return co_await ReplyError(ctx, grant.error());
  int64_t ttl = 3600;
  if (const json::value* t = body->if_contains("ttl_seconds"); t && !t->is_null()) {
    const int64_t max = Access::kMaxTokenTtl.count();
    if (!t->is_int64() || t->as_int64() < 1 || t->as_int64() > max) {
      co_return co_await ReplyError(
          ctx, Invalid("ttl_seconds must be an integer from 1 to " + std::to_string(max)));
    }
    ttl = t->as_int64();
  }
  for (const auto& [k, unused] : *body) {
    if (k != "scopes" && k != "ttl_seconds") {
      co_return co_await ReplyError(ctx, Invalid("unknown field '" + std::string(k) + "'"));
    }
  }
  auto made = (*access)->CreateToken((*sb)->tenant, (*sb)->id, *grant, std::chrono::seconds(ttl));
  if (!made) co_return co_await ReplyError(ctx, made.error());
  ctx.service.Audit((*sb)->id, "token.created",
                    "token " + made->first.id + " made for " +
                        std::to_string(ScopeNames(made->first.grant).size()) + " scope(s)",
                    {{"token_id", made->first.id},
                     {"scopes", TokenJson(made->first).at("scopes")},
                     {"expires_at", FormatRfc3339(made->first.expires_at)},
                     {"by", ctx.principal.credential}});
  json::object o = TokenJson(made->first);
  o["token"] = made->second;  // shown this once
  co_await ReplyJson(ctx, http::status::created, o);
}

asio::awaitable<void> ListTokens(Context& ctx) {
  auto access = AccessOf(ctx);
  if (!access) co_return co_await ReplyError(ctx, access.error());
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  json::array items;
  for (const auto& t : (*access)->Tokens((*sb)->id)) items.push_back(TokenJson(t));
  json::object body;
  body["tokens"] = std::move(items);
  co_await ReplyJson(ctx, http::status::ok, body);
}

asio::awaitable<void> RevokeToken(Context& ctx) {
  auto access = AccessOf(ctx);
  if (!access) co_return co_await ReplyError(ctx, access.error());
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto revoked = (*access)->RevokeToken((*sb)->id, ctx.params.at(1));
  if (!revoked) co_return co_await ReplyError(ctx, revoked.error());
  ctx.service.Audit((*sb)->id, "token.revoked", "token " + ctx.params.at(1) + " revoked",
                    {{"token_id", ctx.params.at(1)}, {"by", ctx.principal.credential}});
  co_await ReplyEmpty(ctx, http::status::no_content);
}

}  // namespace sandstream::api
