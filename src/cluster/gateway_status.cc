// What the gateway says of itself: GET /healthz (its view of the nodes, in detail for the
// admin key), GET /metrics, and its own error answers, counted by code.
#include <algorithm>
#include <string>

#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include "base/log.h"
#include "base/version.h"
#include "cluster/gateway.h"
#include "cluster/gateway_http.h"
#include "http/prometheus.h"
#include "http/status.h"

namespace sandstream::cluster {

namespace {

std::string ErrorBody(const Error& error, bool e2b) {
  if (e2b) {
    return json::serialize(
        json::object{{"code", static_cast<int>(sandstream::http::StatusFor(error.code))},
                     {"message", error.message}});
  }
  return json::serialize(json::object{
      {"error", json::object{{"code", ErrorCodeName(error.code)}, {"message", error.message}}}});
}

// Whether `presented` is `key`, in time that does not depend on where they differ.
bool SameKey(std::string_view presented, std::string_view key) {
  unsigned char diff = presented.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < key.size(); ++i) {
    diff |= static_cast<unsigned char>(key[i] ^ (i < presented.size() ? presented[i] : 0));
  }
  return diff == 0;
}

}  // namespace

asio::awaitable<void> Gateway::Health(beast::tcp_stream& client,
                                      const http::request_header<>& req) {
  // The nodes' records (addresses, load, every tenant's template names) are for the admin key;
  // anyone else hears which nodes are up.
  const std::string_view auth = req[http::field::authorization];
  const bool admin = !options_.api_key.empty() && auth.starts_with("Bearer ") &&
                     SameKey(auth.substr(7), options_.api_key);
  json::array nodes;
  for (const Member* m : members_.All()) {
    json::object o;
    if (admin) {
      o = m->record.Json();
      o["address"] = m->address.text();
    } else {
      o["id"] = m->record.id;
    }
    o["up"] = m->up;
    if (admin && !m->up) o["why_down"] = m->why_down;
    if (admin) o["load"] = m->record.Load(m->pending);
    nodes.push_back(std::move(o));
  }
  json::object body{{"status", listener_.stopping() ? "stopping" : "ok"},
                    {"role", "gateway"},
                    {"version", kVersion},
                    {"nodes", std::move(nodes)}};
  if (const auto& down = members_.unavailable(); down && admin) {
    body["membership_error"] = down->message;
  }
  co_await Answer(client, req.version(), http::status::ok, json::serialize(body));
}

http::response<http::string_body> Gateway::Refusal(const Error& error, bool e2b) {
  ++counts_.refusals[std::string(ErrorCodeName(error.code))];
  log::Info("gateway refused",
            {{"code", std::string(ErrorCodeName(error.code))}, {"error", error.message}});
  http::response<http::string_body> res{sandstream::http::StatusFor(error.code), 11};
  res.set(http::field::server, "sandstreamd");
  res.set(http::field::content_type, "application/json");
  res.body() = ErrorBody(error, e2b);
  return res;
}

asio::awaitable<void> Gateway::Refuse(beast::tcp_stream& client, unsigned version,
                                      const Error& error, bool e2b) {
  http::response<http::string_body> res = Refusal(error, e2b);
  co_await Answer(client, version, res.result(), std::move(res.body()), &res.base());
}

asio::awaitable<void> Gateway::Metrics(beast::tcp_stream& client,
                                       const http::request_header<>& req) {
  std::optional<Error> refusal;
  const std::string_view auth = req[http::field::authorization];
  if (options_.api_key.empty()) {
    refusal = Error{ErrorCode::kNotFound,
                    "this gateway has no /metrics: give it the admin key (api_key) to have one"};
  } else if (!auth.starts_with("Bearer ") || !SameKey(auth.substr(7), options_.api_key)) {
    refusal = Error{ErrorCode::kUnauthorized,
                    "GET /metrics asks for the admin key: send Authorization: Bearer <key>"};
  }
  if (refusal) co_return co_await Refuse(client, req.version(), *refusal, false);
  sandstream::http::PrometheusText p;
  auto count = [](auto n) { return static_cast<double>(n); };
  const std::vector<const Member*> members = members_.All();
  const auto up =
      std::count_if(members.begin(), members.end(), [](const Member* m) { return m->up; });
  p.Family("sandstream_gateway_nodes", "gauge", "Nodes this gateway knows, up or down.");
  p.Sample("sandstream_gateway_nodes", {{"state", "up"}}, count(up));
  p.Sample("sandstream_gateway_nodes", {{"state", "down"}}, count(members.size() - up));
  p.Family("sandstream_gateway_node_up", "gauge",
           "Whether the gateway routes to a node (1) or not.");
  for (const Member* m : members) {
    p.Sample("sandstream_gateway_node_up", {{"node", m->record.id}}, m->up);
  }
  p.Family("sandstream_gateway_node_load", "gauge",
           "A node's load as placement sees it (0 to 1; its sandboxes or memory, the fuller).");
  for (const Member* m : members) {
    p.Sample("sandstream_gateway_node_load", {{"node", m->record.id}}, m->record.Load(m->pending));
  }
  p.Family("sandstream_gateway_node_sandboxes", "gauge", "A node's sandboxes, as it last said.");
  for (const Member* m : members) {
    p.Sample("sandstream_gateway_node_sandboxes", {{"node", m->record.id}},
             count(m->record.sandboxes));
  }
  p.Single("sandstream_gateway_membership_available", "gauge",
           "Whether membership can be read (etcd answers): 1 or 0.", !members_.unavailable());
  p.Family("sandstream_gateway_requests_total", "counter",
           "Requests, by what the gateway does with them (sandbox, create, list, any_node, ...).");
  for (const auto& [route, n] : counts_.requests) {
    p.Sample("sandstream_gateway_requests_total", {{"route", route}}, count(n));
  }
  p.Family("sandstream_gateway_refusals_total", "counter",
           "Errors the gateway answered itself, by code (node_unreachable, unavailable, ...).");
  for (const auto& [code, n] : counts_.refusals) {
    p.Sample("sandstream_gateway_refusals_total", {{"code", code}}, count(n));
  }
  p.Family("sandstream_gateway_placements_total", "counter", "Sandboxes placed, by node.");
  for (const auto& [node, n] : counts_.placements) {
    p.Sample("sandstream_gateway_placements_total", {{"node", node}}, count(n));
  }
  p.Family("sandstream_gateway_relayed_bytes_total", "counter",
           "Bytes relayed between clients and nodes, by direction.");
  p.Sample("sandstream_gateway_relayed_bytes_total", {{"direction", "to_node"}},
           count(counts_.to_node));
  p.Sample("sandstream_gateway_relayed_bytes_total", {{"direction", "to_client"}},
           count(counts_.to_client));
  p.Single("sandstream_gateway_connections_open", "gauge", "Client connections open.",
           count(counts_.connections));
  co_await Answer(client, req.version(), http::status::ok, p.Take(), nullptr,
                  sandstream::http::kPrometheusContentType);
}

}  // namespace sandstream::cluster
