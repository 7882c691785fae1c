#include "cluster/gateway.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>
#include <sstream>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <boost/url.hpp>

#include "api/http.h"
#include "api/prometheus.h"
#include "api/relay.h"
#include "api/router.h"
#include "api/server.h"
#include "base/log.h"
#include "base/sse_parser.h"
#include "base/timer.h"
#include "base/version.h"

namespace sandstream::cluster {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace json = boost::json;
namespace urls = boost::urls;
using asio::ip::tcp;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
constexpr auto kBodyReadTimeout = std::chrono::seconds(60);
constexpr auto kListTimeout = std::chrono::seconds(10);
// A node's progress event is a line of JSON: one larger than this ends that node's stream.
constexpr size_t kMaxEventBytes = 1u << 20;
// A credential a node accepted is taken as still so for this long (the node checks it again
// with the request itself); so many are remembered at most.
constexpr auto kAdmittedFor = std::chrono::seconds(5);
constexpr size_t kMaxAdmitted = 4096;

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

bool HopByHop(const http::fields::value_type& field) {
  return field.name() == http::field::connection || field.name() == http::field::keep_alive ||
         field.name() == http::field::proxy_connection || field.name() == http::field::te;
}

std::string PeerAddress(const tcp::socket& socket) {
  boost::system::error_code ec;
  const auto peer = socket.remote_endpoint(ec);
  return ec ? std::string() : peer.address().to_string();
}

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

// The request as a whole message, for the calls the gateway makes itself (create, list).
http::request<http::string_body> NodeRequest(const http::request_header<>& req, std::string body,
                                             const std::string& peer) {
  http::request<http::string_body> out{req.method(), req.target(), 11};
  for (const auto& field : req) {
    if (HopByHop(field) || field.name() == http::field::host ||
        field.name() == http::field::content_length ||
        field.name() == http::field::transfer_encoding || field.name() == http::field::expect) {
      continue;
    }
    out.insert(field.name_string(), field.value());
  }
  if (!peer.empty()) out.set("X-Forwarded-For", peer);
  if (req.find(http::field::host) != req.end()) {
    out.set("X-Forwarded-Host", req[http::field::host]);
  }
  out.body() = std::move(body);
  return out;
}

std::string ErrorBody(const Error& error, bool e2b) {
  if (e2b) {
    return json::serialize(json::object{{"code", static_cast<int>(api::StatusFor(error.code))},
                                        {"message", error.message}});
  }
  return json::serialize(json::object{
      {"error", json::object{{"code", ErrorCodeName(error.code)}, {"message", error.message}}}});
}

// Writes one whole answer; the connection ends with it.
asio::awaitable<void> Answer(beast::tcp_stream& client, unsigned version, http::status status,
                             std::string body, const http::fields* from = nullptr,
                             std::string_view content_type = "application/json") {
  http::response<http::string_body> res{status, version};
  if (from) {
    for (const auto& field : *from) {
      if (HopByHop(field) || field.name() == http::field::content_length ||
          field.name() == http::field::transfer_encoding) {
        continue;
      }
      res.insert(field.name_string(), field.value());
    }
  } else {
    res.set(http::field::server, "sandstreamd");
    res.set(http::field::content_type, content_type);
  }
  res.keep_alive(false);
  res.body() = std::move(body);
  res.prepare_payload();
  client.expires_after(std::chrono::seconds(60));
  auto [ec, n] = co_await http::async_write(client, res, kTuple);
  (void)ec;
  (void)n;
}

// The message of a node's error answer ({"error": {"code", "message"}}), if it is one.
std::optional<std::string> ErrorMessageOf(std::string_view body) {
  boost::system::error_code ec;
  const json::value v = json::parse(body, ec);
  const json::value* error = !ec && v.is_object() ? v.as_object().if_contains("error") : nullptr;
  const json::value* message =
      error && error->is_object() ? error->as_object().if_contains("message") : nullptr;
  if (!message || !message->is_string()) return std::nullopt;
  return std::string(message->as_string());
}

// A node that cannot be reached, and the sandbox the request was for ("" for none).
Error Unreachable(std::string_view node, std::string_view sandbox_id, std::string_view why) {
  const std::string holds =
      sandbox_id.empty() ? "" : ", which holds sandbox " + std::string(sandbox_id) + ",";
  return Error{ErrorCode::kNodeUnreachable,
               "node " + std::string(node) + holds + " is unreachable: " + std::string(why)};
}

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

// Whether `presented` is `key`, in time that does not depend on where they differ.
bool SameKey(std::string_view presented, std::string_view key) {
  unsigned char diff = presented.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < key.size(); ++i) {
    diff |= static_cast<unsigned char>(key[i] ^ (i < presented.size() ? presented[i] : 0));
  }
  return diff == 0;
}

}  // namespace

