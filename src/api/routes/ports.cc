// Exposed ports: a port of a sandbox, once exposed, answers through the daemon in two forms, the
// path /v1/sandboxes/{id}/ports/{port}/... and the host {port}-{id}.{preview_domain}
// (http/proxy_target.h, MatchProxy). The daemon connects from inside the sandbox's network
// namespace, so a server listening on the sandbox's loopback is reachable with no network at
// all, and relays bytes both ways as they come: a streamed response arrives unbuffered, an
// upgrade (WebSocket) goes on as raw bytes. The upstream is told `Connection: close`, so one
// exchange is one connection and every request passes the key check and the path rewrite; the
// key never reaches it.
#include <array>
#include <charconv>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>

#include "api/common/lookup.h"
#include "api/request.h"
#include "api/router.h"
#include "api/routes/routes.h"
#include "api/server.h"
#include "base/clock.h"
#include "base/timer.h"
#include "http/relay.h"
#include "service/service.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace json = boost::json;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;

namespace {

constexpr std::chrono::seconds kConnectTimeout{10};

Result<uint16_t> ParsePort(std::string_view text) {
  uint32_t port = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (ec != std::errc() || end != text.data() + text.size() || port < 1 || port > 65535) {
    return Invalid("port must be a number from 1 to 65535");
  }
  return static_cast<uint16_t>(port);
}

// http://host:port as the client reached the daemon (its Host header).
// Where clients reach the daemon: the configured public_url (behind a TLS proxy), else http://
// and the Host header the request came with. Split into scheme and host[:port].
struct PublicOrigin {
  std::string scheme;
  std::string host;
};
PublicOrigin Origin(const Context& ctx) {
  std::string_view url = ctx.server.options().public_url;
  if (const size_t sep = url.find("://"); sep != std::string_view::npos) {
    return {std::string(url.substr(0, sep)), std::string(url.substr(sep + 3))};
  }
  std::string_view host = ctx.Header(http::field::host);
  return {"http", host.empty() ? "127.0.0.1" : std::string(host)};
}

json::object PortJson(const Context& ctx, const std::string& sandbox_id, uint16_t port,
                      SystemTime since) {
  const PublicOrigin origin = Origin(ctx);
  const std::string p = std::to_string(port);
  return {{"port", port},
          {"url", origin.scheme + "://" + p + "-" + sandbox_id + "." + PreviewDomain(ctx) + "/"},
          {"path_url", origin.scheme + "://" + origin.host + "/v1/sandboxes/" + sandbox_id +
                           "/ports/" + p + "/"},
          {"created_at", FormatRfc3339(since)}};
}

}  // namespace

std::string PreviewDomain(const Context& ctx) {
  const PublicOrigin origin = Origin(ctx);
  // The preview host keeps the daemon's port: {port}-{id}.{preview_domain}:{daemon port}.
  std::string listen_port;
  if (const size_t colon = origin.host.rfind(':');
      colon != std::string::npos && origin.host.find(']') == std::string::npos) {
    listen_port = origin.host.substr(colon);
  }
  return ctx.server.options().preview_domain + listen_port;
}

