// Persistent shell sessions: create, list, get, delete. Exec's `session` field:
// common/session_exec.cc.
#include "service/sessions.h"

#include <boost/json.hpp>

#include "api/common/lookup.h"
#include "api/request.h"
#include "api/routes/routes.h"
#include "base/ids.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;

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