GatewayRoute RouteOf(const http::request_header<>& req, const std::string& preview_domain,
                     bool shared_tenants) {
  const std::string_view target = req.target();
  const std::string_view path = target.substr(0, target.find('?'));
  const bool read_only = req.method() == http::verb::get || req.method() == http::verb::head;
  if (path == "/healthz" && read_only) return {GatewayRoute::kHealth, {}};
  if (path == "/metrics" && read_only) return {GatewayRoute::kMetrics, {}};
  if (auto proxy = api::MatchProxy(req[http::field::host], path, preview_domain);
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
  if (read_only) return {GatewayRoute::kAnyNode, {}};
  if (shared_tenants && path.starts_with("/v1/admin/tenants")) return {GatewayRoute::kAnyNode, {}};
  return {GatewayRoute::kNotHere, {}};
}

Gateway::Gateway(asio::any_io_executor ex, Members& members, GatewayOptions options)
    : ex_(ex), members_(members), options_(std::move(options)), acceptor_(ex), sessions_(ex) {}

Result<tcp::endpoint> Gateway::Listen(const std::string& listen) {
  return api::OpenAcceptor(acceptor_, listen);
}

void Gateway::StopAccepting() {
  stopping_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  for (beast::tcp_stream* idle : idle_) idle->cancel();
}

asio::awaitable<void> Gateway::Run() {
  co_await api::AcceptConnections(
      acceptor_, sessions_, options_.max_connections, stopping_,
      [this](tcp::socket socket) { return Session(std::move(socket)); },
      [this](tcp::socket socket) { return RefuseConnection(std::move(socket)); });
}

asio::awaitable<void> Gateway::RefuseConnection(tcp::socket socket) {
  beast::tcp_stream client(std::move(socket));
  const Error busy{ErrorCode::kTooManyConnections, "this gateway has max_connections (" +
                                                       std::to_string(options_.max_connections) +
                                                       ") connections open; retry later"};
  co_await Refuse(client, 11, busy, false);
  co_await api::Drain(client, api::kRefuseDrainTime);
  boost::system::error_code ignored;
  client.socket().close(ignored);
}

std::vector<Gateway::Target> Gateway::NodeFor(const std::string& sandbox_id,
                                              std::optional<Error>& refusal) const {
  const auto node = NodeOfSandbox(sandbox_id);
  if (!node) {
    refusal = Error{ErrorCode::kNotFound, "no sandbox '" + sandbox_id + "' (its id names no node)"};
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
  for (const Member* m : up) out.push_back({m->record.id, m->address});
  if (out.empty()) refusal = Error{ErrorCode::kUnavailable, "no node is up"};
  return out;
}

Error Gateway::NotServed(const http::request_header<>& req) {
  const std::string_view target = req.target();
  return Error{ErrorCode::kNotImplemented,
               std::string(req.method_string()) + " " +
                   std::string(target.substr(0, target.find('?'))) +
                   " changes what each node holds on its own and is not served through a "
                   "gateway: send it to every node"};
}

asio::awaitable<void> Gateway::Session(tcp::socket socket) {
  ++counts_.connections;
  struct Closed {
    int64_t& open;
    ~Closed() { --open; }
  } closed{counts_.connections};
  beast::tcp_stream client(std::move(socket));
  beast::flat_buffer buffer;  // what was read past a request: the next one's start, if any
  for (bool again = true; again && !stopping_;) {
    again = false;
    http::request_parser<http::empty_body> parser;
    parser.header_limit(api::kHeaderLimit);
    parser.body_limit(boost::none);
    client.expires_after(options_.idle_connection);
    const auto idle = idle_.insert(idle_.end(), &client);
    auto [ec, n] = co_await http::async_read_header(client, buffer, parser, kTuple);
    idle_.erase(idle);
    (void)n;
    if (ec) {
      const std::optional<Error> error = api::HeaderError(ec);
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
    } else if (route.kind == GatewayRoute::kList || route.kind == GatewayRoute::kTemplates) {
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
  co_await api::Drain(client, api::kDrainTime);
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
  bool sent = co_await api::WriteWithin(upstream, asio::buffer(head), options_.write_timeout);
  // What was read past the request's header is the start of its body (and, on a kept
  // connection, may run into the next request, which stays).
  const size_t ahead = body ? std::min<uint64_t>(*body, buffer.size()) : buffer.size();
  if (sent && ahead > 0) {
    sent = co_await api::WriteWithin(upstream, asio::buffer(buffer.data(), ahead),
                                     options_.write_timeout);
    buffer.consume(ahead);
  }
  if (!sent) {
    const Error error{ErrorCode::kBadGateway,
                      "node " + node + " did not take the request for " + subject};
    co_await Refuse(client, req.version(), error, route.e2b);
    co_return false;
  }
  api::Exchanged done;
  if (body) {
    done = co_await api::RelayKeptExchange(client.socket(), upstream, *body - ahead,
                                           options_.write_timeout);
  } else {
    done = co_await api::RelayExchange(client.socket(), upstream, options_.write_timeout);
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
      const Error error = api::BodyTooLarge(options_.max_body_bytes);
      co_await Refuse(client, version, error, route.e2b);
      co_return std::nullopt;
    }
    if (ec) co_return std::nullopt;
  }
  co_return parser.release();
}

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
  {
    boost::system::error_code ec;
    const json::value body = json::parse(req.body(), ec);
    const char* field = route.e2b ? "templateID" : "template";
    if (!ec && body.is_object()) {
      if (const json::value* t = body.as_object().if_contains(field); t && t->is_string()) {
        template_name = std::string(t->as_string());
      }
    }
  }
  auto candidates = members_.Candidates(template_name);
  if (!candidates) co_return co_await Refuse(client, version, candidates.error(), route.e2b);
  std::string refusals;
  for (const std::string& node : *candidates) {
    const Member* m = members_.Find(node);
    if (!m || !m->up) continue;
    http::request<http::string_body> call = NodeRequest(req, req.body(), peer);
    auto answer = co_await Call(ex_, m->address, std::move(call), options_.node_timeout, 16u << 20);
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

asio::awaitable<std::vector<Gateway::NodeAnswer>> Gateway::CallEvery(
    http::request<http::string_body> call, SteadyClock::duration timeout) {
  std::vector<NodeAnswer> answers;
  std::vector<HostPort> addresses;
  for (const Member* m : members_.All()) {
    if (!m->up) continue;
    answers.push_back({m->record.id});
    addresses.push_back(m->address);
  }
  TaskGroup calls(ex_);
  for (size_t i = 0; i < answers.size(); ++i) {
    calls.Spawn(
        [](NodeAnswer& into, asio::any_io_executor ex, HostPort to,
           http::request<http::string_body> request,
           SteadyClock::duration within) -> asio::awaitable<void> {
          into.answer = co_await Call(ex, to, std::move(request), within, 64u << 20);
        }(answers[i], ex_, addresses[i], call, timeout),
        "node call");
  }
  co_await calls.Join();
  co_return answers;
}

asio::awaitable<void> Gateway::List(beast::tcp_stream& client, const http::request_header<>& req,
                                    const GatewayRoute& route) {
  const std::string peer = PeerAddress(client.socket());
  std::vector<std::string> unreachable;
  for (const Member* m : members_.All()) {
    if (!m->up) unreachable.push_back(m->record.id);
  }
  // Named: GCC 12 destroys a temporary that lives across a co_await twice.
  http::request<http::string_body> call = NodeRequest(req, std::string(), peer);
  std::vector<NodeAnswer> parts = co_await CallEvery(std::move(call), kListTimeout);
  const bool templates = route.kind == GatewayRoute::kTemplates;
  const char* field = templates ? "templates" : "sandboxes";
  std::set<std::string, std::less<>> named;  // templates already in the list
  json::array merged;
  for (NodeAnswer& part : parts) {
    if (!part.answer) {
      unreachable.push_back(part.node);
      continue;
    }
    auto& answer = *part.answer;
    // A refusal (the credential) is every node's: the first one is the answer.
    if (answer.result_int() != 200) {
      co_return co_await Answer(client, req.version(), answer.result(), std::move(answer.body()),
                                &answer.base());
    }
    boost::system::error_code ec;
    json::value body = json::parse(answer.body(), ec);
    json::array* items = nullptr;
    if (!ec && route.e2b && body.is_array()) items = &body.as_array();
    if (!ec && !route.e2b && body.is_object()) {
      if (json::value* s = body.as_object().if_contains(field); s && s->is_array()) {
        items = &s->as_array();
      }
    }
    if (!items) {
      unreachable.push_back(part.node);
      continue;
    }
    for (json::value& item : *items) {
      // A template every node has is listed once.
      if (templates && item.is_object()) {
        const json::value* name = item.as_object().if_contains("name");
        if (name && name->is_string() && !named.emplace(name->as_string()).second) continue;
      }
      merged.push_back(std::move(item));
    }
  }
  std::sort(unreachable.begin(), unreachable.end());
  http::response<http::string_body> res{http::status::ok, req.version()};
  res.set(http::field::server, "sandstreamd");
  res.set(http::field::content_type, "application/json");
  std::string missing;
  for (const std::string& node : unreachable) missing += (missing.empty() ? "" : ",") + node;
  // Sandboxes on a node that cannot be reached are not in the list: the answer says so.
  if (!missing.empty()) res.set("X-Sandstream-Unreachable-Nodes", missing);
  if (route.e2b) {
    res.body() = json::serialize(merged);
  } else {
    json::array nodes;
    for (const std::string& node : unreachable) nodes.emplace_back(node);
    json::object out;
    out[field] = std::move(merged);
    out["unreachable_nodes"] = std::move(nodes);
    res.body() = json::serialize(out);
  }
  co_await Answer(client, req.version(), http::status::ok, std::move(res.body()), &res.base());
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

// One node's part of a request the gateway sends to every node up.
struct Leg {
  std::string node;
  std::unique_ptr<NodeCall> call;
  std::string head = "";         // the request's head as this node gets it
  std::string write_error = "";  // why it took no more of the body (its answer may say why)
  std::string failed = "";       // why it has no answer
  std::optional<http::response<http::string_body>> answer = std::nullopt;
  std::string last_event = "";  // of a stream: "template" or "error", and its data
  std::string last_data = "";
  bool sending() const { return failed.empty() && write_error.empty(); }
  bool streaming() const {
    return failed.empty() && !answer && call->head().result_int() / 100 == 2 &&
           call->head()[http::field::content_type].starts_with("text/event-stream");
  }
};

namespace {

// Runs `step(leg)` for every leg still going, at once, and waits for them all.
template <class Step>
asio::awaitable<void> EveryLeg(asio::any_io_executor ex, std::vector<Leg>& legs, Step step) {
  TaskGroup group(ex);
  for (Leg& leg : legs) {
    if (leg.failed.empty()) group.Spawn(step(leg), "node call");
  }
  co_await group.Join();
}

asio::awaitable<void> OpenLeg(Leg& leg, SteadyClock::duration timeout) {
  auto opened = co_await leg.call->Open(timeout);
  if (!opened) leg.failed = opened.error().message;
}

asio::awaitable<void> WriteLeg(Leg& leg, std::vector<asio::const_buffer> bytes,
                               SteadyClock::duration timeout) {
  if (!leg.sending()) co_return;
  auto sent = co_await leg.call->Write(std::move(bytes), timeout);
  if (!sent) leg.write_error = sent.error().message;
}

// A node that stopped taking the body may have answered why (a 413, a 400) before it closed.
asio::awaitable<void> ReadLegHead(Leg& leg, SteadyClock::duration timeout) {
  auto head = co_await leg.call->ReadHead(timeout);
  if (!head) leg.failed = leg.write_error.empty() ? head.error().message : leg.write_error;
}

asio::awaitable<void> ReadLegAnswer(Leg& leg, SteadyClock::duration timeout) {
  if (leg.answer) co_return;
  auto answer = co_await leg.call->ReadRest(timeout, 16u << 20);
  if (answer) {
    leg.answer = std::move(*answer);
  } else {
    leg.failed = answer.error().message;
  }
}

// What a pull's stream said last, as the answer a node gives without one (an error event's
// status does not reach the client: the stream's last event says it).
http::response<http::string_body> AnswerOfEvent(const Leg& leg) {
  const bool made = leg.last_event == "template";
  http::response<http::string_body> out{
      made ? http::status::created : http::status::internal_server_error, 11};
  out.set(http::field::content_type, "application/json");
  out.body() = leg.last_data;
  return out;
}

// Follows one node's pull as events: its progress goes to the client (through `send`) tagged
// with the node, its last event (the template, or the error) is kept for the merged one.
template <class Send>
asio::awaitable<void> FollowLeg(Leg& leg, Send& send, SteadyClock::duration timeout) {
  if (!leg.streaming()) co_return co_await ReadLegAnswer(leg, timeout);
  SseParser parser;
  size_t pending = 0;  // bytes read since the last whole event
  for (;;) {
    Result<std::string_view> piece = co_await leg.call->ReadSome(timeout);
    if (!piece) {
      leg.failed = piece.error().message;
      co_return;
    }
    if (piece->empty()) break;
    std::vector<SseEvent> got = parser.Feed(*piece);
    pending = got.empty() ? pending + piece->size() : 0;
    if (pending > kMaxEventBytes) {
      leg.failed = "its stream sent over " + std::to_string(kMaxEventBytes) +
                   " bytes without an event's end";
      co_return;
    }
    if (got.empty()) {
      std::string keepalive = ":\n\n";  // the node's keep-alive, passed on
      co_await send(std::move(keepalive));
    }
    for (SseEvent& event : got) {
      if (event.type == "template" || event.type == "error") {
        leg.last_event = std::move(event.type);
        leg.last_data = std::move(event.data);
        continue;
      }
      boost::system::error_code ec;
      json::value data = json::parse(event.data, ec);
      if (ec || !data.is_object()) continue;
      data.as_object()["node"] = leg.node;
      std::string text = "event: " + event.type + "\ndata: " + json::serialize(data) + "\n\n";
      co_await send(std::move(text));
    }
  }
  if (leg.last_event.empty()) leg.failed = "its stream ended before the pull did";
}

// Each leg's head: `call`'s, with the leg's node as its Host.
void AddressTo(std::vector<Leg>& legs, http::request<http::string_body>& call) {
  for (Leg& leg : legs) {
    call.set(http::field::host, leg.call->to().text());
    std::ostringstream text;
    text << call.base();
    leg.head = text.str();
  }
}

// What a leg came to: the node's answer, the last event of its stream, or why neither.
Result<http::response<http::string_body>> OutcomeOf(Leg& leg) {
  if (leg.answer) return std::move(*leg.answer);
  if (!leg.last_event.empty()) return AnswerOfEvent(leg);
  return Error{ErrorCode::kBadGateway, leg.failed};
}

constexpr std::string_view kEventStreamHead =
    "HTTP/1.1 200 OK\r\nServer: sandstreamd\r\nContent-Type: text/event-stream\r\n"
    "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\nConnection: close\r\n\r\n";

}  // namespace

asio::awaitable<void> Gateway::Everywhere(beast::tcp_stream& client, beast::flat_buffer& buffer,
                                          http::request_parser<http::empty_body>& header_parser,
                                          const GatewayRoute& route) {
  const http::request_header<>& head = header_parser.get();
  const unsigned version = head.version();
  const bool pull = head.method() == http::verb::post;
  // An image archive goes to every node as it arrives; a pull's progress comes from every node.
  const bool archive = pull && !api::IsJsonType(head[http::field::content_type]);
  const bool events =
      pull && head[http::field::accept].find("text/event-stream") != std::string_view::npos;
  const std::string peer = PeerAddress(client.socket());
  if (!archive && !events) {
    std::optional<http::request<http::string_body>> whole =
        co_await ReadWhole(client, buffer, header_parser, route);
    if (!whole) co_return;
    http::request<http::string_body> call = NodeRequest(*whole, whole->body(), peer);
    std::vector<NodeAnswer> answers = co_await CallEvery(std::move(call), options_.node_timeout);
    http::response<http::string_body> res = Merged(pull, answers);
    co_return co_await Answer(client, version, res.result(), std::move(res.body()), &res.base());
  }

  std::vector<Leg> legs;
  for (const Member* m : members_.All()) {
    if (m->up) legs.push_back({m->record.id, std::make_unique<NodeCall>(ex_, m->address)});
  }
  const SteadyClock::duration connect_timeout = options_.connect_timeout;
  co_await EveryLeg(ex_, legs, [&](Leg& leg) { return OpenLeg(leg, connect_timeout); });
  if (std::none_of(legs.begin(), legs.end(), [](const Leg& l) { return l.failed.empty(); })) {
    std::string why;
    for (const Leg& leg : legs) why += (why.empty() ? "" : "; ") + leg.node + ": " + leg.failed;
    const Error error{ErrorCode::kUnavailable,
                      legs.empty() ? "no node is up" : "no node could be reached: " + why};
    co_return co_await Refuse(client, version, error, false);
  }
  if (archive) {
    if (!co_await SendEverywhere(client, buffer, header_parser, legs)) co_return;
  } else {
    std::optional<http::request<http::string_body>> whole =
        co_await ReadWhole(client, buffer, header_parser, route);
    if (!whole) co_return;
    http::request<http::string_body> call = NodeRequest(*whole, whole->body(), peer);
    call.keep_alive(false);
    call.prepare_payload();
    AddressTo(legs, call);
    const SteadyClock::duration within = options_.write_timeout;
    co_await EveryLeg(ex_, legs, [&](Leg& leg) {
      return WriteLeg(leg, {asio::buffer(leg.head), asio::buffer(call.body())}, within);
    });
  }
  const SteadyClock::duration timeout = options_.node_timeout;
  co_await EveryLeg(ex_, legs, [&](Leg& leg) { return ReadLegHead(leg, timeout); });
  if (events && std::any_of(legs.begin(), legs.end(), [](const Leg& l) { return l.streaming(); })) {
    co_return co_await MergeEvents(client, legs);
  }
  co_await EveryLeg(ex_, legs, [&](Leg& leg) { return ReadLegAnswer(leg, timeout); });
  std::vector<NodeAnswer> answers;
  for (Leg& leg : legs) answers.push_back({leg.node, OutcomeOf(leg)});
  http::response<http::string_body> res = Merged(pull, answers);
  co_await Answer(client, version, res.result(), std::move(res.body()), &res.base());
}

asio::awaitable<bool> Gateway::SendEverywhere(beast::tcp_stream& client, beast::flat_buffer& buffer,
                                              http::request_parser<http::empty_body>& header_parser,
                                              std::vector<Leg>& legs) {
  const http::request_header<>& head = header_parser.get();
  const unsigned version = head.version();
  const bool go_on = beast::iequals(head[http::field::expect], "100-continue");
  // Each node gets the body as it comes: its length when the client said it, else in chunks.
  const boost::optional<uint64_t> length = header_parser.content_length();
  http::request<http::string_body> call =
      NodeRequest(head, std::string(), PeerAddress(client.socket()));
  call.keep_alive(false);
  if (length) {
    call.content_length(*length);
  } else {
    call.chunked(true);
  }
  AddressTo(legs, call);
  const SteadyClock::duration within = options_.write_timeout;
  co_await EveryLeg(ex_, legs,
                    [&](Leg& leg) { return WriteLeg(leg, {asio::buffer(leg.head)}, within); });
  auto sending = [&legs] {
    return std::any_of(legs.begin(), legs.end(), [](const Leg& l) { return l.sending(); });
  };
  // No node took the head: the answer is theirs (the body is drained when it is given).
  if (go_on && sending()) {
    http::response<http::empty_body> next{http::status::continue_, version};
    auto [ec, sent] = co_await http::async_write(client, next, kTuple);
    (void)sent;
    if (ec) co_return false;
  }
  http::request_parser<http::buffer_body> parser(std::move(header_parser));
  parser.body_limit(boost::none);  // each node holds the archive to its own limit
  std::vector<char> piece(64 * 1024);
  while (!parser.is_done() && sending()) {
    parser.get().body().data = piece.data();
    parser.get().body().size = piece.size();
    client.expires_after(kBodyReadTimeout);
    auto [ec, n] = co_await http::async_read_some(client, buffer, parser, kTuple);
    (void)n;
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      // The client left, or its body broke off: no node gets a whole archive.
      for (Leg& leg : legs) leg.call->Close();
      if (ec != http::error::end_of_stream && ec != asio::error::eof &&
          ec != beast::error::timeout && ec != asio::error::connection_reset) {
        const Error error{ErrorCode::kInvalidRequest, "the request's body: " + ec.message()};
        co_await Refuse(client, version, error, false);
      }
      co_return false;
    }
    const size_t got = piece.size() - parser.get().body().size;
    if (got == 0) continue;
    std::string before, after;
    if (!length) {
      char size[24];
      before.assign(size, static_cast<size_t>(std::snprintf(size, sizeof size, "%zx\r\n", got)));
      after = "\r\n";
    }
    co_await EveryLeg(ex_, legs, [&](Leg& leg) {
      return WriteLeg(leg,
                      {asio::buffer(before), asio::buffer(piece.data(), got), asio::buffer(after)},
                      within);
    });
    counts_.to_node += got * legs.size();
  }
  if (!length) {
    static constexpr std::string_view kLastChunk = "0\r\n\r\n";
    co_await EveryLeg(ex_, legs,
                      [&](Leg& leg) { return WriteLeg(leg, {asio::buffer(kLastChunk)}, within); });
  }
  co_return true;
}

asio::awaitable<void> Gateway::MergeEvents(beast::tcp_stream& client, std::vector<Leg>& legs) {
  client.expires_never();
  TurnQueue turn(ex_);
  bool gone = false;
  auto send = [&](std::string text) -> asio::awaitable<void> {
    co_await turn.Acquire();
    if (!gone) {
      gone =
          !co_await api::WriteWithin(client.socket(), asio::buffer(text), options_.write_timeout);
      counts_.to_client += text.size();
      // Nobody to tell: the nodes' pulls go on without the gateway.
      if (gone) {
        for (Leg& leg : legs) leg.call->Close();
      }
    }
    turn.Release();
  };
  std::string start(kEventStreamHead);
  co_await send(std::move(start));
  const SteadyClock::duration timeout = options_.node_timeout;
  co_await EveryLeg(ex_, legs, [&](Leg& leg) { return FollowLeg(leg, send, timeout); });
  if (gone) co_return;
  std::vector<NodeAnswer> answers;
  for (Leg& leg : legs) answers.push_back({leg.node, OutcomeOf(leg)});
  http::response<http::string_body> res = Merged(true, answers);
  const char* last = res.result_int() / 100 == 2 ? "template" : "error";
  std::string text = "event: " + std::string(last) + "\ndata: " + res.body() + "\n\n";
  co_await send(std::move(text));
}

http::response<http::string_body> Gateway::Merged(bool pull, std::vector<NodeAnswer>& answers) {
  if (answers.empty()) return Refusal(Error{ErrorCode::kUnavailable, "no node is up"}, false);
  // What each node said: done, or why not.
  std::vector<std::string> done;
  json::object failed;
  const NodeAnswer* first_done = nullptr;
  const NodeAnswer* first_failed = nullptr;  // the first refusal that is not a 404
  const NodeAnswer* first_missing = nullptr;
  for (const NodeAnswer& a : answers) {
    if (!a.answer) {
      failed[a.node] = a.answer.error().message;
      continue;
    }
    const int status = a.answer->result_int();
    if (status / 100 == 2) {
      done.push_back(a.node);
      if (!first_done) first_done = &a;
      continue;
    }
    if (status == 404 && !pull) {
      if (!first_missing) first_missing = &a;
      continue;  // not there to delete
    }
    const std::optional<std::string> message = ErrorMessageOf(a.answer->body());
    failed[a.node] =
        message ? *message : std::to_string(status) + " " + a.answer->body().substr(0, 200);
    if (!first_failed) first_failed = &a;
  }
  std::string done_list;
  for (const std::string& node : done) done_list += (done_list.empty() ? "" : ", ") + node;
  if (!pull && first_failed) {
    // A delete refused somewhere (in use there): that answer, saying where it did go.
    http::response<http::string_body> res = *first_failed->answer;
    if (!done.empty()) res.set("X-Sandstream-Done-Nodes", done_list);
    return res;
  }
  if (!first_done) {
    // Nowhere: the first node's refusal (or, for a delete, its 404), or why none answered.
    const NodeAnswer* say = first_failed ? first_failed : first_missing;
    if (say) return *say->answer;
    return Refusal(
        Error{ErrorCode::kUnavailable, "no node could be reached: " + json::serialize(failed)},
        false);
  }
  http::response<http::string_body> res = *first_done->answer;
  if (pull) {
    // The first node's template, with where it is and where it is not.
    boost::system::error_code ec;
    json::value body = json::parse(res.body(), ec);
    if (!ec && body.is_object()) {
      json::array nodes;
      for (const std::string& node : done) nodes.emplace_back(node);
      body.as_object()["nodes"] = std::move(nodes);
      if (!failed.empty()) body.as_object()["failed_nodes"] = failed;
      res.body() = json::serialize(body);
    }
  } else if (!failed.empty()) {
    res.set("X-Sandstream-Failed-Nodes", json::serialize(failed));
  }
  return res;
}

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
  json::object body{{"status", stopping_ ? "stopping" : "ok"},
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
  http::response<http::string_body> res{api::StatusFor(error.code), 11};
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
  api::PrometheusText p;
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
                  api::kPrometheusContentType);
}

}  // namespace sandstream::cluster