namespace {

// The sandbox and the port the route names (its second parameter).
struct PortRef {
  const SandboxEntry* sandbox;
  uint16_t port;
};
Result<PortRef> FindPort(Context& ctx, bool exposed) {
  auto sb = FindSandbox(ctx);
  if (!sb) return std::move(sb).error();
  auto port = ParsePort(ctx.params.at(1));
  if (!port) return std::move(port).error();
  if (exposed && !(*sb)->ports.contains(*port)) {
    return Error{ErrorCode::kNotFound,
                 "port " + ctx.params.at(1) + " of sandbox " + (*sb)->id + " is not exposed"};
  }
  return PortRef{*sb, *port};
}

// Connects `upstream` through `fd` (a socket of the sandbox's, Service::PortSocket or
// SandboxSocket) to `port` inside the sandbox, within kConnectTimeout; kBadGateway when
// nothing accepts there.
asio::awaitable<Result<void>> Connect(tcp::socket& upstream, Result<UniqueFd> fd,
                                      const std::string& sandbox_id, uint16_t port) {
  if (!fd) co_return std::move(fd).error();
  boost::system::error_code ec;
  upstream.assign(tcp::v4(), fd->release(), ec);
  if (ec) co_return Error{ErrorCode::kInternal, "ports: socket: " + ec.message()};
  Timer timer(upstream.get_executor(), kConnectTimeout);
  const tcp::endpoint loopback(asio::ip::address_v4::loopback(), port);
  auto result = co_await (upstream.async_connect(loopback, asio::as_tuple(asio::use_awaitable)) ||
                          timer.async_wait(asio::as_tuple(asio::use_awaitable)));
  if (result.index() == 1) {
    co_return Error{ErrorCode::kBadGateway, "port " + std::to_string(port) + " of sandbox " +
                                                sandbox_id + " did not accept within " +
                                                std::to_string(kConnectTimeout.count()) + " s"};
  }
  ec = std::get<0>(std::get<0>(result));
  if (ec) {
    co_return Error{ErrorCode::kBadGateway, "nothing accepts on port " + std::to_string(port) +
                                                " of sandbox " + sandbox_id + " (" + ec.message() +
                                                ")"};
  }
  co_return Ok{};
}

// The request as the upstream gets it: its own path, the query without access_token, no key,
// `Connection: close` unless it asks for an upgrade, and where it came from.
std::string UpstreamHead(const Context& ctx, std::string_view prefix, bool upgrade) {
  std::string_view target = ctx.req.target();
  std::string_view path = target.substr(0, target.find('?'));
  path.remove_prefix(std::min(prefix.size(), path.size()));
  std::string out(ctx.req.method_string());
  out += ' ';
  out += path.empty() ? std::string_view("/") : path;
  out += QueryWithout(target, "access_token");
  out += " HTTP/1.1\r\n";
  const std::string key = "Bearer " + ctx.server.options().api_key;
  for (const auto& field : ctx.req) {
    const std::string_view name = field.name_string();
    const std::string_view value = field.value();
    if (field.name() == http::field::authorization && value == key) continue;
    // Expect: the daemon has answered 100-continue itself.
    if (field.name() == http::field::connection || field.name() == http::field::keep_alive ||
        field.name() == http::field::expect || beast::iequals(name, "proxy-connection") ||
        beast::iequals(name, "x-forwarded-for") || beast::iequals(name, "x-forwarded-host") ||
        beast::iequals(name, "x-forwarded-proto") || beast::iequals(name, "x-forwarded-prefix")) {
      continue;
    }
    if (field.name() == http::field::cookie) {
      // The preview's key stays with the daemon; the page's own cookies go on.
      std::string kept;
      for (const Cookie& c : Cookies(value)) {
        if (c.name == kPreviewCookie) continue;
        if (!kept.empty()) kept += "; ";
        kept += c.text;
      }
      if (!kept.empty()) out += "Cookie: " + kept + "\r\n";
      continue;
    }
    out += name;
    out += ": ";
    out += value;
    out += "\r\n";
  }
  out += upgrade ? "Connection: upgrade\r\n" : "Connection: close\r\n";
  boost::system::error_code ec;
  const auto peer = ctx.stream.socket().remote_endpoint(ec);
  if (!ec) out += "X-Forwarded-For: " + peer.address().to_string() + "\r\n";
  out += "X-Forwarded-Host: " + std::string(ctx.Header(http::field::host)) + "\r\n";
  out += "X-Forwarded-Proto: http\r\n";
  if (!prefix.empty()) out += "X-Forwarded-Prefix: " + std::string(prefix) + "\r\n";
  out += "\r\n";
  return out;
}

// A preview opened with ?access_token=: the key goes into a cookie of that host alone
// (HttpOnly, so the page's scripts never see it) and the browser comes back without it in the
// URL, its history or its Referer.
asio::awaitable<bool> SetPreviewCookie(Context& ctx) {
  auto token = ctx.Query("access_token");
  if (!token || ctx.req.method() != http::verb::get) co_return false;
  std::string_view target = ctx.req.target();
  const std::string location =
      std::string(target.substr(0, target.find('?'))) + QueryWithout(target, "access_token");
  http::response<http::empty_body> res{http::status::found, ctx.req.version()};
  res.set(http::field::server, "sandstreamd");
  res.set(http::field::location, location);
  res.set(http::field::set_cookie, std::string(kPreviewCookie) + "=" + std::string(*token) +
                                       "; Path=/; HttpOnly; SameSite=Lax");
  res.set(http::field::cache_control, "no-store");
  res.set("Referrer-Policy", "no-referrer");
  res.keep_alive(false);
  ctx.status = 302;
  ctx.streamed = true;
  auto [ec, n] = co_await http::async_write(ctx.stream, res, asio::as_tuple(asio::use_awaitable));
  (void)ec;
  (void)n;
  co_return true;
}

}  // namespace

