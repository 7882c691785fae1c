#include "api/server.h"

#include <array>
#include <memory>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>

#include "api/cloudflare/routes.h"
#include "api/router.h"
#include "api/routes/routes.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/timer.h"
#include "http/drain.h"
#include "http/headers.h"
#include "service/service.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace beast = boost::beast;
using asio::ip::tcp;

std::optional<Error> Server::Admission(const RouteMatch& match) {
  if (!match.route) return std::nullopt;
  if (!match.params.empty() && match.route->pattern.starts_with("/v1/sandboxes/{}")) {
    // Another tenant's sandbox does not exist for this one: the same 404 as a missing one.
    const SandboxEntry* sb = service_.Find(match.params[0]);
    if (sb && !match.principal.Sees(sb->tenant, sb->id)) {
      return Error{ErrorCode::kNotFound, "no sandbox '" + match.params[0] + "'"};
    }
  }
  const Handler h = match.route->handler;
  const bool streams = h == SandboxLogs || h == SandboxEvents || h == ProcessLogs ||
                       h == ExecStream || h == ExecWs || h == ExecPty || h == FilesWatch ||
                       h == ProxyPort || cloudflare::Streams(h);
  return AdmitTenant(match.principal.tenant, streams);
}

std::optional<Error> Server::AdmitTenant(const std::string& tenant, bool stream) {
  const Tenant* t = service_.quotas().TenantOf(tenant);
  if (!t) return std::nullopt;
  if (const int64_t rps = t->quotas.requests_per_second; rps > 0) {
    // A bucket of a second's worth, refilled continuously.
    Rate& rate = rates_[tenant];
    const SteadyTime now = SteadyNow();
    const double seconds = std::chrono::duration<double>(now - rate.refilled).count();
    rate.tokens = std::min<double>(static_cast<double>(rps), rate.refilled == SteadyTime{}
                                                                 ? static_cast<double>(rps)
                                                                 : rate.tokens + seconds * rps);
    rate.refilled = now;
    if (rate.tokens < 1) {
      return Error{
          ErrorCode::kQuotaExceeded,
          "tenant '" + tenant + "' is at its quota requests_per_second " + std::to_string(rps)};
    }
    rate.tokens -= 1;
  }
  if (stream && t->quotas.streams > 0 && service_.quotas().StreamsOf(tenant) >= t->quotas.streams) {
    return Error{ErrorCode::kQuotaExceeded, "tenant '" + tenant + "' is at its quota streams " +
                                                std::to_string(t->quotas.streams)};
  }
  return std::nullopt;
}

asio::awaitable<void> Server::Handle(Context& ctx, const Route* route, const std::string& wakes,
                                     std::optional<Error> error) {
  if (error) co_return co_await ReplyError(ctx, *error);
  if (wakes.empty()) co_return co_await route->handler(ctx);
  // Being answered, a request keeps the sandbox from being idle (auto_pause): a stream, a
  // terminal or a port connection for as long as it is open.
  struct Activity {
    Service& service;
    const std::string& id;
    ~Activity() { service.EndActivity(id); }
  } activity{service_, wakes};
  service_.BeginActivity(wakes);
  // A request for a paused sandbox resumes it first (or is refused: auto_resume false).
  if (Result<void> awake = co_await service_.Wake(wakes); !awake) {
    co_return co_await ReplyError(ctx, awake.error());
  }
  co_await route->handler(ctx);
}

Server::Server(asio::any_io_executor ex, Service& service, ServerOptions options)
    : ex_(ex),
      service_(service),
      options_(std::move(options)),
      listener_(ex, options_.max_connections) {}

Result<tcp::endpoint> Server::Listen(const std::string& listen) {
  return listener_.Listen(listen);
}

asio::awaitable<void> Server::EndStreamsOfDeadTokens() {
  Timer tick(ex_);
  for (;;) {
    tick.expires_after(std::chrono::seconds(1));
    auto [ec] = co_await tick.async_wait(Tuple());
    if (ec || listener_.stopping()) co_return;
    if (!options_.access) continue;
    for (StreamHandle* h : streams_) {
      if (h->stopping) continue;
      if (!h->token.empty() && !options_.access->TokenLive(h->token)) {
        h->reason =
            Error{ErrorCode::kUnauthorized, "token " + h->token + " has expired or was revoked"};
      } else if (!h->key.empty() && !options_.access->KeyLive(h->key)) {
        h->reason = Error{ErrorCode::kUnauthorized, "key " + h->key + " was revoked"};
      } else {
        continue;
      }
      h->stopping = true;
      if (h->wake) h->wake();
    }
  }
}

asio::awaitable<void> Server::Run() {
  Spawn(ex_, EndStreamsOfDeadTokens(), "token sweep");
  co_await listener_.Run([this](tcp::socket socket) { return Session(std::move(socket)); },
                         [this](tcp::socket socket) { return Refuse(std::move(socket)); });
}

asio::awaitable<void> Server::Refuse(tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  const Error busy{ErrorCode::kTooManyConnections, "sandstreamd has max_connections (" +
                                                       std::to_string(options_.max_connections) +
                                                       ") connections open; retry later"};
  co_await TurnAway(stream, busy, sandstream::http::kRefuseDrainTime);
  boost::system::error_code ec;
  stream.socket().close(ec);
}

