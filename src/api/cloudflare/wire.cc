#include "api/cloudflare/wire.h"

#include <boost/json.hpp>

#include "base/clock.h"
#include "base/ids.h"
#include "service/sessions.h"

namespace sandstream::api::cloudflare {
namespace json = boost::json;
namespace asio = boost::asio;

asio::awaitable<void> ReplyOk(Context& ctx, json::object body, bool success) {
  body["success"] = success;
  body["timestamp"] = FormatRfc3339(SystemNow());
  return ReplyJson(ctx, http::status::ok, body);
}

Result<std::optional<std::string>> StringField(const json::object& body, std::string_view key) {
  const json::value* v = body.if_contains(key);
  if (!v || v->is_null()) return std::optional<std::string>();
  if (!v->is_string()) return Invalid(std::string(key) + " must be a string");
  return std::optional<std::string>(std::string(v->as_string()));
}

Result<std::string> RequiredString(const json::object& body, std::string_view key) {
  auto v = StringField(body, key);
  if (!v) return std::move(v).error();
  if (!*v || (*v)->empty()) return Invalid(std::string(key) + " is required");
  return std::move(**v);
}

Result<json::object> CommandBody(const json::object& request) {
  auto command = RequiredString(request, "command");
  if (!command) return std::move(command).error();
  json::object body;
  body["cmd"] = *command;
  for (const auto& [from, to] : {std::pair<std::string_view, std::string_view>{"env", "env"},
                                 {"cwd", "cwd"},
                                 {"processId", "id"}}) {
    if (const json::value* v = request.if_contains(from)) body[to] = *v;
  }
  if (const json::value* ms = request.if_contains("timeoutMs"); ms && !ms->is_null()) {
    if (!ms->is_number()) return Invalid("timeoutMs must be a number");
    body["timeout_seconds"] = ms->to_number<double>() / 1000;
  }
  return body;
}

asio::awaitable<Result<void>> EnsureSession(Context& ctx, const SandboxEntry& sb, std::string id) {
  if (sb.sessions.contains(id)) co_return Result<void>();
  if (!IsValidClientId(id))
    co_return Invalid("sessionId must match [A-Za-z0-9][A-Za-z0-9_.-]{0,63}");
  SessionRequest req;
  req.id = id;
  auto made = co_await Session::Create(ctx.service, sb.id, std::move(req));
  // Another request may have made it meanwhile: that one is as good.
  if (!made && made.error().code == ErrorCode::kConflict) {
    const SandboxEntry* now = ctx.service.Find(sb.id);
    if (now && now->sessions.contains(id)) co_return Result<void>();
  }
  if (!made) co_return std::move(made).error();
  co_return Result<void>();
}

}  // namespace sandstream::api::cloudflare