asio::awaitable<void> ExposePort(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  const json::value* port = body->if_contains("port");
  if (!port || !port->is_int64() || port->as_int64() < 1 || port->as_int64() > 65535) {
    co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest,
                                  "port must be a number from 1 to 65535");
  }
  const auto number = static_cast<uint16_t>(port->as_int64());
  const std::string id = (*sb)->id;
  Result<bool> exposed = ctx.service.ExposePort(id, number);
  if (!exposed) co_return co_await ReplyError(ctx, exposed.error());
  const SandboxEntry* entry = ctx.service.Find(id);
  co_await ReplyJson(ctx, *exposed ? http::status::created : http::status::ok,
                     PortJson(ctx, id, number, entry->ports.at(number)));
}

asio::awaitable<void> ListPorts(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  json::array items;
  for (const auto& [port, since] : (*sb)->ports)
    items.push_back(PortJson(ctx, (*sb)->id, port, since));
  json::object body;
  body["ports"] = std::move(items);
  co_await ReplyJson(ctx, http::status::ok, body);
}

asio::awaitable<void> GetPort(Context& ctx) {
  auto ref = FindPort(ctx, true);
  if (!ref) co_return co_await ReplyError(ctx, ref.error());
  co_await ReplyJson(ctx, http::status::ok,
                     PortJson(ctx, ref->sandbox->id, ref->port, ref->sandbox->ports.at(ref->port)));
}

asio::awaitable<void> ClosePort(Context& ctx) {
  auto ref = FindPort(ctx, false);
  if (!ref) co_return co_await ReplyError(ctx, ref.error());
  if (auto closed = ctx.service.UnexposePort(ref->sandbox->id, ref->port); !closed) {
    co_return co_await ReplyError(ctx, closed.error());
  }
  co_await ReplyEmpty(ctx, http::status::no_content);
}

// Returns once something accepts connections on the port (exposed or not), trying every
// 100 ms; a 408 after timeout_seconds (30 by default).
asio::awaitable<void> WaitPort(Context& ctx) {
  auto ref = FindPort(ctx, false);
  if (!ref) co_return co_await ReplyError(ctx, ref.error());
  auto timeout_or = TimeoutFromQuery(ctx, 30, 3600);
  if (!timeout_or) co_return co_await ReplyError(ctx, timeout_or.error());
  const double timeout = *timeout_or;
  const std::string id = ref->sandbox->id;
  const uint16_t port = ref->port;
  const auto deadline = SteadyNow() + std::chrono::duration_cast<SteadyClock::duration>(
                                          std::chrono::duration<double>(timeout));
  Timer pause(ctx.stream.get_executor());
  for (;;) {
    Result<UniqueFd> fd = ctx.service.SandboxSocket(id);
    tcp::socket probe(ctx.stream.get_executor());
    Result<void> connected = co_await Connect(probe, std::move(fd), id, port);
    if (connected) break;
    if (connected.error().code != ErrorCode::kBadGateway) {
      co_return co_await ReplyError(ctx, connected.error());
    }
    if (SteadyNow() >= deadline) {
      co_return co_await ReplyError(ctx, ErrorCode::kTimeout,
                                    "nothing accepted on port " + std::to_string(port) +
                                        " of sandbox " + id + " within " + std::to_string(timeout) +
                                        " s");
    }
    pause.expires_after(std::chrono::milliseconds(100));
    auto [pec] = co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
    (void)pec;
  }
  json::object body{{"port", port}, {"listening", true}};
  co_await ReplyJson(ctx, http::status::ok, body);
}

