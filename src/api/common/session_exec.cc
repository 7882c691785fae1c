#include "api/common/session_exec.h"

#include <boost/json.hpp>

#include "service/sessions.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;

asio::awaitable<Result<std::shared_ptr<Process>>> StartInSession(Context& ctx,
                                                                 const SandboxEntry& sb,
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

}  // namespace sandstream::api
