#include "api/e2b/routes.h"

#include "api/e2b/connect.h"
#include "base/base64.h"
#include "api/server.h"
#include "base/ids.h"

namespace sandstream::api::e2b {

const std::vector<Route>& Routes() {
  using V = http::verb;
  constexpr bool kKey = false;  // the control plane needs a key (X-API-KEY)
  constexpr bool kOpen = true;  // envd's routes admit callers by the sandbox's token themselves
  constexpr auto kApi = Dialect::kE2b;
  constexpr auto kRpc = Dialect::kConnect;
  static const std::vector<Route> kRoutes = {
      {V::post, "/v2/sandboxes", CreateSandbox, kKey, false, false, kApi},
      {V::get, "/v2/sandboxes", ListSandboxes, kKey, false, false, kApi},
      {V::get, "/sandboxes", ListSandboxes, kKey, false, false, kApi},
      {V::post, "/v2/sandboxes/{}/connect", ConnectSandbox, kKey, false, false, kApi},
      {V::get, "/sandboxes/{}", GetSandbox, kKey, false, false, kApi},
      {V::delete_, "/sandboxes/{}", KillSandbox, kKey, false, false, kApi},
      {V::post, "/sandboxes/{}/timeout", SetTimeout, kKey, false, false, kApi},
      {V::post, "/sandboxes/{}/pause", NotSupported, kKey, false, false, kApi},
      {V::post, "/sandboxes/{}/resume", NotSupported, kKey, false, false, kApi},
      {V::get, "/sandboxes/{}/metrics", NotSupported, kKey, false, false, kApi},
      {V::get, "/sandboxes/{}/logs", NotSupported, kKey, false, false, kApi},
      {V::get, "/v2/sandboxes/{}/logs", NotSupported, kKey, false, false, kApi},
      {V::post, "/sandboxes/{}/snapshots", NotSupported, kKey, false, false, kApi},
      {V::post, "/process.Process/StreamInput", StreamInput, kOpen, false, true, kRpc},
      // stdin may come in one call: the larger limit of stdin uploads (max_stdin_bytes).
      {V::post, "/process.Process/{}", ProcessRpc, kOpen, true, false, kRpc},
      {V::post, "/filesystem.Filesystem/{}", FilesystemRpc, kOpen, false, false, kRpc},
      {V::get, "/files", ReadFile, kOpen, false, false, kApi},
      {V::post, "/files", WriteFiles, kOpen, false, true, kApi},
      {V::get, "/health", Health, kOpen, false, false, kApi},
  };
  return kRoutes;
}

Need RouteNeed(Handler) { return Need::kTenant; }

std::optional<Dialect> DialectOf(std::string_view path) {
  if (path.starts_with("/process.Process/") || path.starts_with("/filesystem.Filesystem/")) {
    return Dialect::kConnect;
  }
  for (std::string_view prefix : {"/v2/sandboxes", "/sandboxes"}) {
    if (path.starts_with(prefix) &&
        (path.size() == prefix.size() || path[prefix.size()] == '/')) {
      return Dialect::kE2b;
    }
  }
  return std::nullopt;
}

Result<const SandboxEntry*> EnvdSandbox(Context& ctx) {
  const std::string_view id = ctx.Header("E2b-Sandbox-Id");
  if (id.empty()) {
    return Error{ErrorCode::kInvalidRequest,
                 "missing E2b-Sandbox-Id header: set E2B_SANDBOX_URL to the daemon's URL"};
  }
  const SandboxEntry* sb = ctx.service.Find(id);
  if (!sb || sb->deleting) return SandboxGone(id);
  const std::string_view token = ctx.Header("X-Access-Token");
  if (token.empty() ||
      !SecretEquals(token, SandboxAccessToken(ctx.server.options().api_key, sb->id))) {
    return Error{ErrorCode::kUnauthorized,
                 "unauthorized access: X-Access-Token must be the sandbox's envdAccessToken"};
  }
  Principal p;
  p.kind = Principal::Kind::kToken;
  p.tenant = sb->tenant;
  p.credential = "envd:" + sb->id;
  p.sandbox = sb->id;
  p.derived = true;
  p.grant.scopes = kScopeRead | kScopeExec | kScopeTerminal | kScopeFilesRead | kScopeFilesWrite;
  ctx.principal = std::move(p);
  // The router admitted no tenant (these routes are open to it): its quotas hold here.
  if (auto refused = ctx.server.AdmitTenant(sb->tenant, IsStreamingCall(ctx))) return *refused;
  return sb;
}

Result<bool> ActsAsRoot(const Context& ctx) {
  std::string user;
  if (auto name = ctx.Query("username")) {
    user = *name;
  } else if (const std::string_view auth = ctx.Header(http::field::authorization);
             auth.starts_with("Basic ")) {
    auto decoded = DecodeBytes(auth.substr(6), "Authorization: Basic");
    if (!decoded) return std::move(decoded).error();
    user = decoded->substr(0, decoded->find(':'));
  }
  if (user.empty() || user == "user") return false;
  if (user == "root") return true;
  return Error{ErrorCode::kUnauthorized,
               "user '" + user + "' not found: a sandbox has the users \"user\" and \"root\""};
}

}  // namespace sandstream::api::e2b
