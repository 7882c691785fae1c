#include "api/common/cells.h"

#include <boost/json.hpp>

#include "service/service.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;

void CopyFormats(const json::object& bundle, json::object& out) {
  for (const auto& [mime, field] : kResultFormats) {
    if (const json::value* v = bundle.if_contains(mime)) out[field] = *v;
  }
}

asio::awaitable<Result<std::shared_ptr<CodeContext>>> DefaultContext(Context& ctx,
                                                                     const SandboxEntry& sb,
                                                                     Language language) {
  ContextRequest req;
  req.language = language;
  req.id = "default-" + std::string(LanguageName(language));
  if (auto it = sb.contexts.find(req.id); it != sb.contexts.end()) co_return it->second;
  const std::string id = req.id;
  const std::string sandbox_id = sb.id;
  Result<std::shared_ptr<CodeContext>> made =
      co_await CodeContext::Create(ctx.service, sandbox_id, std::move(req));
  if (made || made.error().code != ErrorCode::kConflict) co_return made;
  // Made by another request meanwhile: that one.
  if (const SandboxEntry* now = ctx.service.Find(sandbox_id)) {
    if (auto it = now->contexts.find(id); it != now->contexts.end()) co_return it->second;
  }
  co_return made;
}

}  // namespace sandstream::api
