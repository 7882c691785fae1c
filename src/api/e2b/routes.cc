#include "api/e2b/routes.h"

#include <charconv>

#include "api/common/files.h"
#include "api/e2b/connect.h"
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
      // Before /sandboxes/{}: "metrics" is no sandbox id.
      {V::get, "/sandboxes/metrics", SandboxesMetrics, kKey, false, false, kApi},
      {V::get, "/sandboxes/{}", GetSandbox, kKey, false, false, kApi},
      {V::delete_, "/sandboxes/{}", KillSandbox, kKey, false, false, kApi},
      {V::post, "/sandboxes/{}/timeout", SetTimeout, kKey, false, false, kApi},
      {V::post, "/sandboxes/{}/pause", PauseSandbox, kKey, false, false, kApi},
      {V::post, "/sandboxes/{}/resume", ResumeSandbox, kKey, false, false, kApi},
      {V::get, "/sandboxes/{}/metrics", SandboxMetrics, kKey, false, false, kApi},
      {V::post, "/sandboxes/{}/snapshots", CreateSnapshot, kKey, false, false, kApi},
      {V::post, "/sandboxes/{}/fork", ForkSandbox, kKey, false, false, kApi},
      {V::put, "/sandboxes/{}/network", UpdateNetwork, kKey, false, false, kApi},
      {V::get, "/snapshots", ListSnapshots, kKey, false, false, kApi},
      // The rest of E2B's control plane, answered 501 naming what to use instead (never a 404
      // that its SDK would report as a missing sandbox).
      {V::get, "/sandboxes/{}/logs", NotSupported, kKey, false, false, kApi},
      {V::get, "/v2/sandboxes/{}/logs", NotSupported, kKey, false, false, kApi},
      {V::get, "/volumes", ListVolumes, kKey, false, false, kApi},
      {V::post, "/volumes", CreateVolume, kKey, false, false, kApi},
      {V::get, "/volumes/{}", GetVolume, kKey, false, false, kApi},
      {V::delete_, "/volumes/{}", DestroyVolume, kKey, false, false, kApi},
      // A volume's files, admitted by its token (volumes.cc), not by a key.
      {V::get, "/volumecontent/{}/dir", VolumeListDir, kOpen, false, false, kApi},
      {V::post, "/volumecontent/{}/dir", VolumeMakeDir, kOpen, false, false, kApi},
      {V::get, "/volumecontent/{}/path", VolumeStat, kOpen, false, false, kApi},
      {V::patch, "/volumecontent/{}/path", VolumeUpdateMetadata, kOpen, false, false, kApi},
      {V::delete_, "/volumecontent/{}/path", VolumeRemove, kOpen, false, false, kApi},
      {V::get, "/volumecontent/{}/file", VolumeReadFile, kOpen, false, false, kApi},
      {V::put, "/volumecontent/{}/file", VolumeWriteFile, kOpen, false, true, kApi},
      {V::get, "/secrets", NotSupported, kKey, false, false, kApi},
      {V::post, "/secrets", NotSupported, kKey, false, false, kApi},
      {V::get, "/secrets/{}", NotSupported, kKey, false, false, kApi},
      {V::post, "/secrets/{}", NotSupported, kKey, false, false, kApi},
      {V::delete_, "/secrets/{}", NotSupported, kKey, false, false, kApi},
      {V::post, "/v3/templates", NotSupported, kKey, false, false, kApi},
      {V::post, "/v2/templates/{}/builds/{}", NotSupported, kKey, false, false, kApi},
      {V::get, "/templates/{}/builds/{}/status", NotSupported, kKey, false, false, kApi},
      {V::get, "/templates/{}/files/{}", NotSupported, kKey, false, false, kApi},
      {V::get, "/templates/{}/tags", NotSupported, kKey, false, false, kApi},
      {V::post, "/templates/tags", NotSupported, kKey, false, false, kApi},
      {V::delete_, "/templates/tags", NotSupported, kKey, false, false, kApi},
      {V::get, "/templates/aliases/{}", NotSupported, kKey, false, false, kApi},
      // After /templates/tags: a snapshot (or any template of the caller's) by its name.
      {V::delete_, "/templates/{}", DeleteTemplate, kKey, false, false, kApi},
      {V::post, "/process.Process/StreamInput", StreamInput, kOpen, false, true, kRpc},
      // stdin may come in one call: the larger limit of stdin uploads (max_stdin_bytes).
      {V::post, "/process.Process/{}", ProcessRpc, kOpen, true, false, kRpc},
      {V::post, "/filesystem.Filesystem/{}", FilesystemRpc, kOpen, false, false, kRpc},
      {V::get, "/files", ReadFile, kOpen, false, false, kApi},
      {V::post, "/files", WriteFiles, kOpen, false, true, kApi},
      {V::get, "/health", Health, kOpen, false, false, kApi},
      // The code interpreter's server (E2b-Sandbox-Port 49999 in E2B's SDKs).
      {V::post, "/execute", ExecuteCode, kOpen, false, false, kApi},
      {V::get, "/contexts", ListCodeContexts, kOpen, false, false, kApi},
      {V::post, "/contexts", CreateCodeContext, kOpen, false, false, kApi},
      {V::delete_, "/contexts/{}", RemoveCodeContext, kOpen, false, false, kApi},
      {V::post, "/contexts/{}/restart", RestartCodeContext, kOpen, false, false, kApi},
  };
  return kRoutes;
}

