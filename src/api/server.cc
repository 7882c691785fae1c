#include "api/server.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/url/parse.hpp>

#include "api/routes.h"
#include "base/ids.h"
#include "base/log.h"
#include "service/service.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace beast = boost::beast;
using asio::ip::tcp;

namespace {

auto Tuple() { return asio::as_tuple(asio::use_awaitable); }

// Splits "/a/b/c" into {"a","b","c"}; empty segments (double slashes) are kept as empty.
std::vector<std::string_view> Segments(std::string_view path) {
  std::vector<std::string_view> out;
  if (path.starts_with('/')) path.remove_prefix(1);
  while (!path.empty()) {
    const size_t slash = path.find('/');
    out.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return out;
}

bool Match(std::string_view pattern, const std::vector<std::string_view>& segs,
           std::vector<std::string>* params) {
  const auto pat = Segments(pattern);
  if (pat.size() != segs.size()) return false;
  std::vector<std::string> captured;
  for (size_t i = 0; i < pat.size(); ++i) {
    if (pat[i] == "{}") {
      if (segs[i].empty()) return false;
      captured.emplace_back(segs[i]);
    } else if (pat[i] != segs[i]) {
      return false;
    }
  }
  *params = std::move(captured);
  return true;
}

struct Resolved {
  const Route* route = nullptr;
  bool path_known = false;
  std::vector<std::string> params;
};

Resolved Resolve(http::verb method, std::string_view path) {
  Resolved r;
  const auto segs = Segments(path);
  for (const auto& route : AllRoutes()) {
    std::vector<std::string> params;
    if (!Match(route.pattern, segs, &params)) continue;
    r.path_known = true;
    if (route.method == method) {
      r.route = &route;
      r.params = std::move(params);
      return r;
    }
  }
  return r;
}

Error TooLarge(uint64_t limit) {
  return Error{ErrorCode::kPayloadTooLarge,
               "request body is larger than " + std::to_string(limit) + " bytes"};
}

// What to answer instead of running a handler, if anything. A plain function: g++ 12
// mishandles temporaries with destructors built inside a coroutine's branches.
std::optional<Error> RequestError(const std::optional<Error>& early, const Resolved& resolved,
                                  const http::request<http::string_body>& req,
                                  const std::string& path) {
  if (early) return early;
  if (resolved.route) return std::nullopt;
  if (resolved.path_known) {
    return Error{ErrorCode::kMethodNotAllowed,
                 std::string(req.method_string()) + " is not allowed on " + path};
  }
  return Error{ErrorCode::kNotFound, "no route " + path};
}

std::optional<Error> AuthError(const Context& ctx, const Route& route, const std::string& api_key) {
  if (route.open) return std::nullopt;
  std::string_view auth = ctx.Header(http::field::authorization);
  std::string_view key;
  if (auth.starts_with("Bearer ")) {
    key = auth.substr(7);
  } else if (auto q = ctx.Query("access_token")) {
    key = *q;
  }
  if (key.empty()) {
    return Error{ErrorCode::kUnauthorized,
                 "missing API key: send Authorization: Bearer <key> (or ?access_token=<key>)"};
  }
  if (!SecretEquals(key, api_key)) return Error{ErrorCode::kUnauthorized, "wrong API key"};
  return std::nullopt;
}

}  // namespace

asio::awaitable<void> Server::Handle(Context& ctx, const Route* route, std::optional<Error> error) {
  if (!error && route) error = AuthError(ctx, *route, options_.api_key);
  if (error) {
    // A body left unread makes the connection unusable after an early error: close it.
    if (error->code == ErrorCode::kPayloadTooLarge) ctx.streamed = true;
    co_await ReplyError(ctx, *error);
    co_return;
  }
  co_await route->handler(ctx);
}

Server::Server(asio::any_io_executor ex, Service& service, ServerOptions options)
    : ex_(ex), service_(service), options_(std::move(options)), acceptor_(ex) {}

Result<tcp::endpoint> Server::Listen(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return Error{ErrorCode::kInvalidRequest, "listen: expected host:port"};
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) return Error{ErrorCode::kInvalidRequest, "listen: bad address '" + host + "'"};
  const int port = std::atoi(listen.c_str() + colon + 1);
  tcp::endpoint ep(address, static_cast<unsigned short>(port));
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Error{ErrorCode::kInternal, "listen " + listen + ": " + ec.message()};
  return acceptor_.local_endpoint();
}

asio::awaitable<void> Server::Run() {
  for (;;) {
    auto [ec, socket] = co_await acceptor_.async_accept(Tuple());
    if (ec) {
      if (stopping_ || ec == asio::error::operation_aborted) co_return;
      log::Warn("accept failed", {{"error", ec.message()}});
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    ++sessions_;
    asio::co_spawn(ex_, Session(std::move(socket)), [this](std::exception_ptr e) {
      --sessions_;
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        log::Error("session failed", {{"error", ex.what()}});
      }
    });
  }
}

