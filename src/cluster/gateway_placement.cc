// Where a request about one sandbox, or a new one, goes: the node a sandbox's id names
// (NodeFor), the nodes up by load (ByLoad), those with a template first (WithTemplate), and a
// create placed on the less loaded of two candidates, the next one tried if a node refuses.
#include <algorithm>
#include <cctype>
#include <string>
#include <utility>

#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include "base/log.h"
#include "cluster/gateway.h"
#include "cluster/gateway_http.h"
#include "sandbox/runtime.h"

namespace sandstream::cluster {

std::vector<Gateway::Target> Gateway::NodeFor(const std::string& sandbox_id,
                                              std::optional<Error>& refusal) const {
  const auto node = NodeOfSandbox(sandbox_id);
  if (!node) {
    refusal = Error{ErrorCode::kNotFound,
                    sandbox_id.starts_with("sb_")
                        ? "no sandbox '" + sandbox_id + "' (its id names no node)"
                        : "no sandbox or volume '" + sandbox_id +
                              "' (its id names no node; through a gateway, name a volume by "
                              "its id)"};
    return {};
  }
  const Member* to = members_.Find(*node);
  if (!to || !to->up) {
    refusal = Unreachable(*node, sandbox_id, to ? to->why_down : "it has not joined the cluster");
    return {};
  }
  return {{to->record.id, to->address}};
}

std::vector<Gateway::Target> Gateway::ByLoad(std::optional<Error>& refusal) const {
  std::vector<const Member*> up;
  for (const Member* m : members_.All()) {
    if (m->up) up.push_back(m);
  }
  std::stable_sort(up.begin(), up.end(), [](const Member* a, const Member* b) {
    return a->record.Load(a->pending) < b->record.Load(b->pending);
  });
  std::vector<Target> out;
  out.reserve(up.size());
  for (const Member* m : up) out.push_back({m->record.id, m->address});
  if (out.empty()) refusal = Error{ErrorCode::kUnavailable, "no node is up"};
  return out;
}

std::vector<Gateway::Target> Gateway::WithTemplate(const std::string& name,
                                                   std::optional<Error>& refusal) const {
  std::vector<Target> all = ByLoad(refusal);
  std::stable_partition(all.begin(), all.end(), [this, &name](const Target& t) {
    const Member* m = members_.Find(t.node);
    return m && m->record.HasTemplate(name);
  });
  return all;
}

asio::awaitable<Result<std::optional<std::string>>> Gateway::VolumesHome(
    const http::request_header<>& req, const json::value& body, const GatewayRoute& route,
    const std::string& peer) {
  std::vector<std::string> names;
  if (const json::object* o = body.if_object()) {
    const json::value* mounts = o->if_contains(route.e2b ? "volumeMounts" : "volumes");
    if (mounts && mounts->is_array()) {
      for (const json::value& m : mounts->as_array()) {
        const json::value* name = m.is_object() ? m.as_object().if_contains("name") : nullptr;
        const std::string text = name && name->is_string() ? std::string(name->as_string()) : "";
        if (!text.empty() && std::find(names.begin(), names.end(), text) == names.end()) {
          names.push_back(text);
        }
      }
    }
  }
  // More than a sandbox may mount: its node refuses them, wherever it goes.
  if (names.size() > sandbox::kMaxVolumeMounts) co_return std::optional<std::string>();
  std::optional<std::string> home;
  std::string home_volume;
  for (const std::string& name : names) {
    std::optional<std::string> node;
    if (auto named = NodeOfSandbox(name); named && name.starts_with("vol_")) {
      node = std::string(*named);
    } else if (std::all_of(name.begin(), name.end(), [](char c) {
                 return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ||
                        c == '.';
               })) {
      // A name: the node whose volume it is, asked with the caller's credential.
      http::request<http::string_body> ask = NodeRequest(req, std::string(), peer);
      ask.method(http::verb::get);
      ask.target((route.e2b ? "/volumes/" : "/v1/volumes/") + name);
      ask.erase(http::field::content_type);
      std::vector<NodeAnswer> answers = co_await CallEvery(std::move(ask), kListTimeout);
      std::string also;
      for (const NodeAnswer& a : answers) {
        if (!a.answer || a.answer->result() != http::status::ok) continue;
        if (node) also = a.node;
        if (!node) node = a.node;
      }
      // Names are each node's: two volumes of that name, and the caller must say which.
      if (!also.empty()) {
        Error which{ErrorCode::kInvalidRequest, "volume " + name +
                                                    " is a name on more than one node (" + *node +
                                                    ", " + also + "): name it by its id"};
        co_return which;
      }
    }
    // Unknown anywhere: the node the sandbox goes to says so.
    if (!node) continue;
    if (home && *home != *node) {
      Error apart{ErrorCode::kInvalidRequest,
                  "volumes " + home_volume + " and " + name + " live on different nodes (" + *home +
                      ", " + *node + "): a sandbox mounts volumes of one node"};
      co_return apart;
    }
    home = std::move(node);
    home_volume = name;
  }
  co_return home;
}

asio::awaitable<void> Gateway::Create(beast::tcp_stream& client, beast::flat_buffer& buffer,
                                      http::request_parser<http::empty_body>& header_parser,
                                      const GatewayRoute& route) {
  const unsigned version = header_parser.get().version();
  const std::string peer = PeerAddress(client.socket());
  // The body is kept whole: it goes again to the next node if one refuses.
  std::optional<http::request<http::string_body>> whole =
      co_await ReadWhole(client, buffer, header_parser, route);
  if (!whole) co_return;
  const http::request<http::string_body>& req = *whole;
  std::string template_name;
  boost::system::error_code ec;
  const json::value body = json::parse(req.body(), ec);
  const char* field = route.e2b ? "templateID" : "template";
  if (!ec && body.is_object()) {
    if (const json::value* t = body.as_object().if_contains(field); t && t->is_string()) {
      template_name = std::string(t->as_string());
    }
  }
  auto candidates = members_.Candidates(template_name);
  if (!candidates) co_return co_await Refuse(client, version, candidates.error(), route.e2b);
  // Placement follows the sandbox's volumes: a volume lives on one node.
  Result<std::optional<std::string>> home = co_await VolumesHome(req, body, route, peer);
  if (!home) co_return co_await Refuse(client, version, home.error(), route.e2b);
  if (*home) *candidates = std::vector<std::string>{**home};
  std::string refusals;
  for (const std::string& node : *candidates) {
    const Member* m = members_.Find(node);
    if (!m || !m->up) continue;
    http::request<http::string_body> call = NodeRequest(req, req.body(), peer);
    // A node that does not take the connection (cut off, its lease not yet lapsed) is passed
    // over within connect_timeout, not node_timeout: the next one may take the sandbox.
    auto answer = co_await Call(ex_, m->address, std::move(call), options_.node_timeout, 16u << 20,
                                options_.connect_timeout);
    if (!answer) {
      if (answer.error().code == ErrorCode::kNodeUnreachable) {
        // Nothing reached the node: the next one may take it.
        refusals += (refusals.empty() ? "" : "; ") + node + ": " + answer.error().message;
        continue;
      }
      // The request went out: the node may have made the sandbox, so it is not made twice.
      const Error error{ErrorCode::kBadGateway,
                        "node " + node + " did not answer the create: " + answer.error().message};
      co_return co_await Refuse(client, version, error, route.e2b);
    }
    if (answer->result() == http::status::service_unavailable) {
      // Full or stopping: it made nothing.
      refusals += (refusals.empty() ? "" : "; ") + node + ": " + answer->body().substr(0, 300);
      continue;
    }
    if (answer->result_int() / 100 == 2) {
      members_.Placed(node);
      ++counts_.placements[node];
    }
    log::Info("placed", {{"node", node}, {"status", std::to_string(answer->result_int())}});
    co_return co_await Answer(client, version, answer->result(), std::move(answer->body()),
                              &answer->base());
  }
  const Error error{ErrorCode::kUnavailable, "no node could take the sandbox: " + refusals};
  co_await Refuse(client, version, error, route.e2b);
}

}  // namespace sandstream::cluster