Need RouteNeed(Handler) {
  return Need::kTenant;
}

bool WakesSandbox(Handler handler) {
  for (Handler envd :
       {ProcessRpc, StreamInput, FilesystemRpc, ReadFile, WriteFiles, ExecuteCode, ListCodeContexts,
        CreateCodeContext, RemoveCodeContext, RestartCodeContext}) {
    if (handler == envd) return true;
  }
  return false;
}

std::optional<Dialect> DialectOf(std::string_view path) {
  if (path.starts_with("/process.Process/") || path.starts_with("/filesystem.Filesystem/")) {
    return Dialect::kConnect;
  }
  for (std::string_view prefix :
       {"/v2/sandboxes", "/sandboxes", "/snapshots", "/volumes", "/volumecontent", "/secrets",
        "/templates", "/v2/templates", "/v3/templates", "/execute", "/contexts"}) {
    if (path.starts_with(prefix) && (path.size() == prefix.size() || path[prefix.size()] == '/')) {
      return Dialect::kE2b;
    }
  }
  return std::nullopt;
}

namespace {

// Admits the caller of an envd route, who has shown it holds `sb`'s access token, handed to
// `holder`: a token of that sandbox alone, counted against its tenant's quotas (the router
// admitted no tenant, as these routes are open to it), and standing on the holder's key.
Result<const SandboxEntry*> AdmitHolder(Context& ctx, const SandboxEntry* sb,
                                        const std::string& holder, EnvdCall call) {
  Principal p;
  p.kind = Principal::Kind::kToken;
  p.tenant = sb->tenant;
  p.credential = "envd:" + sb->id;
  p.sandbox = sb->id;
  p.derived = true;
  if (holder != kAdminHolder) p.key = holder;
  p.grant.scopes = kScopeRead | kScopeExec | kScopeTerminal | kScopeFilesRead | kScopeFilesWrite;
  ctx.principal = std::move(p);
  const bool stream = call == EnvdCall::kStream || IsStreamingCall(ctx);
  if (auto refused = ctx.server.AdmitTenant(sb->tenant, stream)) return *refused;
  return sb;
}

// The holder of `token` as an access token of sandbox `id`, if that holder still opens it:
// the admin, or a key that exists (of `tenant`, the sandbox's, once it is known: a key sees
// its own tenant's sandboxes only). `unknown_key`: the holder is a key this node does not know.
std::optional<std::string> LiveHolder(const ServerOptions& options, std::string_view id,
                                      std::string_view token,
                                      std::optional<std::string_view> tenant,
                                      bool* unknown_key = nullptr) {
  std::optional<std::string> holder = AccessTokenHolder(options.api_key, id, token);
  if (!holder || *holder == kAdminHolder) return holder;
  if (!options.access) return std::nullopt;
  if (tenant && tenant->empty()) return std::nullopt;
  if (!options.access->KeyLive(*holder, tenant.value_or(std::string_view()))) {
    if (unknown_key) *unknown_key = !options.access->KeyLive(*holder);
    return std::nullopt;
  }
  return holder;
}

// The holders whose access tokens of `sb` still open it: the admin and its tenant's keys.
std::vector<std::string> Holders(const ServerOptions& options, const SandboxEntry& sb) {
  std::vector<std::string> out{std::string(kAdminHolder)};
  if (options.access && !sb.tenant.empty()) {
    for (const KeyInfo& key : options.access->Keys(sb.tenant)) out.push_back(key.id);
  }
  return out;
}

Error Unauthenticated(std::string_view why) {
  return Error{ErrorCode::kUnauthorized,
               "unauthorized access: " + std::string(why) +
                   " (X-Access-Token or E2B-Traffic-Access-Token must be the sandbox's "
                   "envdAccessToken, as the control plane handed it out)"};
}

// The access token a request shows: X-Access-Token, else E2B-Traffic-Access-Token (the only
// one the code interpreter SDKs send on /contexts; the control plane hands out one token as
// both).
std::string_view TokenOf(const http::fields& head) {
  const std::string_view token = head["X-Access-Token"];
  if (!token.empty()) return token;
  return head["E2B-Traffic-Access-Token"];
}

// The refusal of an envd request whose head shows no live access token of the sandbox it
// names, whether or not that sandbox exists. Sets `holder` to the token's holder.
std::optional<Error> RefuseHead(const ServerOptions& options, std::string_view id,
                                std::string_view token, std::optional<std::string_view> tenant,
                                std::string* holder, bool* unknown_key = nullptr) {
  if (token.empty()) return Unauthenticated("no access token");
  if (id.empty()) {
    return Error{ErrorCode::kInvalidRequest,
                 "missing E2b-Sandbox-Id header: set E2B_SANDBOX_URL to the daemon's URL"};
  }
  std::optional<std::string> live = LiveHolder(options, id, token, tenant, unknown_key);
  if (!live) {
    return Unauthenticated(
        "the token is not this sandbox's, or the key it was handed to "
        "was revoked");
  }
  *holder = std::move(*live);
  return std::nullopt;
}

struct Signed {
  std::string path, operation, user, expiration, signature;
};
// A sandbox whose token may have made a signed URL, and the holders of its live tokens.
struct Signer {
  std::string id;
  std::vector<std::string> holders;
};
struct SignedHolder {
  std::string id, holder;
};

// A signed URL's sandbox and holder: of `signers`, the one whose token made `s.signature`. The
// hashing runs on the blocking pool, as it is one per live token of each sandbox.
asio::awaitable<std::optional<SignedHolder>> SignedBy(Context& ctx, Signed s,
                                                      std::vector<Signer> signers) {
  const std::string secret = ctx.server.options().api_key;
  co_return co_await OffThread(ctx, [&]() -> std::optional<SignedHolder> {
    for (const Signer& signer : signers) {
      for (const std::string& holder : signer.holders) {
        const std::string expected =
            FileUrlSignature(s.path, s.operation, s.user,
                             SandboxAccessToken(secret, signer.id, holder), s.expiration);
        if (SecretEquals(expected, s.signature)) return SignedHolder{signer.id, holder};
      }
    }
    return std::nullopt;
  });
}

}  // namespace

