// envd's filesystem.Filesystem service over the sandbox's files (SandboxFs).
#include "api/e2b/connect.h"
#include "api/e2b/routes.h"

namespace sandstream::api::e2b {
namespace asio = boost::asio;

asio::awaitable<void> FilesystemRpc(Context& ctx) {
  auto sb = EnvdSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  co_await FailConnect(ctx, "unimplemented",
                       "filesystem.Filesystem/" + ctx.params.at(0) + " is not served yet");
}

}  // namespace sandstream::api::e2b
