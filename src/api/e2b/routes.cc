#include "api/e2b/routes.h"

#include <charconv>

#include "api/e2b/connect.h"
#include "api/routes_files.h"
#include "api/server.h"
#include "base/base64.h"
#include "base/ids.h"
#include "service/access.h"

namespace sandstream::api::e2b {
namespace asio = boost::asio;

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

Need RouteNeed(Handler) {
  return Need::kTenant;
}

std::optional<Dialect> DialectOf(std::string_view path) {
  if (path.starts_with("/process.Process/") || path.starts_with("/filesystem.Filesystem/")) {
    return Dialect::kConnect;
  }
  for (std::string_view prefix : {"/v2/sandboxes", "/sandboxes"}) {
    if (path.starts_with(prefix) && (path.size() == prefix.size() || path[prefix.size()] == '/')) {
      return Dialect::kE2b;
    }
  }
  return std::nullopt;
}

namespace {

// Admits the caller of an envd route, who has shown it holds `sb`'s access token: a token of
// that sandbox alone, counted against its tenant's quotas (the router admitted no tenant, as
// these routes are open to it).
Result<const SandboxEntry*> AdmitHolder(Context& ctx, const SandboxEntry* sb) {
  Principal p;
  p.kind = Principal::Kind::kToken;
  p.tenant = sb->tenant;
  p.credential = "envd:" + sb->id;
  p.sandbox = sb->id;
  p.derived = true;
  p.grant.scopes = kScopeRead | kScopeExec | kScopeTerminal | kScopeFilesRead | kScopeFilesWrite;
  ctx.principal = std::move(p);
  if (auto refused = ctx.server.AdmitTenant(sb->tenant, IsStreamingCall(ctx))) return *refused;
  return sb;
}

// A signed URL's sandbox: of those a caller could mean (the one E2b-Sandbox-Id names, else
// every one), the one whose token made `signature`. The hashing runs on the blocking pool, as
// it is one per sandbox.
struct Signed {
  std::string path, operation, user, expiration, signature;
};

asio::awaitable<std::optional<std::string>> SignedBy(Context& ctx, Signed s,
                                                     std::vector<std::string> ids) {
  const std::string secret = ctx.server.options().api_key;
  co_return co_await OffThread(ctx, [&]() -> std::optional<std::string> {
    for (const std::string& id : ids) {
      const std::string expected = FileUrlSignature(s.path, s.operation, s.user,
                                                    SandboxAccessToken(secret, id), s.expiration);
      if (SecretEquals(expected, s.signature)) return id;
    }
    return std::nullopt;
  });
}

}  // namespace

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
  return AdmitHolder(ctx, sb);
}

namespace {

// The id of the sandbox whose token made the signed URL the query carries (of those a caller
// could mean: the one E2b-Sandbox-Id names, else every one), none when it matches none, or
// why it cannot be judged (expired: kUnauthorized).
asio::awaitable<Result<std::optional<std::string>>> SignerOf(Context& ctx,
                                                             std::string_view signature,
                                                             std::string_view operation) {
  Signed s{std::string(ctx.Query("path").value_or("")), std::string(operation),
           std::string(ctx.Query("username").value_or("")),
           std::string(ctx.Query("signature_expiration").value_or("")), std::string(signature)};
  if (!s.expiration.empty()) {
    int64_t at = 0;
    auto [end, ec] =
        std::from_chars(s.expiration.data(), s.expiration.data() + s.expiration.size(), at);
    // Up to the year 9999: a time out of range is no time (and its milliseconds overflow).
    constexpr int64_t kLatest = 253402300799;
    if (ec != std::errc() || end != s.expiration.data() + s.expiration.size() || at < 0 ||
        at > kLatest) {
      co_return Invalid("signature_expiration must be a Unix time in seconds");
    }
    if (at < ToUnixMillis(SystemNow()) / 1000) {
      co_return Error{ErrorCode::kUnauthorized,
                      "this signed URL expired at " + FormatRfc3339(FromUnixMillis(at * 1000))};
    }
  }
  std::vector<std::string> ids;
  if (const std::string_view id = ctx.Header("E2b-Sandbox-Id"); !id.empty()) {
    ids.emplace_back(id);
  } else {
    for (const SandboxEntry* sb : ctx.service.List()) {
      if (!sb->deleting) ids.push_back(sb->id);
    }
  }
  co_return co_await SignedBy(ctx, std::move(s), std::move(ids));
}

}  // namespace

asio::awaitable<Result<const SandboxEntry*>> FilesSandbox(Context& ctx,
                                                          std::string_view operation) {
  const std::optional<std::string_view> signature = ctx.Query("signature");
  if (!signature) co_return EnvdSandbox(ctx);
  // With no sandbox named, the lookup hashes once per sandbox, for anyone: so many a second
  // from one address.
  if (ctx.Header("E2b-Sandbox-Id").empty()) {
    boost::system::error_code ec;
    const auto peer = ctx.stream.socket().remote_endpoint(ec);
    if (!ctx.server.signature_scans().Take(ec ? std::string() : peer.address().to_string())) {
      co_return Error{ErrorCode::kQuotaExceeded,
                      "too many signed file URLs without E2b-Sandbox-Id from this address: "
                      "retry in a second"};
    }
  }
  Result<std::optional<std::string>> id = co_await SignerOf(ctx, *signature, operation);
  if (!id) co_return std::move(id).error();
  if (!*id) {
    co_return Error{ErrorCode::kUnauthorized,
                    "unauthorized access: the signature matches no sandbox's file URL for this "
                    "path, operation and user (or its sandbox is gone)"};
  }
  // It may have gone while the signature was checked.
  const SandboxEntry* sb = ctx.service.Find(**id);
  if (!sb || sb->deleting) co_return SandboxGone(**id);
  co_return AdmitHolder(ctx, sb);
}

asio::awaitable<void> FindSignedSandbox(Context& ctx) {
  const std::string_view operation = ctx.Query("operation").value_or("");
  const std::optional<std::string_view> signature = ctx.Query("signature");
  std::optional<Error> refusal;
  if (operation != "read" && operation != "write") {
    refusal = Invalid("operation must be \"read\" or \"write\"");
  } else if (!signature || signature->empty()) {
    refusal = Invalid("signature is required");
  }
  if (refusal) co_return co_await ReplyError(ctx, *refusal);
  Result<std::optional<std::string>> id = co_await SignerOf(ctx, *signature, operation);
  if (id && !*id) id = Error{ErrorCode::kNotFound, "no sandbox on this node made this signed URL"};
  if (!id) co_return co_await ReplyError(ctx, id.error());
  const boost::json::object body{{"sandbox_id", **id}};
  co_await ReplyJson(ctx, http::status::ok, body);
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
