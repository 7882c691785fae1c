#include "http/proxy_target.h"

#include <cctype>

#include <boost/beast/core/string.hpp>

namespace sandstream::http {

std::optional<ProxyTarget> MatchProxy(std::string_view host, std::string_view path,
                                      const std::string& preview_domain) {
  auto port_of = [](std::string_view digits) -> std::optional<uint16_t> {
    if (digits.empty() || digits.size() > 5 || digits.front() == '0') return std::nullopt;
    uint32_t port = 0;
    for (char c : digits) {
      if (c < '0' || c > '9') return std::nullopt;
      port = port * 10 + static_cast<uint32_t>(c - '0');
    }
    if (port == 0 || port > 65535) return std::nullopt;
    return static_cast<uint16_t>(port);
  };
  // {port}-{id}.{preview_domain}[:listen port], any case.
  if (const size_t colon = host.rfind(':');
      colon != std::string_view::npos && host.find(']') == std::string_view::npos) {
    host = host.substr(0, colon);
  }
  const size_t dot = host.find('.');
  const size_t dash = host.find('-');
  if (dot != std::string_view::npos && dash < dot &&
      boost::beast::iequals(host.substr(dot + 1), preview_domain)) {
    auto port = port_of(host.substr(0, dash));
    std::string id(host.substr(dash + 1, dot - dash - 1));
    for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (port && id.starts_with("sb_")) return ProxyTarget{std::move(id), *port, true, 0};
  }
  // /v1/sandboxes/{id}/ports/{port}/..., but for .../wait (the API's own).
  constexpr std::string_view kPrefix = "/v1/sandboxes/";
  if (!path.starts_with(kPrefix)) return std::nullopt;
  std::string_view rest = path.substr(kPrefix.size());
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos || slash == 0) return std::nullopt;
  std::string id(rest.substr(0, slash));
  rest.remove_prefix(slash);
  if (!rest.starts_with("/ports/")) return std::nullopt;
  rest.remove_prefix(7);
  const size_t end = rest.find('/');
  if (end == std::string_view::npos) return std::nullopt;
  auto port = port_of(rest.substr(0, end));
  if (!port) return std::nullopt;
  rest.remove_prefix(end);
  if (rest == "/wait") return std::nullopt;
  return ProxyTarget{std::move(id), *port, false, path.size() - rest.size()};
}

}  // namespace sandstream::http
