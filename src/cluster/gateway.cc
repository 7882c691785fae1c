// The gateway's composition: accepting connections, each connection's session (read a head,
// route it, hand it to its concern's file), the relay of a request to one node (Pass), the
// check of a credential before a body is read (Admitted), and reading a body whole. The
// concerns: gateway_route.cc, gateway_placement.cc, gateway_fanout.cc, gateway_signed_url.cc,
// gateway_status.cc; what they share, gateway_http.h.
#include "cluster/gateway.h"

#include <openssl/evp.h>

#include <algorithm>
#include <string>
#include <utility>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <boost/url.hpp>

#include "cluster/gateway_http.h"
#include "http/drain.h"
#include "http/headers.h"
#include "http/relay.h"

namespace sandstream::cluster {
namespace urls = boost::urls;

namespace {

// A credential a node accepted is taken as still so for this long (the node checks it again
// with the request itself); so many are remembered at most.
constexpr auto kAdmittedFor = std::chrono::seconds(5);
constexpr size_t kMaxAdmitted = 4096;

// The request's head as the node gets it: the same line and fields but hop-by-hop ones,
// `Connection: close` (one exchange per connection: the gateway relays raw bytes and does not
// look for the next request) or `upgrade`, and the X-Forwarded-* a proxy adds.
std::string NodeHead(const http::request_header<>& req, const std::string& peer) {
  const bool upgrade = !req[http::field::upgrade].empty();
  std::string out(req.method_string());
  out += ' ';
  out += req.target();
  out += req.version() == 10 ? " HTTP/1.0\r\n" : " HTTP/1.1\r\n";
  std::string forwarded_for;
  for (const auto& field : req) {
    if (HopByHop(field)) continue;
    if (beast::iequals(field.name_string(), "x-forwarded-for")) {
      forwarded_for = std::string(field.value());
      continue;
    }
    out += field.name_string();
    out += ": ";
    out += field.value();
    out += "\r\n";
  }
  if (!peer.empty()) forwarded_for += (forwarded_for.empty() ? "" : ", ") + peer;
  if (!forwarded_for.empty()) out += "X-Forwarded-For: " + forwarded_for + "\r\n";
  if (req["X-Forwarded-Proto"].empty()) out += "X-Forwarded-Proto: http\r\n";
  out += upgrade ? "Connection: upgrade\r\n" : "Connection: close\r\n";
  out += "\r\n";
  return out;
}

// The credential a request carries, where a node reads it: its bearer token, else (E2B's
// control plane) X-API-KEY, else ?access_token=.
std::string CredentialOf(const http::request_header<>& req, bool e2b) {
  const std::string_view auth = req[http::field::authorization];
  if (auth.starts_with("Bearer ")) return std::string(auth.substr(7));
  if (const auto key = req.find("X-API-KEY"); e2b && key != req.end()) {
    return std::string(key->value());
  }
  std::string token;
  if (auto target = urls::parse_origin_form(req.target())) {
    for (const urls::param_view p : target->params()) {
      if (p.key == "access_token") token = std::string(p.value);
    }
  }
  return token;
}

std::string Sha256Hex(std::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(text.data(), text.size(), digest, &size, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < size; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 0xf];
  }
  return out;
}

}  // namespace

Gateway::Gateway(asio::any_io_executor ex, Members& members, GatewayOptions options)
    : ex_(ex),
      members_(members),
      options_(std::move(options)),
      listener_(ex, options_.max_connections) {}

Result<tcp::endpoint> Gateway::Listen(const std::string& listen) {
  return listener_.Listen(listen);
}

void Gateway::StopAccepting() {
  listener_.StopAccepting();
  listener_.CancelIdle();
}

asio::awaitable<void> Gateway::Run() {
  co_await listener_.Run(
      [this](tcp::socket socket) { return Session(std::move(socket)); },
      [this](tcp::socket socket) { return RefuseConnection(std::move(socket)); });
}

asio::awaitable<void> Gateway::RefuseConnection(tcp::socket socket) {
  beast::tcp_stream client(std::move(socket));
  const Error busy{ErrorCode::kTooManyConnections, "this gateway has max_connections (" +
                                                       std::to_string(options_.max_connections) +
                                                       ") connections open; retry later"};
  co_await Refuse(client, 11, busy, false);
  co_await sandstream::http::Drain(client, sandstream::http::kRefuseDrainTime);
  boost::system::error_code ignored;
  client.socket().close(ignored);
}