asio::awaitable<void> Server::TurnAway(beast::tcp_stream& stream, const Error& error,
                                       SteadyClock::duration drain) {
  http::request<http::string_body> req;
  req.version(11);
  Context ctx{*this, service_, req, stream, "req-" + std::to_string(++next_request_), {}, {}, {}};
  ctx.streamed = true;
  co_await ReplyError(ctx, error);
  ++service_.metrics().http_requests_total[ctx.status];
  log::Info("request", {{"request", ctx.request_id},
                        {"status", std::to_string(ctx.status)},
                        {"error", error.message}});
  co_await sandstream::http::Drain(stream, drain);
}

void Server::StopAccepting() {
  listener_.StopAccepting();
}

void Server::EndStreams() {
  listener_.CancelIdle();
  for (StreamHandle* h : streams_) {
    h->stopping = true;
    if (h->wake) h->wake();
  }
}

void Server::CloseConnections() {
  for (beast::tcp_stream* s : connections_) {
    boost::system::error_code ec;
    s->socket().close(ec);
  }
}

std::list<StreamHandle*>::iterator Server::AddStream(StreamHandle* h) {
  // A stream that starts once shutdown has begun ends at once.
  if (listener_.stopping()) h->stopping = true;
  return streams_.insert(streams_.end(), h);
}

void Server::RemoveStream(std::list<StreamHandle*>::iterator it) {
  streams_.erase(it);
}

asio::awaitable<void> Server::Session(tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  const auto connection = connections_.insert(connections_.end(), &stream);
  struct Forget {
    std::list<beast::tcp_stream*>& list;
    std::list<beast::tcp_stream*>::iterator it;
    ~Forget() { list.erase(it); }
  } forget{connections_, connection};
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    // The body limit depends on the route; it is set below, once the target is known.
    parser.body_limit(boost::none);
    parser.header_limit(sandstream::http::kHeaderLimit);
    if (listener_.stopping()) break;
    stream.expires_after(options_.idle_connection);
    const auto idle = listener_.Idle(stream);
    auto [ec, n] = co_await http::async_read_header(stream, buffer, parser, Tuple());
    listener_.Busy(idle);
    (void)n;
    if (ec) {
      // A header too large or not HTTP is answered; a closed, timed-out or cancelled
      // connection is not.
      const std::optional<Error> header_error = sandstream::http::HeaderError(ec);
      if (header_error) co_await TurnAway(stream, *header_error, sandstream::http::kDrainTime);
      break;
    }

    RouteMatch match = MatchRoute(parser, options_);
    if (match.refusal && match.unknown_key && options_.refresh_access) {
      // A key made through another node may not have reached this one yet.
      co_await options_.refresh_access();
      match = MatchRoute(parser, options_);
    }
    if (!match.refusal) match.refusal = Admission(match);
    const bool stream_body = match.route && match.route->stream_body;
    parser.body_limit(match.body_limit);
    // The route, the key and the announced size are answered from the header: a request
    // refused for them never has its body read.
    std::optional<Error> refusal = std::move(match.refusal);
    if (!refusal && !parser.is_done()) {
      if (beast::iequals(parser.get()[http::field::expect], "100-continue")) {
        http::response<http::empty_body> go_on{http::status::continue_, parser.get().version()};
        auto [cont_ec, sent] = co_await http::async_write(stream, go_on, Tuple());
        (void)sent;
        if (cont_ec) break;
      }
      if (!stream_body) {
        stream.expires_after(std::chrono::seconds(60));
        auto [body_ec, m] = co_await http::async_read(stream, buffer, parser, Tuple());
        (void)m;
        if (body_ec == http::error::body_limit) {
          refusal = sandstream::http::BodyTooLarge(match.body_limit);
        } else if (body_ec) {
          break;
        }
      }
    }
    stream.expires_never();
    const bool refused = refusal.has_value();
    const bool body_unread = !parser.is_done();

    // A streamed body stays in the parser for the handler: it gets a copy of the header.
    auto req = stream_body || body_unread ? http::request<http::string_body>(parser.get().base())
                                          : parser.release();
    Context ctx{*this, service_, req, stream, "req-" + std::to_string(++next_request_), {}, {}, {}};
    if (stream_body) {
      ctx.body_parser = &parser;
      ctx.body_buffer = &buffer;
    }
    ctx.query = std::move(match.query);
    ctx.params = std::move(match.params);
    ctx.allow = std::move(match.allow);
    ctx.principal = std::move(match.principal);
    ctx.dialect = match.dialect;
    // An answer given before the body is read ends the connection, and says so.
    if (refused && body_unread) ctx.streamed = true;

    const auto started = SteadyNow();
    co_await Handle(ctx, match.route, match.wakes, std::move(refusal));
    ++service_.metrics().http_requests_total[ctx.status];
    const auto ms = std::chrono::duration<double, std::milli>(SteadyNow() - started).count();
    // The audit trail: who (tenant, key or token) did what; never a query string (it may hold
    // an access_token).
    log::Info("request", {{"request", ctx.request_id},
                          {"method", std::string(req.method_string())},
                          {"path", match.path},
                          {"status", std::to_string(ctx.status)},
                          {"ms", std::to_string(ms)},
                          {"tenant", ctx.principal.tenant},
                          {"credential", ctx.principal.credential}});
    if ((refused && body_unread) || (stream_body && !parser.is_done())) {
      // The client may still be sending the body nobody will read.
      co_await sandstream::http::Drain(stream, sandstream::http::kDrainTime);
      break;
    }
    if (ctx.streamed || !req.keep_alive() || listener_.stopping()) break;
  }
  boost::system::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream.socket().close(ec);
}

}  // namespace sandstream::api
