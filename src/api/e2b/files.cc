// envd's HTTP routes: /health, and /files (downloads and uploads).
#include "api/e2b/connect.h"
#include "api/e2b/routes.h"

namespace sandstream::api::e2b {
namespace asio = boost::asio;

asio::awaitable<void> Health(Context& ctx) {
  // A sandbox that is gone answers as E2B's edge does (502): the SDKs' is_running() is false.
  auto sb = EnvdSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  co_await ReplyEmpty(ctx, http::status::no_content);
}

asio::awaitable<void> ReadFile(Context& ctx) {
  auto sb = EnvdSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  co_await ReplyError(ctx, ErrorCode::kNotFound, "GET /files is not served yet");
}

asio::awaitable<void> WriteFiles(Context& ctx) {
  auto sb = EnvdSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  co_await ReplyError(ctx, ErrorCode::kNotFound, "POST /files is not served yet");
}

}  // namespace sandstream::api::e2b
