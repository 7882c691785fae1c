// /api/process/*: sandstream's background processes as Cloudflare's process objects and
// LogEvent stream.
#include <boost/json.hpp>

#include "api/cloudflare/errors.h"
#include "api/cloudflare/routes.h"
#include "api/cloudflare/wire.h"
#include "api/common/lookup.h"
#include "api/request.h"
#include "api/stream.h"
#include "base/clock.h"
#include "base/utf8.h"
#include "service/contexts.h"

namespace sandstream::api::cloudflare {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// Cloudflare's ProcessStatus: running, completed (exit 0), killed, failed.
std::string_view StatusOf(const Process& p) {
  if (!p.exit()) return "running";
  if (p.exit()->reason == ExitReason::kKilled) return "killed";
  return p.exit()->exit_code == 0 ? "completed" : "failed";
}

json::object ProcessInfo(const Process& p) {
  json::object o;
  o["id"] = p.id();
  o["pid"] = p.pid();
  o["command"] = p.spec().cmd;
  o["status"] = StatusOf(p);
  o["startTime"] = FormatRfc3339(p.started_at());
  if (p.exit()) {
    o["endTime"] = FormatRfc3339(p.started_at() + std::chrono::milliseconds(p.exit()->duration_ms));
    o["exitCode"] = p.exit()->exit_code;
  }
  return o;
}

// The processes a Cloudflare client started or may see: not the terminals either.
std::vector<std::shared_ptr<Process>> UserProcesses(const SandboxEntry& sb) {
  std::vector<std::shared_ptr<Process>> out = ClientProcesses(sb);
  std::erase_if(out, [](const auto& p) { return p->spec().pty.has_value(); });
  return out;
}

// The process the route's second parameter names; a missing sandbox is not a missing process.
asio::awaitable<void> FailLookup(Context& ctx, const Error& error, const SandboxEntry* sb) {
  return Fail(ctx, error, sb ? Subject::kProcess : Subject::kAny, ctx.params.at(1));
}

}  // namespace

asio::awaitable<void> StartProcess(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto request = ParseBody(ctx);
  if (!request) co_return co_await ReplyError(ctx, request.error());
  auto body = CommandBody(*request);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  auto req = ParseCommand(ctx, *body, **sb, CommandKind::kBackground);
  if (!req) co_return co_await Fail(ctx, req.error(), Subject::kProcess);
  Result<Service::Started> p = co_await ctx.service.StartProcess((*sb)->id, std::move(req->spec));
  if (!p) co_return co_await Fail(ctx, p.error(), Subject::kProcess);
  json::object out;
  out["processId"] = p->process->id();
  out["pid"] = p->process->pid();
  out["command"] = p->process->spec().cmd;
  co_await ReplyOk(ctx, std::move(out));
}

asio::awaitable<void> ListProcesses(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  json::array items;
  for (const auto& p : UserProcesses(**sb)) items.push_back(ProcessInfo(*p));
  json::object out;
  out["processes"] = std::move(items);
  co_await ReplyOk(ctx, std::move(out));
}

asio::awaitable<void> GetProcess(Context& ctx) {
  auto p = FindProcess(ctx);
  if (!p) co_return co_await FailLookup(ctx, p.error(), ctx.service.Find(ctx.params.at(0)));
  json::object out;
  out["process"] = ProcessInfo(**p);
  co_await ReplyOk(ctx, std::move(out));
}

asio::awaitable<void> KillProcess(Context& ctx) {
  auto p = FindProcess(ctx);
  if (!p) co_return co_await FailLookup(ctx, p.error(), ctx.service.Find(ctx.params.at(0)));
  auto process = *p;
  process->Kill(ExitReason::kKilled);
  co_await process->WaitExit();
  json::object out;
  out["processId"] = process->id();
  out["signal"] = "SIGTERM";
  co_await ReplyOk(ctx, std::move(out));
}

asio::awaitable<void> KillAllProcesses(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  std::vector<std::shared_ptr<Process>> running;
  for (auto& p : UserProcesses(**sb)) {
    if (p->status() == ProcessStatus::kRunning) running.push_back(std::move(p));
  }
  // All are told first, then awaited: their grace periods run side by side.
  for (const auto& p : running) p->Kill(ExitReason::kKilled);
  for (const auto& p : running) co_await p->WaitExit();
  json::object out;
  out["cleanedCount"] = running.size();
  out["killedCount"] = running.size();
  co_await ReplyOk(ctx, std::move(out));
}

asio::awaitable<void> ProcessLogs(Context& ctx) {
  auto p = FindProcess(ctx);
  if (!p) co_return co_await FailLookup(ctx, p.error(), ctx.service.Find(ctx.params.at(0)));
  std::string out, err;
  for (const LogEntry* e : (*p)->log().Read(0, UINT64_MAX).entries) {
    if (e->kind == EntryKind::kStdout) AppendSanitizedUtf8(out, e->data);
    if (e->kind == EntryKind::kStderr) AppendSanitizedUtf8(err, e->data);
  }
  json::object body;
  body["processId"] = (*p)->id();
  body["stdout"] = out;
  body["stderr"] = err;
  co_await ReplyOk(ctx, std::move(body));
}

asio::awaitable<void> StreamProcessLogs(Context& ctx) {
  auto p = FindProcess(ctx);
  if (!p) co_return co_await FailLookup(ctx, p.error(), ctx.service.Find(ctx.params.at(0)));
  auto after = StartPoint(ctx, (*p)->log(), 0);
  if (!after) co_return co_await ReplyError(ctx, after.error());
  OutputStream stream;
  stream.process = *p;
  stream.format = sse::Format::kCloudflare;
  stream.kind = sse::Kind::kLog;
  stream.after_seq = *after;
  // A follower, as on processes/{id}/logs: it never holds the process back.
  stream.flow = Flow::kSkip;
  co_await ServeStream(ctx, stream);
}

}  // namespace sandstream::api::cloudflare
