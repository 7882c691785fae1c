// What the HTTP front decides from a request's header alone, before any of its body is read:
// the route and its captures, the decoded query, the body limit, and the error to answer
// instead of running the handler. Pure: the session (server.cc) does the reading.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "api/http.h"
#include "api/routes.h"
#include "api/server.h"
#include "base/error.h"

namespace sandstream::api {

// The largest request header read; a larger one is answered 431.
inline constexpr size_t kHeaderLimit = 64 * 1024;

struct RouteMatch {
  const Route* route = nullptr;  // null when `refusal` says there is none
  std::string path;              // the target's path, as sent (percent-encoded)
  std::vector<std::string> params;
  std::string allow;  // no route for the method: the path's methods, a 405's Allow header
  std::map<std::string, std::string, std::less<>> query;  // decoded
  uint64_t body_limit = 0;
  Principal principal{};  // who the credential names (the admin for open routes)
  Dialect dialect = Dialect::kSandstream;  // the route's, or for no route the path's
  // No route, the wrong method, no or the wrong API key, a credential the route is not for, or
  // a Content-Length past body_limit.
  std::optional<Error> refusal;
  // Refused for a tenant key's shape with an id this node does not know.
  bool unknown_key = false;
};

RouteMatch MatchRoute(const http::request_parser<http::string_body>& parser,
                      const ServerOptions& options);

// A request for an exposed port (routes_ports.cc): by its host, {port}-{id}.{preview_domain},
// or by its path, /v1/sandboxes/{id}/ports/{port}/... (but .../wait, the API's own).
struct ProxyTarget {
  std::string sandbox_id;
  uint16_t port = 0;
  bool preview = false;  // the host form
  size_t prefix = 0;     // the path form: the length of the path before the port's own path
};
std::optional<ProxyTarget> MatchProxy(std::string_view host, std::string_view path,
                                      const std::string& preview_domain);

// The cookie a preview host keeps its key in, set when it is opened with ?access_token=.
inline constexpr std::string_view kPreviewCookie = "sandstream_preview";

// The crumbs of a Cookie header ("a=1; b=2"), views into it.
struct Cookie {
  std::string_view name;
  std::string_view value;
  std::string_view text;  // name=value as sent
};
std::vector<Cookie> Cookies(std::string_view header);

// The answer to a body past `limit` bytes.
Error BodyTooLarge(uint64_t limit);

// What to answer a request whose header could not be read, if anything: nothing when the
// client closed or went quiet.
std::optional<Error> HeaderError(const boost::system::error_code& ec);

}  // namespace sandstream::api