asio::awaitable<void> Gateway::Session(tcp::socket socket) {
  ++counts_.connections;
  struct Closed {
    int64_t& open;
    ~Closed() { --open; }
  } closed{counts_.connections};
  beast::tcp_stream client(std::move(socket));
  beast::flat_buffer buffer;  // what was read past a request: the next one's start, if any
  for (bool again = true; again && !listener_.stopping();) {
    again = false;
    http::request_parser<http::empty_body> parser;
    parser.header_limit(sandstream::http::kHeaderLimit);
    parser.body_limit(boost::none);
    client.expires_after(options_.idle_connection);
    const auto idle = listener_.Idle(client);
    auto [ec, n] = co_await http::async_read_header(client, buffer, parser, kTuple);
    listener_.Busy(idle);
    (void)n;
    if (ec) {
      const std::optional<Error> error = sandstream::http::HeaderError(ec);
      if (error) co_await Refuse(client, 11, *error, false);
      break;
    }
    http::request_header<>& req = parser.get();
    const GatewayRoute route = RouteOf(req, options_.preview_domain, options_.shared_tenants);
    ++counts_.requests[RouteName(route.kind)];
    // Decided before any co_await, and answered from named values: GCC 12 mishandles
    // temporaries (a braced Error, a conditional) that live across one.
    std::optional<Error> refusal;
    std::vector<Target> to;
    if (route.kind == GatewayRoute::kSandbox) {
      to = NodeFor(route.sandbox_id, refusal);
    } else if (route.kind == GatewayRoute::kAnyNode) {
      to = ByLoad(refusal);
    } else if (route.kind == GatewayRoute::kTemplate) {
      to = WithTemplate(route.name, refusal);
    } else if (route.kind == GatewayRoute::kNotHere) {
      refusal = NotServed(req);
    }
    if (refusal) {
      co_await Refuse(client, req.version(), *refusal, route.e2b);
    } else if (route.kind == GatewayRoute::kHealth) {
      co_await Health(client, req);
    } else if (route.kind == GatewayRoute::kMetrics) {
      co_await Metrics(client, req);
    } else if (route.kind == GatewayRoute::kList || route.kind == GatewayRoute::kTemplates ||
               route.kind == GatewayRoute::kVolumes) {
      co_await List(client, req, route);
    } else if ((route.kind == GatewayRoute::kCreate || route.kind == GatewayRoute::kEveryNode) &&
               !co_await Admitted(client, req, route)) {
      // Refused from the head: its body, unread, is drained below.
    } else if (route.kind == GatewayRoute::kCreate) {
      co_await Create(client, buffer, parser, route);
    } else if (route.kind == GatewayRoute::kEveryNode) {
      co_await Everywhere(client, buffer, parser, route);
    } else if (route.kind == GatewayRoute::kSignedUrl) {
      again = co_await SignedUrl(client, buffer, parser);
    } else {
      again = co_await Pass(client, buffer, parser, route, std::move(to));
    }
  }
  // What the client still sends (a body no node took, or it closing) is read and dropped for
  // a while: closing with unread bytes would reset the connection, and the answer with it.
  co_await sandstream::http::Drain(client, sandstream::http::kDrainTime);
  boost::system::error_code ignored;
  client.socket().close(ignored);
}

asio::awaitable<bool> Gateway::Pass(beast::tcp_stream& client, beast::flat_buffer& buffer,
                                    http::request_parser<http::empty_body>& parser,
                                    const GatewayRoute& route, std::vector<Target> to) {
  const http::request_header<>& req = parser.get();
  client.expires_never();
  tcp::socket upstream(ex_);
  std::string node;
  std::string why;      // the last node's refusal
  std::string refused;  // every node's, named
  for (const Target& target : to) {
    auto connected = co_await Connect(upstream, target.address, options_.connect_timeout);
    if (connected) {
      node = target.node;
      break;
    }
    why = connected.error().message;
    refused += (refused.empty() ? "" : "; ") + target.node + ": " + why;
    boost::system::error_code ignored;
    upstream.close(ignored);
  }
  if (node.empty()) {
    // Built before the co_await: GCC 12 destroys a conditional's temporary twice across one.
    Error error = route.kind == GatewayRoute::kSandbox
                      ? Unreachable(to.front().node, route.sandbox_id, why)
                      : Error{ErrorCode::kUnavailable, "no node could be reached: " + refused};
    co_await Refuse(client, req.version(), error, route.e2b);
    co_return false;
  }
  // The connection is kept for the client's next request when this one's end is known from its
  // head (a length, or no body) and nothing else is asked of it: an upgrade, a body in chunks,
  // a 100-continue go on with the old relay, both ways until the node closes.
  std::optional<uint64_t> body;
  if (req.version() == 11 && parser.keep_alive() && req[http::field::upgrade].empty() &&
      req[http::field::expect].empty() && !parser.chunked()) {
    body = parser.content_length().value_or(0);
  }
  const std::string subject =
      route.sandbox_id.empty() ? "node " + node : "sandbox " + route.sandbox_id;
  const std::string head = NodeHead(req, PeerAddress(client.socket()));
  bool sent =
      co_await sandstream::http::WriteWithin(upstream, asio::buffer(head), options_.write_timeout);
  // What was read past the request's header is the start of its body (and, on a kept
  // connection, may run into the next request, which stays).
  const size_t ahead = body ? std::min<uint64_t>(*body, buffer.size()) : buffer.size();
  if (sent && ahead > 0) {
    sent = co_await sandstream::http::WriteWithin(upstream, asio::buffer(buffer.data(), ahead),
                                                  options_.write_timeout);
    buffer.consume(ahead);
  }
  if (!sent) {
    const Error error{ErrorCode::kBadGateway,
                      "node " + node + " did not take the request for " + subject};
    co_await Refuse(client, req.version(), error, route.e2b);
    co_return false;
  }
  sandstream::http::Exchanged done;
  if (body) {
    done = co_await sandstream::http::RelayKeptExchange(client.socket(), upstream, *body - ahead,
                                                        options_.write_timeout);
  } else {
    done =
        co_await sandstream::http::RelayExchange(client.socket(), upstream, options_.write_timeout);
  }
  counts_.to_node += done.up;
  counts_.to_client += done.down;
  if (done.down == 0) {
    const Error error{ErrorCode::kBadGateway,
                      "node " + node + " closed the connection without an answer for " + subject};
    co_await Refuse(client, req.version(), error, route.e2b);
    co_return false;
  }
  co_return done.kept;
}

