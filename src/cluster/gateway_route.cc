// Which way a request goes through the gateway, from its head alone (RouteOf), and the name
// each way has in the gateway's metrics.
#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/http.hpp>

#include "cluster/gateway.h"
#include "http/proxy_target.h"

namespace sandstream::cluster {
namespace http = boost::beast::http;

namespace {

// The segment after `prefix` ("/v1/sandboxes/") up to the next '/', if the path has one.
std::optional<std::string> SegmentAfter(std::string_view path, std::string_view prefix) {
  if (!path.starts_with(prefix)) return std::nullopt;
  path.remove_prefix(prefix.size());
  std::string_view id = path.substr(0, path.find('/'));
  if (id.empty()) return std::nullopt;
  return std::string(id);
}

// Whether the target's query has a field `name` (`?name=` or `&name=`).
bool HasQueryField(std::string_view target, std::string_view name) {
  const size_t mark = target.find('?');
  if (mark == std::string_view::npos) return false;
  std::string_view query = target.substr(mark + 1);
  while (!query.empty()) {
    const std::string_view field = query.substr(0, query.find('&'));
    if (field.substr(0, field.find('=')) == name) return true;
    query.remove_prefix(std::min(query.size(), field.size() + 1));
  }
  return false;
}

}  // namespace

const char* RouteName(GatewayRoute::Kind kind) {
  switch (kind) {
    case GatewayRoute::kHealth:
      return "health";
    case GatewayRoute::kMetrics:
      return "metrics";
    case GatewayRoute::kList:
      return "list";
    case GatewayRoute::kTemplates:
      return "templates";
    case GatewayRoute::kVolumes:
      return "volumes";
    case GatewayRoute::kTemplate:
      return "template";
    case GatewayRoute::kEveryNode:
      return "every_node";
    case GatewayRoute::kCreate:
      return "create";
    case GatewayRoute::kSandbox:
      return "sandbox";
    case GatewayRoute::kAnyNode:
      return "any_node";
    case GatewayRoute::kSignedUrl:
      return "signed_url";
    case GatewayRoute::kNotHere:
      return "not_here";
  }
  return "unknown";
}

GatewayRoute RouteOf(const http::request_header<>& req, const std::string& preview_domain,
                     bool shared_tenants) {
  const std::string_view target = req.target();
  const std::string_view path = target.substr(0, target.find('?'));
  const bool read_only = req.method() == http::verb::get || req.method() == http::verb::head;
  if (path == "/healthz" && read_only) return {GatewayRoute::kHealth, {}};
  if (path == "/metrics" && read_only) return {GatewayRoute::kMetrics, {}};
  if (auto proxy = sandstream::http::MatchProxy(req[http::field::host], path, preview_domain);
      proxy && proxy->preview) {
    return {GatewayRoute::kSandbox, proxy->sandbox_id};
  }
  // E2B's envd routes name their sandbox in a header.
  if (const std::string_view id = req["E2b-Sandbox-Id"]; !id.empty()) {
    return {GatewayRoute::kSandbox, std::string(id), true};
  }
  if (path == "/v1/sandboxes") {
    if (req.method() == http::verb::get) return {GatewayRoute::kList, {}};
    if (req.method() == http::verb::post) return {GatewayRoute::kCreate, {}};
    return {GatewayRoute::kNotHere, {}};
  }
  if (path == "/v2/sandboxes" || path == "/sandboxes") {
    if (req.method() == http::verb::get) return {GatewayRoute::kList, {}, true};
    if (req.method() == http::verb::post && path == "/v2/sandboxes") {
      return {GatewayRoute::kCreate, {}, true};
    }
    return {GatewayRoute::kNotHere, {}, true};
  }
  if (auto id = SegmentAfter(path, "/v1/sandboxes/")) return {GatewayRoute::kSandbox, *id};
  // E2B's signed file URLs name no sandbox (the header above would): their signature does.
  if (path == "/files" && (req.method() == http::verb::get || req.method() == http::verb::post) &&
      HasQueryField(target, "signature")) {
    return {GatewayRoute::kSignedUrl, {}, true};
  }
  // Templates are each node's: pulled and deleted on all of them, listed from all of them.
  if (path == "/v1/templates") {
    if (req.method() == http::verb::get) return {GatewayRoute::kTemplates, {}};
    if (req.method() == http::verb::post) return {GatewayRoute::kEveryNode, {}};
  }
  if (auto name = SegmentAfter(path, "/v1/templates/"); name && path.size() == 14 + name->size()) {
    if (req.method() == http::verb::get) return {GatewayRoute::kTemplate, {}, false, *name};
    if (req.method() == http::verb::delete_) return {GatewayRoute::kEveryNode, {}};
  }
  for (std::string_view prefix : {"/v2/sandboxes/", "/sandboxes/"}) {
    if (auto id = SegmentAfter(path, prefix)) return {GatewayRoute::kSandbox, *id, true};
  }
  // A volume lives on one node, which its id names; a new one goes to the least loaded.
  if (path == "/v1/volumes" || path == "/volumes") {
    const bool e2b = path == "/volumes";
    if (req.method() == http::verb::get) return {GatewayRoute::kVolumes, {}, e2b};
    if (req.method() == http::verb::post) return {GatewayRoute::kAnyNode, {}, e2b};
  }
  if (auto id = SegmentAfter(path, "/v1/volumes/")) return {GatewayRoute::kSandbox, *id};
  for (std::string_view prefix : {"/volumes/", "/volumecontent/"}) {
    if (auto id = SegmentAfter(path, prefix)) return {GatewayRoute::kSandbox, *id, true};
  }
  if (read_only) return {GatewayRoute::kAnyNode, {}};
  if (shared_tenants && path.starts_with("/v1/admin/tenants")) return {GatewayRoute::kAnyNode, {}};
  return {GatewayRoute::kNotHere, {}};
}

Error Gateway::NotServed(const http::request_header<>& req) {
  const std::string_view target = req.target();
  return Error{ErrorCode::kNotImplemented,
               std::string(req.method_string()) + " " +
                   std::string(target.substr(0, target.find('?'))) +
                   " changes what each node holds on its own and is not served through a "
                   "gateway: send it to every node"};
}

}  // namespace sandstream::cluster
