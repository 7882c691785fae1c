// /api/ping, /api/version and /api/session/*: the sandbox's health, the daemon's version, and
// sandstream sessions under the caller's ids.
#include <boost/json.hpp>

#include "api/cloudflare/errors.h"
#include "api/cloudflare/routes.h"
#include "api/cloudflare/wire.h"
#include "api/common/lookup.h"
#include "api/request.h"
#include "base/version.h"
#include "service/sessions.h"

namespace sandstream::api::cloudflare {
namespace asio = boost::asio;
namespace json = boost::json;

asio::awaitable<void> Ping(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  json::object body;
  body["status"] = "healthy";
  body["message"] = "pong";
  co_await ReplyOk(ctx, std::move(body));
}

asio::awaitable<void> Version(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  json::object body;
  body["version"] = kVersion;
  co_await ReplyOk(ctx, std::move(body));
}

asio::awaitable<void> CreateSession(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto request = ParseBody(ctx);
  if (!request) co_return co_await ReplyError(ctx, request.error());
  // Cloudflare's CreateSessionRequest: id, env, cwd; sandstream's session request has them.
  json::object body;
  for (const char* key : {"env", "cwd"}) {
    if (const json::value* v = request->if_contains(key)) body[key] = *v;
  }
  if (const json::value* id = request->if_contains("id")) body["id"] = *id;
  auto req = ParseSessionRequest(body);
  if (!req) co_return co_await Fail(ctx, req.error(), Subject::kSession);
  auto session = co_await Session::Create(ctx.service, (*sb)->id, std::move(*req));
  if (!session) co_return co_await Fail(ctx, session.error(), Subject::kSession);
  json::object out;
  out["id"] = (*session)->id();
  out["data"] = json::object{{"id", (*session)->id()}};
  out["message"] = "Session created";
  co_await ReplyOk(ctx, std::move(out));
}

asio::awaitable<void> DeleteSession(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto request = ParseBody(ctx);
  if (!request) co_return co_await ReplyError(ctx, request.error());
  auto id = RequiredString(*request, "sessionId");
  if (!id) co_return co_await ReplyError(ctx, id.error());
  if (auto r = Session::Delete(ctx.service, (*sb)->id, *id); !r) {
    co_return co_await Fail(ctx, r.error(), Subject::kSession, *id);
  }
  json::object out;
  out["sessionId"] = *id;
  co_await ReplyOk(ctx, std::move(out));
}

asio::awaitable<void> ListSessions(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  json::array ids;
  for (const auto& [id, session] : (*sb)->sessions) ids.emplace_back(id);
  json::object out;
  out["data"] = std::move(ids);
  co_await ReplyOk(ctx, std::move(out));
}

}  // namespace sandstream::api::cloudflare
