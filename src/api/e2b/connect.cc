#include "api/e2b/connect.h"

#include <charconv>

#include <boost/json.hpp>

#include "base/base64.h"
#include "http/status.h"

namespace sandstream::api::e2b {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

constexpr std::string_view kConnectJson = "application/connect+json";

json::object ErrorObject(std::string_view code, std::string_view message) {
  json::object o;
  o["code"] = code;
  o["message"] = message;
  return o;
}

json::object ErrorObject(const Error& error) {
  return ErrorObject(ConnectCode(error.code), error.message);
}

asio::awaitable<void> ReplyConnectError(Context& ctx, std::string_view code,
                                        std::string_view message) {
  if (IsStreamingCall(ctx)) {
    // A stream's errors travel in its end: the response itself is a 200.
    std::string body;
    json::object end;
    end["error"] = ErrorObject(code, message);
    AppendEnvelope(body, json::serialize(end), true);
    return Reply(ctx, http::status::ok, std::move(body), "application/connect+json");
  }
  return Reply(ctx, ConnectStatus(code), json::serialize(ErrorObject(code, message)),
               "application/json");
}

Error Malformed(std::string message) {
  return Error{ErrorCode::kInvalidRequest, std::move(message)};
}

std::string Named(std::string_view json_name) {
  return std::string(json_name);
}

}  // namespace

std::string_view ConnectCode(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidJson:
    case ErrorCode::kInvalidRequest:
    case ErrorCode::kMethodNotAllowed:
    case ErrorCode::kRequestHeaderTooLarge:
      return "invalid_argument";
    case ErrorCode::kUnauthorized:
      return "unauthenticated";
    case ErrorCode::kForbidden:
      return "permission_denied";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kTimeout:
      return "deadline_exceeded";
    case ErrorCode::kConflict:
    case ErrorCode::kPaused:
      return "failed_precondition";
    case ErrorCode::kPayloadTooLarge:
    case ErrorCode::kQuotaExceeded:
      return "resource_exhausted";
    case ErrorCode::kUnsupportedMediaType:
      return "unimplemented";
    case ErrorCode::kShuttingDown:
    case ErrorCode::kTooManyConnections:
    case ErrorCode::kBadGateway:
    case ErrorCode::kUnavailable:
    case ErrorCode::kNodeUnreachable:
      return "unavailable";
    case ErrorCode::kNotImplemented:
      return "unimplemented";
    case ErrorCode::kSandboxSetupFailed:
    case ErrorCode::kInternal:
      return "internal";
  }
  return "unknown";
}

http::status ConnectStatus(std::string_view code) {
  if (code == "invalid_argument" || code == "failed_precondition" || code == "out_of_range") {
    return http::status::bad_request;
  }
  if (code == "unauthenticated") return http::status::unauthorized;
  if (code == "permission_denied") return http::status::forbidden;
  if (code == "not_found") return http::status::not_found;
  if (code == "already_exists" || code == "aborted") return http::status::conflict;
  if (code == "resource_exhausted") return http::status::too_many_requests;
  if (code == "deadline_exceeded") return http::status::gateway_timeout;
  if (code == "unimplemented") return http::status::not_implemented;
  if (code == "unavailable") return http::status::service_unavailable;
  return http::status::internal_server_error;
}

Error SandboxGone(std::string_view id) {
  // The SDKs look for "was not found" in this message.
  return Error{ErrorCode::kBadGateway, "The sandbox " + std::string(id) + " was not found"};
}

asio::awaitable<void> Fail(Context& ctx, const Error& error) {
  if (error.code == ErrorCode::kBadGateway) {
    json::object body;
    body["sandboxId"] = ctx.Header("E2b-Sandbox-Id");
    body["message"] = error.message;
    body["code"] = 502;
    return Reply(ctx, http::status::bad_gateway, json::serialize(body),
                 "application/json; charset=utf-8");
  }
  if (ctx.dialect == Dialect::kConnect) {
    LogFailure(ctx, error, sandstream::http::StatusFor(error.code));
    return ReplyConnectError(ctx, ConnectCode(error.code), error.message);
  }
  const http::status status = sandstream::http::StatusFor(error.code);
  LogFailure(ctx, error, status);
  return Fail(ctx, status, error.message);
}

asio::awaitable<void> Fail(Context& ctx, http::status status, std::string message) {
  json::object body;
  body["code"] = static_cast<int>(status);
  body["message"] = std::move(message);
  return Reply(ctx, status, json::serialize(body), "application/json; charset=utf-8");
}

asio::awaitable<void> FailConnect(Context& ctx, std::string_view connect_code,
                                  std::string message) {
  return ReplyConnectError(ctx, connect_code, message);
}

asio::awaitable<void> ReplyMessage(Context& ctx, const json::object& message) {
  return Reply(ctx, http::status::ok, json::serialize(message), "application/json");
}

bool IsStreamingCall(const Context& ctx) {
  return ctx.Header(http::field::content_type).starts_with("application/connect+");
}

