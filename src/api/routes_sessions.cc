// Persistent shell sessions: create, list, get, delete; and exec's `session` field.
#include <boost/json.hpp>

#include "api/lookup.h"
#include "api/routes.h"
#include "api/session_exec.h"
#include "base/ids.h"
#include "service/sessions.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

Error Invalid(std::string message) { return Error{ErrorCode::kInvalidRequest, std::move(message)}; }

Result<SessionRequest> ParseSessionRequest(const json::object& body) {
  SessionRequest r;
  if (const json::value* id = body.if_contains("id"); id && !id->is_null()) {
    if (!id->is_string() || !IsValidClientId(id->as_string())) {
      return Invalid("id must match [A-Za-z0-9][A-Za-z0-9_.-]{0,63}");
    }
    r.id = std::string(id->as_string());
  }
  if (const json::value* cwd = body.if_contains("cwd"); cwd && !cwd->is_null()) {
    if (!cwd->is_string() || !cwd->as_string().starts_with("/")) return Invalid("cwd must be an absolute path");
    r.cwd = std::string(cwd->as_string());
  }
  if (const json::value* env = body.if_contains("env"); env && !env->is_null()) {
    if (!env->is_object()) return Invalid("env must be an object of strings");
    for (const auto& [k, v] : env->as_object()) {
      if (!v.is_string()) return Invalid("env." + std::string(k) + " must be a string");
      if (k.empty() || k.find('=') != json::string_view::npos) {
        return Invalid("env has an invalid name '" + std::string(k) + "'");
      }
      r.env[std::string(k)] = std::string(v.as_string());
    }
  }
  return r;
}

Result<std::shared_ptr<Session>> FindSession(Context& ctx, SandboxEntry& sb) {
  auto it = sb.sessions.find(ctx.params.at(1));
  if (it == sb.sessions.end()) {
    return Error{ErrorCode::kNotFound,
                 "no session '" + ctx.params.at(1) + "' in sandbox '" + sb.id + "'"};
  }
  return it->second;
}

}  // namespace

asio::awaitable<Result<std::shared_ptr<Process>>> StartInSession(Context& ctx, SandboxEntry& sb,
                                                                 const json::object& body,
                                                                 CommandRequest& req) {
  const json::value& s = body.at("session");
  if (!s.is_string()) co_return Invalid("session must be a string (a session id)");
  auto it = sb.sessions.find(std::string_view(s.as_string()));
  if (it == sb.sessions.end()) {
    co_return Error{ErrorCode::kNotFound, "no session '" + std::string(s.as_string()) +
                                              "' in sandbox '" + sb.id + "'"};
  }
  if (req.spec.as_root) co_return Invalid("session commands run as user; drop user: root");
  std::optional<std::string> call_cwd;
  if (const json::value* cwd = body.if_contains("cwd"); cwd && !cwd->is_null()) {
    call_cwd = req.spec.cwd;
  }
  auto session = it->second;
  auto env = req.env;
  co_return co_await session->Run(ctx.service, std::move(req.spec), std::move(env), call_cwd);
}

asio::awaitable<void> CreateSession(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  auto req = ParseSessionRequest(*body);
  if (!req) co_return co_await ReplyError(ctx, req.error());
  auto session = sandstream::CreateSession(ctx.service, **sb, std::move(*req));
  if (!session) co_return co_await ReplyError(ctx, session.error());
  co_await ReplyJson(ctx, http::status::created, SessionJson(**session));
}

asio::awaitable<void> ListSessions(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  json::array items;
  for (const auto& [id, s] : (*sb)->sessions) items.push_back(SessionJson(*s));
  json::object body;
  body["sessions"] = std::move(items);
  co_await ReplyJson(ctx, http::status::ok, body);
}

asio::awaitable<void> GetSession(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto session = FindSession(ctx, **sb);
  if (!session) co_return co_await ReplyError(ctx, session.error());
  co_await ReplyJson(ctx, http::status::ok, SessionJson(**session));
}

asio::awaitable<void> DeleteSession(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  if (auto r = sandstream::DeleteSession(**sb, ctx.params.at(1)); !r) {
    co_return co_await ReplyError(ctx, r.error());
  }
  co_await ReplyEmpty(ctx, http::status::no_content);
}

}  // namespace sandstream::api