asio::awaitable<bool> Gateway::Admitted(beast::tcp_stream& client,
                                        const http::request_header<>& req,
                                        const GatewayRoute& route) {
  const std::string credential = CredentialOf(req, route.e2b);
  std::optional<Error> refusal;
  if (credential.empty()) {
    refusal = Error{ErrorCode::kUnauthorized,
                    "missing API key: send Authorization: Bearer <key> (or ?access_token=<key>)"};
    co_await Refuse(client, req.version(), *refusal, route.e2b);
    co_return false;
  }
  const SteadyTime now = SteadyNow();
  const std::string hash = Sha256Hex(credential);
  if (auto it = admitted_.find(hash); it != admitted_.end() && it->second > now) co_return true;
  std::vector<Target> to = ByLoad(refusal);
  http::request<http::string_body> ask{http::verb::get, "/v1/usage", 11};
  ask.set(http::field::authorization, "Bearer " + credential);
  std::string unreachable;
  for (const Target& target : to) {
    auto answer = co_await Call(ex_, target.address, ask, options_.connect_timeout, 1u << 20);
    if (!answer) {
      unreachable +=
          (unreachable.empty() ? "" : "; ") + target.node + ": " + answer.error().message;
      continue;
    }
    const int status = answer->result_int();
    if (status / 100 == 2) {
      const SteadyTime answered = SteadyNow();
      if (admitted_.size() >= kMaxAdmitted) {
        std::erase_if(admitted_,
                      [answered](const auto& entry) { return entry.second <= answered; });
        if (admitted_.size() >= kMaxAdmitted) admitted_.clear();
      }
      admitted_[hash] = answered + kAdmittedFor;
      co_return true;
    }
    const std::optional<std::string> message = ErrorMessageOf(answer->body());
    const std::string said = message ? *message : answer->body().substr(0, 300);
    refusal = status == 401   ? Error{ErrorCode::kUnauthorized, said}
              : status == 403 ? Error{ErrorCode::kForbidden, said}
              : status == 429 ? Error{ErrorCode::kQuotaExceeded, said}
                              : Error{ErrorCode::kBadGateway,
                                      "node " + target.node + " could not check the credential: " +
                                          std::to_string(status) + " " + said};
    break;
  }
  if (!refusal) {
    refusal = Error{ErrorCode::kUnavailable, "no node could check the credential: " + unreachable};
  }
  co_await Refuse(client, req.version(), *refusal, route.e2b);
  co_return false;
}

asio::awaitable<std::optional<http::request<http::string_body>>> Gateway::ReadWhole(
    beast::tcp_stream& client, beast::flat_buffer& buffer,
    http::request_parser<http::empty_body>& header_parser, const GatewayRoute& route) {
  const unsigned version = header_parser.get().version();
  http::request_parser<http::string_body> parser(std::move(header_parser));
  parser.body_limit(options_.max_body_bytes);
  if (!parser.is_done()) {
    if (beast::iequals(parser.get()[http::field::expect], "100-continue")) {
      http::response<http::empty_body> go_on{http::status::continue_, version};
      auto [cont_ec, sent] = co_await http::async_write(client, go_on, kTuple);
      (void)sent;
      if (cont_ec) co_return std::nullopt;
    }
    client.expires_after(kBodyReadTimeout);
    auto [ec, n] = co_await http::async_read(client, buffer, parser, kTuple);
    (void)n;
    if (ec == http::error::body_limit) {
      const Error error = sandstream::http::BodyTooLarge(options_.max_body_bytes);
      co_await Refuse(client, version, error, route.e2b);
      co_return std::nullopt;
    }
    if (ec) co_return std::nullopt;
  }
  co_return parser.release();
}

}  // namespace sandstream::cluster
