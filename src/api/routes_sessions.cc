// Persistent shell sessions: create, list, get, delete; and exec's `session` field.
#include <boost/json.hpp>

#include "api/lookup.h"
#include "api/request.h"
#include "api/routes.h"
#include "api/session_exec.h"
#include "base/ids.h"
#include "service/sessions.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;

asio::awaitable<Result<std::shared_ptr<Process>>> StartInSession(Context& ctx, const SandboxEntry& sb,
                                                                 const json::object& body,
                                                                 CommandRequest& req) {
  const json::value& s = body.at("session");
  if (!s.is_string()) co_return Invalid("session must be a string (a session id)");
  auto it = sb.sessions.find(std::string_view(s.as_string()));
  if (it == sb.sessions.end()) {
    co_return Error{ErrorCode::kNotFound,
                    "no session '" + std::string(s.as_string()) + "' in sandbox '" + sb.id + "'"};
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
  auto session = co_await Session::Create(ctx.service, (*sb)->id, std::move(*req));
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
  auto session = FindIn(ctx, **sb, (*sb)->sessions, "session");
  if (!session) co_return co_await ReplyError(ctx, session.error());
  co_await ReplyJson(ctx, http::status::ok, SessionJson(**session));
}

asio::awaitable<void> DeleteSession(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  if (auto r = Session::Delete(ctx.service, (*sb)->id, ctx.params.at(1)); !r) {
    co_return co_await ReplyError(ctx, r.error());
  }
  co_await ReplyEmpty(ctx, http::status::no_content);
}

}  // namespace sandstream::api