asio::awaitable<void> ProxyPort(Context& ctx) {
  // The body, if any, is relayed raw: this connection ends with the exchange.
  ctx.streamed = true;
  const std::string sandbox_id = ctx.params.at(0);
  const std::string prefix = ctx.params.at(2);
  const bool preview = prefix.empty();
  if (preview && co_await SetPreviewCookie(ctx)) co_return;
  auto port = ParsePort(ctx.params.at(1));
  if (!port) co_return co_await ReplyError(ctx, port.error());
  if (!ctx.service.Find(sandbox_id)) {
    co_return co_await ReplyError(ctx, ErrorCode::kNotFound, "no sandbox '" + sandbox_id + "'");
  }
  tcp::socket upstream(ctx.stream.get_executor());
  Result<UniqueFd> fd = ctx.service.PortSocket(sandbox_id, *port);
  Result<void> connected = co_await Connect(upstream, std::move(fd), sandbox_id, *port);
  if (!connected) co_return co_await ReplyError(ctx, connected.error());

  const bool upgrade = !ctx.req[http::field::upgrade].empty();
  const std::string head = UpstreamHead(ctx, prefix, upgrade);
  const auto write_timeout = ctx.server.options().write_timeout;
  bool sent = co_await sandstream::http::WriteWithin(upstream, asio::buffer(head), write_timeout);
  // What the daemon read past the request's header is the start of its body.
  if (sent && ctx.body_buffer && ctx.body_buffer->size() > 0) {
    sent = co_await sandstream::http::WriteWithin(upstream, ctx.body_buffer->data(), write_timeout);
    ctx.body_buffer->consume(ctx.body_buffer->size());
  }
  if (!sent) {
    co_return co_await ReplyError(ctx, ErrorCode::kBadGateway,
                                  "port " + std::to_string(*port) + " of sandbox " + sandbox_id +
                                      " did not take the request");
  }
  // A relay lasts as long as its two ends want (a WebSocket, a long poll): as a stream, it ends
  // with the daemon, and with the token or key it was opened with.
  StreamHandle handle;
  handle.StandOn(ctx.principal);
  handle.wake = [&upstream, &client = ctx.stream.socket()] {
    boost::system::error_code ignored;
    upstream.close(ignored);
    client.cancel(ignored);
  };
  const auto registration = ctx.server.AddStream(&handle);
  // The path form is served on the API's and the console's origin: its pages get an opaque one.
  const sandstream::http::Exchanged relay = co_await sandstream::http::RelayExchange(
      ctx.stream.socket(), upstream, write_timeout, /*opaque=*/!preview);
  ctx.server.RemoveStream(registration);
  if (relay.down == 0 && handle.reason) co_return co_await ReplyError(ctx, *handle.reason);
  if (relay.down == 0) {
    co_return co_await ReplyError(ctx, ErrorCode::kBadGateway,
                                  "port " + std::to_string(*port) + " of sandbox " + sandbox_id +
                                      " closed the connection without an answer");
  }
  ctx.status = relay.status;
  boost::system::error_code ignored;
  ctx.stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  ctx.stream.socket().close(ignored);
}

}  // namespace sandstream::api