std::optional<Error> AdmitEnvdHead(const Route& route, const http::request_header<>& head,
                                   bool signed_url, const ServerOptions& options,
                                   bool* unknown_key) {
  if (!AdmitsFromHead(route, signed_url)) return std::nullopt;
  // A volume's files name no sandbox: the Bearer must be the token of the volume the path
  // names, handed to a key still live (its handler checks the key is the volume's tenant's).
  if (route.pattern.starts_with("/volumecontent/")) {
    const std::string_view auth = head[http::field::authorization];
    const std::string_view token = auth.starts_with("Bearer ") ? auth.substr(7) : "";
    std::string_view id = head.target().substr(std::string_view("/volumecontent/").size());
    id = id.substr(0, id.find('/'));
    if (VolumeHolder(options, id, token)) return std::nullopt;
    return VolumeUnauthorized();
  }
  std::string holder;
  return RefuseHead(options, head["E2b-Sandbox-Id"], TokenOf(head), std::nullopt, &holder,
                    unknown_key);
}

bool AdmitsFromHead(const Route& route, bool signed_url) {
  if (!route.open || (route.dialect != Dialect::kConnect && route.dialect != Dialect::kE2b)) {
    return false;
  }

  return !signed_url || (route.handler != ReadFile && route.handler != WriteFiles);
}