Result<json::object> RequestMessage(const Context& ctx) {
  const std::string_view type = ctx.Header(http::field::content_type);
  std::string_view text = ctx.req.body();
  if (IsStreamingCall(ctx)) {
    if (!type.starts_with(kConnectJson)) {
      return Error{
          ErrorCode::kUnsupportedMediaType,
          "only the JSON codec is served (application/connect+json), not " + std::string(type)};
    }
    if (text.size() < 5) return Malformed("the request has no message envelope");
    if (text[0] != 0)
      return Malformed("compressed or end-of-stream request envelopes are not served");
    const auto* b = reinterpret_cast<const unsigned char*>(text.data());
    const uint32_t length =
        (uint32_t{b[1]} << 24) | (uint32_t{b[2]} << 16) | (uint32_t{b[3]} << 8) | uint32_t{b[4]};
    if (text.size() - 5 < length) return Malformed("the request's envelope is cut short");
    text = text.substr(5, length);
  } else if (!type.empty() && !type.starts_with("application/json")) {
    return Error{ErrorCode::kUnsupportedMediaType,
                 "only the JSON codec is served (application/json), not " + std::string(type)};
  }
  if (text.empty()) return json::object();
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) return Malformed("the request message is not a JSON object");
  return std::move(v.as_object());
}

void AppendEnvelope(std::string& out, std::string_view json, bool end_of_stream) {
  const auto n = static_cast<uint32_t>(json.size());
  out.push_back(static_cast<char>(end_of_stream ? 0x02 : 0x00));
  out.push_back(static_cast<char>((n >> 24) & 0xff));
  out.push_back(static_cast<char>((n >> 16) & 0xff));
  out.push_back(static_cast<char>((n >> 8) & 0xff));
  out.push_back(static_cast<char>(n & 0xff));
  out.append(json);
}

const json::value* Field(const json::object& o, std::string_view json_name,
                         std::string_view proto_name) {
  const json::value* v = o.if_contains(json_name);
  if ((!v || v->is_null()) && !proto_name.empty()) v = o.if_contains(proto_name);
  return v && !v->is_null() ? v : nullptr;
}

Result<std::optional<std::string>> OptString(const json::object& o, std::string_view json_name,
                                             std::string_view proto_name) {
  const json::value* v = Field(o, json_name, proto_name);
  if (!v) return std::optional<std::string>();
  if (!v->is_string()) return Malformed(Named(json_name) + " must be a string");
  return std::optional<std::string>(std::string(v->as_string()));
}

Result<std::optional<bool>> OptBool(const json::object& o, std::string_view json_name,
                                    std::string_view proto_name) {
  const json::value* v = Field(o, json_name, proto_name);
  if (!v) return std::optional<bool>();
  if (!v->is_bool()) return Malformed(Named(json_name) + " must be true or false");
  return std::optional<bool>(v->as_bool());
}

Result<std::optional<int64_t>> OptInt(const json::object& o, std::string_view json_name,
                                      std::string_view proto_name, int64_t min, int64_t max) {
  const json::value* v = Field(o, json_name, proto_name);
  if (!v) return std::optional<int64_t>();
  int64_t n = 0;
  bool ok = false;
  if (v->is_int64()) {
    n = v->as_int64();
    ok = true;
  } else if (v->is_uint64()) {
    ok = v->as_uint64() <= static_cast<uint64_t>(INT64_MAX);
    n = static_cast<int64_t>(v->as_uint64());
  } else if (v->is_string()) {
    const std::string_view s = v->as_string();
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    ok = !s.empty() && ec == std::errc() && end == s.data() + s.size();
  }
  if (!ok || n < min || n > max) {
    return Malformed(Named(json_name) + " must be a whole number from " + std::to_string(min) +
                     " to " + std::to_string(max));
  }
  return std::optional<int64_t>(n);
}

Result<std::string> DecodeBytes(std::string_view text, std::string_view field) {
  std::string standard(text);
  for (char& c : standard) {
    if (c == '-') c = '+';
    if (c == '_') c = '/';
  }
  while (standard.size() % 4 != 0) standard.push_back('=');
  auto bytes = DecodeBase64(standard);
  if (!bytes) return Malformed(std::string(field) + " must be base64");
  return std::move(*bytes);
}

std::string Timestamp(SystemTime t) {
  return FormatRfc3339(t);
}

ConnectStream::ConnectStream(Context& ctx, std::string keepalive)
    : response_(ctx, kConnectJson),
      keepalive_(ctx.server.options().keepalive),
      keepalive_message_(std::move(keepalive)) {
  // The SDKs ask for a keepalive this often (Keepalive-Ping-Interval, seconds).
  const std::string_view asked = ctx.Header("Keepalive-Ping-Interval");
  uint32_t seconds = 0;
  auto [end, ec] = std::from_chars(asked.data(), asked.data() + asked.size(), seconds);
  if (!asked.empty() && ec == std::errc() && end == asked.data() + asked.size() && seconds > 0) {
    keepalive_ = std::chrono::seconds(std::min<uint32_t>(seconds, 3600));
  }
}

void ConnectStream::Send(const json::object& message) {
  AppendEnvelope(response_.out(), json::serialize(message));
}

asio::awaitable<void> ConnectStream::End(StreamEnd end, const std::optional<Error>& error) {
  json::object last;
  if (end == StreamEnd::kStopping) {
    last["error"] = ErrorObject(response_.StopReason());
  } else if (error) {
    last["error"] = ErrorObject(*error);
  }
  AppendEnvelope(response_.out(), json::serialize(last), true);
  co_await response_.Close(end);
}

}  // namespace sandstream::api::e2b
