// E2B's signed file URLs, which name no sandbox: every node is asked (with the admin key)
// which of its sandboxes made the signature, and the request goes to that sandbox's node.
#include <string>
#include <utility>

#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <boost/url.hpp>

#include "cluster/gateway.h"
#include "cluster/gateway_http.h"

namespace sandstream::cluster {
namespace urls = boost::urls;

asio::awaitable<bool> Gateway::SignedUrl(beast::tcp_stream& client, beast::flat_buffer& buffer,
                                         http::request_parser<http::empty_body>& parser) {
  http::request_header<>& req = parser.get();
  const unsigned version = req.version();
  std::optional<Error> refusal;
  // What the node checks the signature against, and nothing else the client put in the query.
  urls::url ask_target("/v1/admin/e2b/signed-url");
  if (options_.api_key.empty()) {
    refusal = Error{ErrorCode::kNotImplemented,
                    "a signed file URL names no sandbox: a gateway finds it by asking its "
                    "nodes, with the admin key (give the gateway api_key), or send "
                    "E2b-Sandbox-Id"};
  } else if (!signature_scans_.Take(PeerAddress(client.socket()))) {
    // Each one costs a call to every node, and a hash per sandbox there.
    refusal = Error{ErrorCode::kQuotaExceeded,
                    "too many signed file URLs without E2b-Sandbox-Id from this address: retry "
                    "in a second"};
  } else if (auto target = urls::parse_origin_form(req.target()); !target) {
    refusal = Error{ErrorCode::kInvalidRequest, "the request's target is not a URL path"};
  } else {
    for (std::string_view name : {"path", "username", "signature", "signature_expiration"}) {
      // The last of a name, as a node reads it, passed on as the client encoded it (decoding
      // and encoding again could turn a '+' of a signature into a space).
      std::optional<urls::param_pct_view> last;
      for (const urls::param_pct_view p : target->encoded_params()) {
        if (p.key.decode() == name) last = p;
      }
      if (last) ask_target.encoded_params().append(*last);
    }
    ask_target.params().append({"operation", req.method() == http::verb::get ? "read" : "write"});
  }
  if (refusal) {
    co_await Refuse(client, version, *refusal, true);
    co_return false;
  }
  http::request<http::string_body> ask{http::verb::get, ask_target.buffer(), 11};
  ask.set(http::field::authorization, "Bearer " + options_.api_key);
  std::vector<NodeAnswer> answers = co_await CallEvery(std::move(ask), kListTimeout);
  std::string sandbox_id;
  std::string unreachable;  // nodes that could not say: the sandbox may be theirs
  for (const NodeAnswer& a : answers) {
    const int status = a.answer ? a.answer->result_int() : 0;
    boost::system::error_code ec;
    const json::value body = a.answer ? json::parse(a.answer->body(), ec) : json::value();
    const json::object* o = !ec && body.is_object() ? &body.as_object() : nullptr;
    const json::value* id = o ? o->if_contains("sandbox_id") : nullptr;
    if (status == 200 && id && id->is_string()) {
      sandbox_id = std::string(id->as_string());
      refusal.reset();
      break;
    }
    if ((status == 400 || status == 401) && !refusal) {
      // The signature's own fault (malformed, expired): every node says the same.
      const std::optional<std::string> message = ErrorMessageOf(a.answer->body());
      refusal = Error{status == 401 ? ErrorCode::kUnauthorized : ErrorCode::kInvalidRequest,
                      message ? *message : a.answer->body().substr(0, 300)};
    } else if (status != 404 && status != 400 && status != 401) {
      unreachable += (unreachable.empty() ? "" : ", ") + a.node;
    }
  }
  if (sandbox_id.empty() && !refusal) {
    refusal = unreachable.empty()
                  ? Error{ErrorCode::kUnauthorized,
                          "unauthorized access: the signature matches no sandbox's file URL for "
                          "this path, operation and user (or its sandbox is gone)"}
                  : Error{ErrorCode::kNodeUnreachable,
                          "the signature matches no sandbox on the nodes that answered; its "
                          "sandbox may be on " +
                              unreachable + ", which could not say"};
  }
  std::vector<Target> to;
  if (!refusal) to = NodeFor(sandbox_id, refusal);
  if (refusal) {
    co_await Refuse(client, version, *refusal, true);
    co_return false;
  }
  // Named: the node checks the signature against this sandbox alone.
  req.set("E2b-Sandbox-Id", sandbox_id);
  const GatewayRoute route{GatewayRoute::kSandbox, sandbox_id, true};
  co_return co_await Pass(client, buffer, parser, route, std::move(to));
}

}  // namespace sandstream::cluster
