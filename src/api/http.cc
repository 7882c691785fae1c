#include "api/http.h"

#include <array>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/json.hpp>

#include "api/cloudflare/errors.h"
#include "api/e2b/connect.h"
#include "api/server.h"
#include "base/async.h"
#include "base/log.h"
#include "http/status.h"

namespace sandstream::api {
namespace json = boost::json;
namespace asio = boost::asio;
namespace beast = boost::beast;

std::optional<std::string_view> Context::Query(std::string_view name) const {
  auto it = query.find(name);
  if (it == query.end()) return std::nullopt;
  return std::string_view(it->second);
}

std::string_view Context::Header(http::field field) const {
  auto it = req.find(field);
  return it == req.end() ? std::string_view() : std::string_view(it->value());
}

std::string_view Context::Header(std::string_view name) const {
  auto it = req.find(name);
  return it == req.end() ? std::string_view() : std::string_view(it->value());
}

Result<bool> Context::QueryFlag(std::string_view name, bool fallback) const {
  auto v = Query(name);
  if (!v) return fallback;
  if (v->empty() || *v == "1" || *v == "true" || *v == "yes") return true;
  if (*v == "0" || *v == "false" || *v == "no") return false;
  return Invalid(std::string(name) + " must be 1 or true, 0 or false");
}

asio::awaitable<void> Reply(Context& ctx, http::status status, std::string body,
                            std::string_view content_type,
                            std::vector<std::pair<std::string, std::string>> fields) {
  http::response<http::string_body> res{status, ctx.req.version()};
  res.set(http::field::server, "sandstreamd");
  if (!content_type.empty()) res.set(http::field::content_type, content_type);
  for (const auto& [name, value] : fields) res.set(name, value);
  res.set("X-Request-Id", ctx.request_id);
  if (!ctx.allow.empty()) res.set(http::field::allow, ctx.allow);
  // A response that ends the connection (an unread body, a broken stream) says so.
  res.keep_alive(ctx.req.keep_alive() && !ctx.streamed);
  res.body() = std::move(body);
  res.prepare_payload();
  ctx.status = static_cast<int>(status);
  // A client that stops reading a large answer must not hold its connection forever: each write
  // has the write timeout to make progress.
  http::response_serializer<http::string_body> serializer(res);
  boost::system::error_code ec;
  while (!ec && !serializer.is_done()) {
    ctx.stream.expires_after(ctx.server.options().write_timeout);
    auto [write_ec, n] = co_await http::async_write_some(ctx.stream, serializer,
                                                         asio::as_tuple(asio::use_awaitable));
    (void)n;
    ec = write_ec;
  }
  ctx.stream.expires_never();
  if (ec) ctx.streamed = true;  // the connection is unusable: close it
}

asio::awaitable<Written> WriteAll(Context& ctx, asio::const_buffer first,
                                  asio::const_buffer second) {
  const std::array<asio::const_buffer, 2> buffers{first, second};
  beast::buffers_suffix<std::array<asio::const_buffer, 2>> rest(buffers);
  Written written;
  while (!written.ec && beast::buffer_bytes(rest) > 0) {
    ctx.stream.expires_after(ctx.server.options().write_timeout);
    auto [ec, n] = co_await ctx.stream.async_write_some(rest, asio::as_tuple(asio::use_awaitable));
    rest.consume(n);
    written.bytes += n;
    written.ec = ec;
  }
  ctx.stream.expires_never();
  co_return written;
}

// ReplyJson, ReplyError and ReplyEmpty are plain functions returning Reply's awaitable: only
// Reply holds a coroutine frame, and its arguments are owned values.
asio::awaitable<void> ReplyJson(Context& ctx, http::status status, const json::value& body) {
  return Reply(ctx, status, json::serialize(body), "application/json");
}

void LogFailure(const Context& ctx, const Error& error, http::status status) {
  // A bug or a failed setup is worth a line; a 503 (busy, stopping) is not.
  if (status != http::status::internal_server_error) return;
  log::Error("request failed", {{"request", ctx.request_id},
                                {"code", std::string(ErrorCodeName(error.code))},
                                {"error", error.message}});
}

asio::awaitable<void> ReplyError(Context& ctx, const Error& error) {
  if (ctx.dialect == Dialect::kCloudflare) {
    return cloudflare::Fail(ctx, error, cloudflare::Subject::kAny);
  }
  if (ctx.dialect == Dialect::kE2b || ctx.dialect == Dialect::kConnect) {
    return e2b::Fail(ctx, error);
  }
  const auto status = sandstream::http::StatusFor(error.code);
  json::object inner;
  inner["code"] = ErrorCodeName(error.code);
  inner["message"] = error.message;
  json::object body;
  body["error"] = std::move(inner);
  LogFailure(ctx, error, status);
  return ReplyJson(ctx, status, body);
}

asio::awaitable<void> ReplyError(Context& ctx, ErrorCode code, std::string message) {
  const Error error{code, std::move(message)};
  return ReplyError(ctx, error);
}

asio::awaitable<void> ReplyEmpty(Context& ctx, http::status status) {
  return Reply(ctx, status, {}, {});
}

asio::awaitable<std::optional<Error>> ReceiveBody(Context& ctx, const BodySink& sink,
                                                  std::string_view limit_name, uint64_t limit) {
  if (!ctx.body_parser) {
    Result<void> taken = co_await sink(ctx.req.body());
    co_return taken ? std::nullopt : std::optional(taken.error());
  }
  auto& parser = *ctx.body_parser;
  std::optional<Error> failure;
  while (!parser.is_done() && !failure) {
    ctx.stream.expires_after(std::chrono::seconds(60));
    auto [ec, n] = co_await http::async_read_some(ctx.stream, *ctx.body_buffer, parser, Tuple());
    (void)n;
    std::string& chunk = parser.get().body();
    if (!chunk.empty()) {
      Result<void> taken = co_await sink(chunk);
      if (!taken) failure = std::move(taken).error();
    }
    chunk.clear();
    if (ec == http::error::body_limit) {
      failure =
          Error{ErrorCode::kPayloadTooLarge, std::string(limit_name) + " is larger than " +
                                                 "its limit (" + std::to_string(limit) + " bytes)"};
      break;
    }
    if (ec) {
      failure = Error{ErrorCode::kInvalidRequest, "upload interrupted: " + ec.message()};
      ctx.streamed = true;
      break;
    }
  }
  ctx.stream.expires_never();
  co_return failure;
}

}  // namespace sandstream::api
