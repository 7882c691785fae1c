// The request context every route handler gets, and the ways to answer it.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/json/value.hpp>

#include "base/error.h"
#include "base/result.h"
#include "service/access.h"

namespace sandstream {
class Service;
}

namespace sandstream::api {

namespace http = boost::beast::http;
class Server;

// Whose wire a route speaks: it decides how every error on it is written, the router's own
// refusals included (spec/errors.md; docs/cloudflare.md and docs/e2b.md for the others), and
// where the router reads the key (Authorization: Bearer, else ?access_token=; E2B's control
// plane sends X-API-KEY).
enum class Dialect {
  kSandstream,  // {"error": {"code", "message"}}
  kCloudflare,  // the container API of Cloudflare's SandboxClient: {code, message, ...} flat
  kE2b,         // E2B's control plane and envd's HTTP routes: {"code": <status>, "message"}
  kConnect,     // envd's Connect RPCs: {"code": "not_found", "message"}, or a stream's end
};

struct Context {
  Server& server;
  Service& service;
  http::request<http::string_body>& req;
  boost::beast::tcp_stream& stream;
  std::string request_id;
  std::vector<std::string> params;                        // path captures, in order
  std::map<std::string, std::string, std::less<>> query;  // decoded query parameters
  std::string allow;      // a 405's Allow header: the methods the path has
  Principal principal{};  // who asks (the admin for open routes)
  Dialect dialect = Dialect::kSandstream;
  int status = 0;         // what was answered (for logs and metrics)
  bool streamed = false;  // the handler wrote a streaming response: close afterwards
  // Routes with stream_body: the body is still unread; the handler reads it through these.
  http::request_parser<http::string_body>* body_parser = nullptr;
  boost::beast::flat_buffer* body_buffer = nullptr;

  std::optional<std::string_view> Query(std::string_view name) const;
  std::string_view Header(http::field field) const;
  std::string_view Header(std::string_view name) const;
  // A flag from the query: `1`, `true`, `yes` or empty (`?follow`) set it, `0`, `false`, `no`
  // clear it, `fallback` when absent; any other value is kInvalidRequest naming the flag.
  Result<bool> QueryFlag(std::string_view name, bool fallback = false) const;
};

// Writes `first` then `second` to the client, ending (as `timeout`, the socket closed) once a
// write has made no progress for the server's write timeout.
struct Written {
  boost::system::error_code ec;
  size_t bytes = 0;
};
boost::asio::awaitable<Written> WriteAll(Context& ctx, boost::asio::const_buffer first,
                                         boost::asio::const_buffer second = {});

// `fields`: more of the answer's header fields, (name, value).
boost::asio::awaitable<void> Reply(Context& ctx, http::status status, std::string body,
                                   std::string_view content_type,
                                   std::vector<std::pair<std::string, std::string>> fields = {});
boost::asio::awaitable<void> ReplyJson(Context& ctx, http::status status,
                                       const boost::json::value& body);
// A 400 invalid_request naming what is wrong with the request.
inline Error Invalid(std::string message) {
  return Error{ErrorCode::kInvalidRequest, std::move(message)};
}

// The error in the route's dialect, with the status StatusFor (http/status.h) gives its code.
boost::asio::awaitable<void> ReplyError(Context& ctx, const Error& error);
// The same from a code and a message. Handlers use this form inside `co_await`: g++ 12
// destroys a brace-initialized temporary (`Error{...}`) in a co_await expression twice.
boost::asio::awaitable<void> ReplyError(Context& ctx, ErrorCode code, std::string message);
boost::asio::awaitable<void> ReplyEmpty(Context& ctx, http::status status);

// Takes the body of a stream_body route as it comes, each piece to `sink`, until its end or
// the first failure: the sink's, the client's, or the route's body limit (a 413 naming
// `limit_name`). Bodies read whole already (HTTP/1.0) go to the sink at once. Before an answer
// to a body not read to its end, the handler must say the connection closes.
using BodySink = std::function<boost::asio::awaitable<Result<void>>(std::string_view)>;
boost::asio::awaitable<std::optional<Error>> ReceiveBody(Context& ctx, const BodySink& sink,
                                                         std::string_view limit_name,
                                                         uint64_t limit);

// Logs a failure answered with `status`, once, when it is the daemon's own (a 500).
void LogFailure(const Context& ctx, const Error& error, http::status status);

}  // namespace sandstream::api