void Server::StopAccepting() {
  stopping_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
}

void Server::EndStreams() {
  for (beast::tcp_stream* idle : idle_) idle->cancel();
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
  return streams_.insert(streams_.end(), h);
}

void Server::RemoveStream(std::list<StreamHandle*>::iterator it) { streams_.erase(it); }

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
    // The body limit depends on the route; it is checked below, once the target is known.
    parser.body_limit(boost::none);
    parser.header_limit(64 * 1024);
    if (stopping_) break;
    stream.expires_after(options_.idle_connection);
    const auto idle = idle_.insert(idle_.end(), &stream);
    auto [ec, n] = co_await http::async_read_header(stream, buffer, parser, Tuple());
    idle_.erase(idle);
    if (ec) break;  // closed, timed out, cancelled by shutdown or garbage: nothing to answer
    (void)n;

    const std::string target(parser.get().target());
    auto url = boost::urls::parse_origin_form(target);
    std::string path = url ? std::string(url->encoded_path()) : target;
    Resolved resolved = Resolve(parser.get().method(), path);
    const uint64_t body_limit = resolved.route && resolved.route->stream_body
                                    ? options_.max_file_bytes
                                : resolved.route && resolved.route->raw_body
                                    ? options_.max_stdin_bytes
                                    : options_.max_body_bytes;
    const bool stream_body = resolved.route && resolved.route->stream_body;
    parser.body_limit(body_limit);

    std::optional<Error> early;
    if (auto length = parser.content_length(); length && *length > body_limit) {
      early = TooLarge(body_limit);
    } else if (stream_body && !parser.is_done()) {
      if (beast::iequals(parser.get()[http::field::expect], "100-continue")) {
        http::response<http::empty_body> go_on{http::status::continue_, parser.get().version()};
        auto [cont_ec, sent] = co_await http::async_write(stream, go_on, Tuple());
        (void)sent;
        if (cont_ec) co_return;
      }
    } else if (!parser.is_done()) {
      parser.body_limit(body_limit);
      if (beast::iequals(parser.get()[http::field::expect], "100-continue")) {
        http::response<http::empty_body> go_on{http::status::continue_, parser.get().version()};
        auto [cont_ec, sent] = co_await http::async_write(stream, go_on, Tuple());
        (void)sent;
        if (cont_ec) co_return;
      }
      stream.expires_after(std::chrono::seconds(60));
      auto [body_ec, m] = co_await http::async_read(stream, buffer, parser, Tuple());
      (void)m;
      if (body_ec == http::error::body_limit) {
        early = TooLarge(body_limit);
      } else if (body_ec) {
        co_return;
      }
    }
    stream.expires_never();

    // A streamed body stays in the parser for the handler: it gets a copy of the header.
    auto req = stream_body ? http::request<http::string_body>(parser.get().base())
                           : parser.release();
    Context ctx{*this, service_, req, stream, "req-" + std::to_string(++next_request_), {}, {}};
    if (stream_body) {
      ctx.body_parser = &parser;
      ctx.body_buffer = &buffer;
    }
    if (url) {
      for (auto param : url->params()) ctx.query[param.key] = param.value;
    }
    ctx.params = std::move(resolved.params);

    const auto started = SteadyNow();
    std::optional<Error> error = RequestError(early, resolved, req, path);
    co_await Handle(ctx, resolved.route, std::move(error));
    ++service_.metrics().http_requests_total[ctx.status];
    const auto ms = std::chrono::duration<double, std::milli>(SteadyNow() - started).count();
    log::Info("request", {{"request", ctx.request_id},
                          {"method", std::string(req.method_string())},
                          {"path", path},
                          {"status", std::to_string(ctx.status)},
                          {"ms", std::to_string(ms)}});
    if (early) {
      // The client is still sending the body we refused. Closing now would reset the
      // connection and could destroy the 413 before it is read: finish sending, then read
      // and discard what comes, for a bounded time.
      boost::system::error_code shut_ec;
      stream.socket().shutdown(tcp::socket::shutdown_send, shut_ec);
      stream.expires_after(std::chrono::seconds(5));
      std::vector<char> sink(64 * 1024);
      for (size_t total = 0; total < (256u << 20);) {
        auto [read_ec, got] = co_await stream.async_read_some(asio::buffer(sink), Tuple());
        if (read_ec) break;
        total += got;
      }
      break;
    }
    if (ctx.streamed || !req.keep_alive() || stopping_) break;
    if (stream_body && !parser.is_done()) break;  // the handler left part of the body unread
  }
  boost::system::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream.socket().close(ec);
}

}  // namespace sandstream::api