Result<const SandboxEntry*> EnvdSandbox(Context& ctx, EnvdCall call) {
  const std::string_view id = ctx.Header("E2b-Sandbox-Id");
  const std::string_view token = TokenOf(ctx.req);
  const SandboxEntry* sb = ctx.service.Find(id);
  const bool here = sb && !sb->deleting;
  // The credential first: whether a sandbox exists is no one's business without it.
  std::string holder;
  if (auto refused =
          RefuseHead(ctx.server.options(), id, token,
                     here ? std::optional<std::string_view>(sb->tenant) : std::nullopt, &holder)) {
    return *refused;
  }
  if (!here) return SandboxGone(id);
  return AdmitHolder(ctx, sb, holder, call);
}

namespace {

// The id of the sandbox whose token made the signed URL the query carries (of those a caller
// could mean: the one E2b-Sandbox-Id names, else every one), none when it matches none, or
// why it cannot be judged (expired: kUnauthorized).
asio::awaitable<Result<std::optional<SignedHolder>>> SignerOf(Context& ctx,
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
  std::vector<Signer> signers;
  const auto add = [&](const SandboxEntry* sb) {
    if (sb && !sb->deleting) signers.push_back({sb->id, Holders(ctx.server.options(), *sb)});
  };
  if (const std::string_view id = ctx.Header("E2b-Sandbox-Id"); !id.empty()) {
    add(ctx.service.Find(id));
  } else {
    for (const SandboxEntry* sb : ctx.service.List()) add(sb);
  }
  co_return co_await SignedBy(ctx, std::move(s), std::move(signers));
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
  Result<std::optional<SignedHolder>> id = co_await SignerOf(ctx, *signature, operation);
  if (!id) co_return std::move(id).error();
  if (!*id) {
    co_return Error{ErrorCode::kUnauthorized,
                    "unauthorized access: the signature matches no sandbox's file URL for this "
                    "path, operation and user (or its sandbox is gone)"};
  }
  // It may have gone while the signature was checked.
  const SandboxEntry* sb = ctx.service.Find((*id)->id);
  if (!sb || sb->deleting) co_return SandboxGone((*id)->id);
  co_return AdmitHolder(ctx, sb, (*id)->holder, EnvdCall::kRequest);
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
  Result<std::optional<SignedHolder>> id = co_await SignerOf(ctx, *signature, operation);
  if (id && !*id) id = Error{ErrorCode::kNotFound, "no sandbox on this node made this signed URL"};
  if (!id) co_return co_await ReplyError(ctx, id.error());
  const boost::json::object body{{"sandbox_id", (*id)->id}};
  co_await ReplyJson(ctx, http::status::ok, body);
}

Result<bool> ActsAsRoot(const Context& ctx) {
  std::string user;
  if (auto name = ctx.Query("username")) {
    user = *name;
  } else if (ctx.Query("signature")) {
    // A signed URL's user is the one it was signed for (none: the default user), as envd has
    // it: a header added to it changes nothing.
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
