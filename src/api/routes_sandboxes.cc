// Sandboxes: create, list, get, delete, and their lifecycle journal as logs or events.
#include <boost/json.hpp>

#include "api/lookup.h"
#include "api/request.h"
#include "api/routes.h"
#include "api/stream.h"
#include "service/codec.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// The `/logs` view of a journal record: only what a person reads.
json::object LogLine(const json::object& record) {
  json::object line;
  for (const char* key : {"seq", "time", "level", "message"}) {
    if (auto* v = record.if_contains(key)) line[key] = *v;
  }
  return line;
}

asio::awaitable<void> Journal(Context& ctx, bool as_logs) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  std::shared_ptr<OutputLog> journal = (*sb)->journal;
  auto after = StartPoint(ctx, *journal, 0);
  if (!after) co_return co_await ReplyError(ctx, after.error());
  const uint64_t start = *after;

  if (!WantsStream(ctx)) {
    json::array items;
    for (const LogEntry* e : journal->Read(start, UINT64_MAX).entries) {
      if (e->kind != EntryKind::kStdout) continue;
      json::object record = json::parse(e->data).as_object();
      items.push_back(as_logs ? json::value(LogLine(record)) : json::value(std::move(record)));
    }
    json::object body;
    body[as_logs ? "logs" : "events"] = std::move(items);
    co_return co_await ReplyJson(ctx, http::status::ok, body);
  }

  StreamSource source;
  source.log = journal.get();
  source.owner = journal;
  source.render = [as_logs](std::string& out, const LogEntry& e) {
    if (e.kind != EntryKind::kStdout) return;  // the end marker of a deleted sandbox
    if (!as_logs) {
      const json::object record = json::parse(e.data).as_object();
      sse::AppendEvent(out, e.seq, record.at("type").as_string(), e.data);
      return;
    }
    sse::AppendEvent(out, e.seq, "log", json::serialize(LogLine(json::parse(e.data).as_object())));
  };
  const CursorOptions cursor{start, ctx.QueryFlag("follow")};
  co_await ServeStream(ctx, std::move(source), cursor);
}

}  // namespace

asio::awaitable<void> CreateSandbox(Context& ctx) {
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  auto req = ParseSandboxRequest(*body);
  if (!req) co_return co_await ReplyError(ctx, req.error());
  auto sb = ctx.service.CreateSandbox(std::move(*req));
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  co_await ReplyJson(ctx, http::status::created, SandboxJson(**sb));
}

asio::awaitable<void> ListSandboxes(Context& ctx) {
  json::array items;
  for (SandboxEntry* sb : ctx.service.List()) items.push_back(SandboxJson(*sb));
  json::object body;
  body["sandboxes"] = std::move(items);
  co_await ReplyJson(ctx, http::status::ok, body);
}

asio::awaitable<void> GetSandbox(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  co_await ReplyJson(ctx, http::status::ok, SandboxJson(**sb));
}

asio::awaitable<void> DeleteSandbox(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto deleted = co_await ctx.service.DeleteSandbox(ctx.params.at(0));
  if (!deleted) co_return co_await ReplyError(ctx, deleted.error());
  co_await ReplyEmpty(ctx, http::status::no_content);
}

asio::awaitable<void> SandboxLogs(Context& ctx) { co_await Journal(ctx, true); }
asio::awaitable<void> SandboxEvents(Context& ctx) { co_await Journal(ctx, false); }

}  // namespace sandstream::api
