// POST exec (run to completion, buffered) and POST exec/stream (the same, as SSE).
#include "api/common/exec.h"

#include <boost/json.hpp>

#include "api/common/lookup.h"
#include "api/request.h"
#include "api/routes/routes.h"
#include "api/stream.h"
#include "service/codec.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// A missing sandbox is a 404 whatever the body holds.
asio::awaitable<Result<Started>> StartRequested(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return std::move(sb).error();
  auto body = ParseBody(ctx);
  if (!body) co_return std::move(body).error();
  co_return co_await StartCommand(ctx, *body);
}

}  // namespace

asio::awaitable<void> Exec(Context& ctx) {
  const auto t0 = SteadyNow();
  auto started = co_await StartRequested(ctx);
  if (!started) co_return co_await ReplyError(ctx, started.error());
  auto process = started->process;
  Collected output = co_await CollectOutput(ctx, process, started->request.encoding);
  const auto& exit = *process->exit();
  json::object body{{"process_id", process->id()},
                    {"stdout", std::move(output.stdout_text)},
                    {"stderr", std::move(output.stderr_text)},
                    {"truncated", output.truncated}};
  const json::value exit_json = ExitJson(exit);
  for (const auto& [k, v] : exit_json.as_object()) body[k] = v;
  ctx.service.metrics().exec_duration.Observe(
      std::chrono::duration<double>(SteadyNow() - t0).count());
  co_await ReplyJson(ctx, http::status::ok, body);
}

asio::awaitable<void> ExecStream(Context& ctx) {
  // Checked before the command starts: a refused request must not run it.
  auto after = ResumePoint(ctx, 0);
  if (!after) co_return co_await ReplyError(ctx, after.error());
  auto started = co_await StartRequested(ctx);
  if (!started) co_return co_await ReplyError(ctx, started.error());
  OutputStream stream;
  stream.process = started->process;
  stream.format = started->request.format;
  stream.encoding = started->request.encoding;
  stream.after_seq = *after;
  stream.flow = started->request.flow;
  co_await ServeStream(ctx, stream);
}

}  // namespace sandstream::api
