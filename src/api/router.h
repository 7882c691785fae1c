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
#include "api/routes/routes.h"
#include "api/server.h"
#include "base/error.h"
#include "http/proxy_target.h"

namespace sandstream::api {

struct RouteMatch {
  const Route* route = nullptr;  // null when `refusal` says there is none
  std::string path;              // the target's path, as sent (percent-encoded)
  std::vector<std::string> params;
  std::string allow;  // no route for the method: the path's methods, a 405's Allow header
  std::map<std::string, std::string, std::less<>> query;  // decoded
  uint64_t body_limit = 0;
  Principal principal{};                   // who the credential names (the admin for open routes)
  Dialect dialect = Dialect::kSandstream;  // the route's, or for no route the path's
  // The sandbox the request is for when answering it resumes that sandbox and keeps it awake
  // (WakesSandbox): its id, from the path or, for envd's routes, the E2b-Sandbox-Id header.
  std::string wakes;
  // No route, the wrong method, no or the wrong API key, a credential the route is not for, or
  // a Content-Length past body_limit.
  std::optional<Error> refusal;
  // Refused for a tenant key's shape with an id this node does not know.
  bool unknown_key = false;
};

RouteMatch MatchRoute(const http::request_parser<http::string_body>& parser,
                      const ServerOptions& options);

// The cookie a preview host keeps its key in, set when it is opened with ?access_token=.
inline constexpr std::string_view kPreviewCookie = "sandstream_preview";

// The crumbs of a Cookie header ("a=1; b=2"), views into it.
struct Cookie {
  std::string_view name;
  std::string_view value;
  std::string_view text;  // name=value as sent
};
std::vector<Cookie> Cookies(std::string_view header);

}  // namespace sandstream::api
