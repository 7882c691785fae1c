// Which sandbox and port a request for an exposed port is for, from its host or its path: how
// a node finds the port it relays to (api's routes for ports) and a gateway the node it passes
// the request on to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sandstream::http {

// A request for an exposed port (api/routes/ports.cc): by its host, {port}-{id}.{preview_domain},
// or by its path, /v1/sandboxes/{id}/ports/{port}/... (but .../wait, the API's own).
struct ProxyTarget {
  std::string sandbox_id;
  uint16_t port = 0;
  bool preview = false;  // the host form
  size_t prefix = 0;     // the path form: the length of the path before the port's own path
};
std::optional<ProxyTarget> MatchProxy(std::string_view host, std::string_view path,
                                      const std::string& preview_domain);

}  // namespace sandstream::http
