#include "api/router.h"

#include <boost/url/parse.hpp>

#include "base/ids.h"

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

std::optional<Error> AuthError(const http::request_parser<http::string_body>& parser,
                               const Query& query, const Route& route, const std::string& api_key) {
  if (route.open) return std::nullopt;
  const auto& header = parser.get();
  const auto field = header.find(http::field::authorization);
  std::string_view auth =
      field == header.end() ? std::string_view() : std::string_view(field->value());
  std::string_view key;
  if (auth.starts_with("Bearer ")) {
    key = auth.substr(7);
  } else if (auto q = query.find("access_token"); q != query.end()) {
    key = q->second;
  }
  if (key.empty()) {
    return Error{ErrorCode::kUnauthorized,
                 "missing API key: send Authorization: Bearer <key> (or ?access_token=<key>)"};
  }
  if (!SecretEquals(key, api_key)) return Error{ErrorCode::kUnauthorized, "wrong API key"};
  return std::nullopt;
}

}  // namespace

RouteMatch MatchRoute(const http::request_parser<http::string_body>& parser,
                      const ServerOptions& options) {
  RouteMatch m;
  const std::string target(parser.get().target());
  auto url = boost::urls::parse_origin_form(target);
  m.path = url ? std::string(url->encoded_path()) : target;
  Resolved resolved = Resolve(parser.get().method(), m.path);
  m.route = resolved.route;
  m.params = std::move(resolved.params);
  m.allow = std::move(resolved.allow);
  if (url) {
    for (auto param : url->params()) m.query[param.key] = param.value;
  }
  m.body_limit = m.route && m.route->stream_body ? options.max_file_bytes
                 : m.route && m.route->raw_body  ? options.max_stdin_bytes
                                                 : options.max_body_bytes;
  m.refusal = RouteError(resolved, parser, m.path);
  if (!m.refusal) m.refusal = AuthError(parser, m.query, *m.route, options.api_key);
  if (auto length = parser.content_length(); !m.refusal && length && *length > m.body_limit) {
    m.refusal = BodyTooLarge(m.body_limit);
  }
  return m;
}

Error BodyTooLarge(uint64_t limit) {
  return Error{ErrorCode::kPayloadTooLarge,
               "request body is larger than " + std::to_string(limit) + " bytes"};
}

std::optional<Error> HeaderError(const boost::system::error_code& ec) {
  if (ec == http::error::header_limit) {
    return Error{ErrorCode::kRequestHeaderTooLarge,
                 "request header is larger than " + std::to_string(kHeaderLimit) + " bytes"};
  }
  if (ec.category() != make_error_code(http::error::header_limit).category() ||
      ec == http::error::end_of_stream || ec == http::error::partial_message) {
    return std::nullopt;
  }
  return Error{ErrorCode::kInvalidRequest, "malformed HTTP request: " + ec.message()};
}

}  // namespace sandstream::api
