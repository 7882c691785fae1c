#include "api/router.h"

#include <algorithm>
#include <cctype>

#include <boost/beast/core/string.hpp>
#include <boost/url/parse.hpp>

#include "api/cloudflare/routes.h"
#include "api/e2b/routes.h"
#include "base/ids.h"
#include "http/headers.h"

namespace sandstream::api {
namespace {

// Splits "/a/b/c" into {"a","b","c"}; empty segments (double slashes) are kept as empty.
std::vector<std::string_view> Segments(std::string_view path) {
  std::vector<std::string_view> out;
  if (path.starts_with('/')) path.remove_prefix(1);
  while (!path.empty()) {
    const size_t slash = path.find('/');
    out.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return out;
}

bool Match(std::string_view pattern, const std::vector<std::string_view>& segs,
           std::vector<std::string>* params) {
  const auto pat = Segments(pattern);
  if (pat.size() != segs.size()) return false;
  std::vector<std::string> captured;
  for (size_t i = 0; i < pat.size(); ++i) {
    if (pat[i] == "{}") {
      if (segs[i].empty()) return false;
      captured.emplace_back(segs[i]);
    } else if (pat[i] != segs[i]) {
      return false;
    }
  }
  *params = std::move(captured);
  return true;
}

struct Resolved {
  const Route* route = nullptr;
  bool path_known = false;
  std::string allow;  // no route for the method: the path's methods, a 405's Allow header
  std::vector<std::string> params;
};

Resolved Resolve(http::verb method, std::string_view path) {
  Resolved r;
  const auto segs = Segments(path);
  for (const auto& route : AllRoutes()) {
    std::vector<std::string> params;
    if (!Match(route.pattern, segs, &params)) continue;
    r.path_known = true;
    if (route.method == method) {
      r.route = &route;
      r.params = std::move(params);
      r.allow.clear();
      return r;
    }
    // Paths may match more than one pattern (/healthz and the console's /{}): one name each.
    const std::string_view name = http::to_string(route.method);
    if (r.allow.find(name) != std::string::npos) continue;
    if (!r.allow.empty()) r.allow += ", ";
    r.allow += name;
  }
  return r;
}

using Query = std::map<std::string, std::string, std::less<>>;

std::optional<Error> RouteError(const Resolved& resolved,
                                const http::request_parser<http::string_body>& parser,
                                const std::string& path) {
  if (resolved.route) return std::nullopt;
  if (resolved.path_known) {
    return Error{ErrorCode::kMethodNotAllowed,
                 std::string(parser.get().method_string()) + " is not allowed on " + path};
  }
  return Error{ErrorCode::kNotFound, "no route " + path};
}

// `with_cookie`: a preview host also takes the key from its cookie (api/routes/ports.cc).
// The credential a request carries: its bearer token, else ?access_token=, else (the preview
// form of a port) its preview cookie.
std::string_view Credential(const http::request_parser<http::string_body>& parser,
                            const Query& query, bool with_cookie, Dialect dialect) {
  const auto& header = parser.get();
  const auto field = header.find(http::field::authorization);
  const std::string_view auth =
      field == header.end() ? std::string_view() : std::string_view(field->value());
  if (auth.starts_with("Bearer ")) return auth.substr(7);
  // E2B's SDKs send their key (E2B_API_KEY) as X-API-KEY.
  if (const auto key = header.find("X-API-KEY"); dialect == Dialect::kE2b && key != header.end()) {
    return key->value();
  }
  if (auto q = query.find("access_token"); q != query.end()) return q->second;
  if (with_cookie) {
    std::string_view key;
    for (const Cookie& c : Cookies(header[http::field::cookie])) {
      if (c.name == kPreviewCookie) key = c.value;
    }
    return key;
  }
  return {};
}

// Who the credential is, or the 401.
Result<Principal> Authenticate(std::string_view credential, const ServerOptions& options) {
  if (options.access) return options.access->Authenticate(credential);
  if (credential.empty()) {
    return Error{ErrorCode::kUnauthorized,
                 "missing API key: send Authorization: Bearer <key> (or ?access_token=<key>)"};
  }
  if (!SecretEquals(credential, options.api_key)) {
    return Error{ErrorCode::kUnauthorized, "wrong API key"};
  }
  Principal admin;
  admin.credential = "admin";
  return admin;
}

// Whether `p` may use a route that needs `need`, on the sandbox `sandbox` (the first capture of
// a sandbox's route) and, for a port, `port`. A token's other sandbox does not exist for it.
std::optional<Error> Forbidden(const Principal& p, Need need, std::string_view sandbox,
                               uint16_t port) {
  if (p.admin()) return std::nullopt;
  if (need == Need::kAdmin) {
    return Error{ErrorCode::kForbidden, "this needs the admin key"};
  }
  if (p.kind == Principal::Kind::kTenant) return std::nullopt;
  if (need == Need::kTenant) {
    return Error{ErrorCode::kForbidden,
                 "a scoped token opens its sandbox's routes only, not this one: use a key"};
  }
  if (sandbox != p.sandbox) {
    return Error{ErrorCode::kNotFound, "no sandbox '" + std::string(sandbox) + "'"};
  }
  const auto missing = [&](const char* scope) {
    return Error{ErrorCode::kForbidden, "token " + p.credential + " has no '" + scope + "' scope"};
  };
  switch (need) {
    case Need::kRead:
      if (!(p.grant.scopes & kScopeRead)) return missing("read");
      break;
    case Need::kExec:
      if (!(p.grant.scopes & kScopeExec)) return missing("exec");
      break;
    case Need::kTerminal:
      if (!(p.grant.scopes & kScopeTerminal)) return missing("terminal");
      break;
    case Need::kFilesRead:
      if (!(p.grant.scopes & kScopeFilesRead)) return missing("files:read");
      break;
    case Need::kFilesWrite:
      if (!(p.grant.scopes & kScopeFilesWrite)) return missing("files:write");
      break;
    case Need::kPort:
      if (std::find(p.grant.ports.begin(), p.grant.ports.end(), port) == p.grant.ports.end()) {
        return Error{ErrorCode::kForbidden,
                     "token " + p.credential + " has no 'port:" + std::to_string(port) + "' scope"};
      }
      break;
    case Need::kAdmin:
    case Need::kTenant:
      break;
  }
  return std::nullopt;
}

// Authenticates the request for `route` and checks that the credential may use it.
std::optional<Error> Admit(const http::request_parser<http::string_body>& parser, RouteMatch& m,
                           const ServerOptions& options, bool with_cookie = false,
                           uint16_t port = 0) {
  if (m.route->open) {
    // envd's routes are open to the sandbox's token, which the head shows as a key would be.
    return e2b::AdmitEnvdHead(*m.route, parser.get(), m.query.contains("signature"), options,
                              &m.unknown_key);
  }
  const std::string_view credential = Credential(parser, m.query, with_cookie, m.route->dialect);
  auto principal = Authenticate(credential, options);
  if (!principal) {
    m.unknown_key = options.access && options.access->UnknownKey(credential);
    return std::move(principal).error();
  }
  m.principal = std::move(*principal);
  const std::string_view sandbox =
      m.route->pattern.starts_with("/v1/sandboxes/{}") && !m.params.empty()
          ? std::string_view(m.params[0])
          : std::string_view();
  return Forbidden(m.principal, RouteNeed(*m.route), sandbox, port);
}

}  // namespace

RouteMatch MatchRoute(const http::request_parser<http::string_body>& parser,
                      const ServerOptions& options) {
  RouteMatch m;
  const std::string target(parser.get().target());
  auto url = boost::urls::parse_origin_form(target);
  m.path = url ? std::string(url->encoded_path()) : target;
  if (url) {
    for (auto param : url->params()) m.query[param.key] = param.value;
  }
  if (auto proxy = sandstream::http::MatchProxy(parser.get()[http::field::host], m.path,
                                                options.preview_domain)) {
    m.route = &ProxyRoute();
    m.params = {proxy->sandbox_id, std::to_string(proxy->port),
                proxy->preview ? "" : m.path.substr(0, proxy->prefix)};
    m.body_limit = options.max_file_bytes;
    m.refusal = Admit(parser, m, options, proxy->preview, proxy->port);
    m.wakes = proxy->sandbox_id;
    return m;
  }
  Resolved resolved = Resolve(parser.get().method(), m.path);
  m.route = resolved.route;
  // A path of a client's dialect hears even "no such route" in that client's shape.
  m.dialect = m.route ? m.route->dialect
              : cloudflare::OwnsPath(m.path)
                  ? Dialect::kCloudflare
                  : e2b::DialectOf(m.path).value_or(Dialect::kSandstream);
  m.params = std::move(resolved.params);
  m.allow = std::move(resolved.allow);
  // An image archive is the one streamed body that is not a file of a sandbox.
  m.body_limit = m.route && m.route->handler == CreateTemplate ? options.max_image_bytes
                 : m.route && m.route->stream_body             ? options.max_file_bytes
                 : m.route && m.route->raw_body                ? options.max_stdin_bytes
                                                               : options.max_body_bytes;
  // No body is read before its sender is known: an open route the head does not admit its
  // caller to (a signed /files URL, /healthz, the console) takes none, but the upload that
  // its handler reads only once it has judged the signature.
  if (m.route && m.route->open && !m.route->stream_body &&
      !e2b::AdmitsFromHead(*m.route, m.query.contains("signature"))) {
    m.body_limit = 0;
  }
  if (m.route && WakesSandbox(*m.route)) {
    if (m.route->pattern.starts_with("/v1/sandboxes/{}") && !m.params.empty()) {
      m.wakes = m.params[0];
    } else if (m.dialect == Dialect::kE2b || m.dialect == Dialect::kConnect) {
      m.wakes = std::string(parser.get()["E2b-Sandbox-Id"]);
    }
  }
  m.refusal = RouteError(resolved, parser, m.path);
  if (!m.refusal) m.refusal = Admit(parser, m, options);
  if (auto length = parser.content_length(); !m.refusal && length && *length > m.body_limit) {
    m.refusal = sandstream::http::BodyTooLarge(m.body_limit);
  }
  return m;
}

std::vector<Cookie> Cookies(std::string_view header) {
  std::vector<Cookie> out;
  while (!header.empty()) {
    const size_t semi = header.find(';');
    std::string_view crumb = header.substr(0, semi);
    header = semi == std::string_view::npos ? std::string_view() : header.substr(semi + 1);
    while (crumb.starts_with(' ')) crumb.remove_prefix(1);
    if (crumb.empty()) continue;
    const size_t eq = crumb.find('=');
    out.push_back(Cookie{crumb.substr(0, eq),
                         eq == std::string_view::npos ? std::string_view() : crumb.substr(eq + 1),
                         crumb});
  }
  return out;
}

}  // namespace sandstream::api
