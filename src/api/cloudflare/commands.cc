// POST /api/execute and /api/execute/stream: exec and exec/stream in a session the caller
// names, answered as Cloudflare's ExecResult and ExecEvent stream.
#include <boost/json.hpp>

#include "api/cloudflare/errors.h"
#include "api/cloudflare/routes.h"
#include "api/cloudflare/wire.h"
#include "api/common/exec.h"
#include "api/common/lookup.h"
#include "api/stream.h"
#include "base/clock.h"

namespace sandstream::api::cloudflare {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// Starts the command of an ExecuteRequest, in its session (made on first use) when it names
// one. `session_id` gets the session's id.
asio::awaitable<Result<Started>> StartExecute(Context& ctx, std::string& session_id) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return std::move(sb).error();
  auto request = ParseBody(ctx);
  if (!request) co_return std::move(request).error();
  auto body = CommandBody(*request);
  if (!body) co_return std::move(body).error();
  auto session = StringField(*request, "sessionId");
  if (!session) co_return std::move(session).error();
  if (*session) {
    auto made = co_await EnsureSession(ctx, **sb, **session);
    if (!made) co_return std::move(made).error();
    (*body)["session"] = **session;
    session_id = **session;
  }
  co_return co_await StartCommand(ctx, *body);
}

}  // namespace

asio::awaitable<void> Execute(Context& ctx) {
  const auto t0 = SteadyNow();
  std::string session;
  auto started = co_await StartExecute(ctx, session);
  if (!started) co_return co_await ReplyError(ctx, started.error());
  auto process = started->process;
  Collected output = co_await CollectOutput(ctx, process, sse::Encoding::kUtf8);
  const ExitRecord& exit = *process->exit();
  // A command that fails is an answer, not an error: `success` says how it ended.
  json::object body;
  body["exitCode"] = exit.exit_code;
  body["stdout"] = std::move(output.stdout_text);
  body["stderr"] = std::move(output.stderr_text);
  body["command"] = process->spec().cmd;
  body["duration"] = exit.duration_ms;
  body["processId"] = process->id();
  if (!session.empty()) body["sessionId"] = session;
  ctx.service.metrics().exec_duration.Observe(
      std::chrono::duration<double>(SteadyNow() - t0).count());
  co_await ReplyOk(ctx, std::move(body), exit.exit_code == 0);
}

asio::awaitable<void> ExecuteStream(Context& ctx) {
  // Checked before the command starts: a refused request must not run it.
  auto after = ResumePoint(ctx, 0);
  if (!after) co_return co_await ReplyError(ctx, after.error());
  std::string session;
  auto started = co_await StartExecute(ctx, session);
  if (!started) co_return co_await ReplyError(ctx, started.error());
  OutputStream stream;
  stream.process = started->process;
  stream.format = sse::Format::kCloudflare;
  stream.kind = sse::Kind::kExec;
  stream.after_seq = *after;
  stream.flow = started->request.flow;
  co_await ServeStream(ctx, stream);
}

}  // namespace sandstream::api::cloudflare
