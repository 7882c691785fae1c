// Background processes: start, list, get, logs (JSON or SSE), stdin, signal, kill, wait.
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "api/common/lookup.h"
#include "api/request.h"
#include "api/routes/routes.h"
#include "api/stream.h"
#include "base/base64.h"
#include "base/timer.h"
#include "base/utf8.h"
#include "platform/signals.h"
#include "service/codec.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;
using namespace asio::experimental::awaitable_operators;

namespace {

std::string EncodeChunk(std::string_view data, sse::Encoding encoding) {
  if (encoding == sse::Encoding::kBase64) return Base64(data);
  std::string out;
  AppendSanitizedUtf8(out, data);
  return out;
}

}  // namespace

asio::awaitable<void> StartProcess(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  auto req = ParseCommand(ctx, *body, **sb, CommandKind::kBackground);
  if (!req) co_return co_await ReplyError(ctx, req.error());
  Result<Service::Started> p = co_await ctx.service.StartProcess((*sb)->id, std::move(req->spec));
  if (!p) co_return co_await ReplyError(ctx, p.error());
  const auto status = p->attached ? http::status::ok : http::status::created;
  co_await ReplyJson(ctx, status, ProcessJson(*p->process));
}

asio::awaitable<void> ListProcesses(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  std::optional<ProcessStatus> filter;
  if (auto status = ctx.Query("status")) {
    if (*status == "running")
      filter = ProcessStatus::kRunning;
    else if (*status == "exited")
      filter = ProcessStatus::kExited;
    else
      co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest,
                                    "status must be \"running\" or \"exited\"");
  }
  json::array items;
  for (const auto& p : (*sb)->processes) {
    if (!filter || p->status() == *filter) items.push_back(ProcessJson(*p));
  }
  json::object body;
  body["processes"] = std::move(items);
  co_await ReplyJson(ctx, http::status::ok, body);
}

asio::awaitable<void> GetProcess(Context& ctx) {
  auto p = FindProcess(ctx);
  if (!p) co_return co_await ReplyError(ctx, p.error());
  co_await ReplyJson(ctx, http::status::ok, ProcessJson(**p));
}

asio::awaitable<void> KillProcess(Context& ctx) {
  auto p = FindProcess(ctx);
  if (!p) co_return co_await ReplyError(ctx, p.error());
  auto process = *p;
  process->Kill(ExitReason::kKilled);
  co_await process->WaitExit();
  co_await ReplyJson(ctx, http::status::ok, ProcessJson(*process));
}

asio::awaitable<void> ProcessLogs(Context& ctx) {
  auto p = FindProcess(ctx);
  if (!p) co_return co_await ReplyError(ctx, p.error());
  auto process = *p;
  auto format = FormatFromQuery(ctx);
  if (!format) co_return co_await ReplyError(ctx, format.error());
  auto encoding = EncodingFromQuery(ctx);
  if (!encoding) co_return co_await ReplyError(ctx, encoding.error());
  // A follower does not hold the process back unless it asks to (?flow=wait).
  auto flow = FlowFromQuery(ctx, Flow::kSkip);
  if (!flow) co_return co_await ReplyError(ctx, flow.error());
  auto after = StartPoint(ctx, process->log(), 0);
  if (!after) co_return co_await ReplyError(ctx, after.error());
  const uint64_t start = *after;
  auto follow = ctx.QueryFlag("follow");
  if (!follow) co_return co_await ReplyError(ctx, follow.error());

  if (!WantsStream(ctx, *follow)) {
    auto slice = process->log().Read(start, UINT64_MAX);
    json::array chunks;
    std::string out, err;
    for (const LogEntry* e : slice.entries) {
      if (e->kind != EntryKind::kStdout && e->kind != EntryKind::kStderr) continue;
      const bool is_out = e->kind == EntryKind::kStdout;
      (is_out ? out : err) += e->data;
      chunks.push_back(json::object{{"seq", e->seq},
                                    {"stream", is_out ? "stdout" : "stderr"},
                                    {"data", EncodeChunk(e->data, *encoding)}});
    }
    json::value gap = nullptr;
    if (slice.gap) {
      gap = json::object{{"from_seq", slice.gap->from_seq},
                         {"to_seq", slice.gap->to_seq},
                         {"bytes", slice.gap->bytes ? json::value(*slice.gap->bytes) : nullptr}};
    }
    json::object body;
    body["process_id"] = process->id();
    body["chunks"] = std::move(chunks);
    body["stdout"] = EncodeChunk(out, *encoding);
    body["stderr"] = EncodeChunk(err, *encoding);
    body["next_seq"] = process->log().next_seq();
    body["gap"] = std::move(gap);
    body["exit"] = ExitJson(process->exit());
    co_return co_await ReplyJson(ctx, http::status::ok, body);
  }

  OutputStream stream;
  stream.process = process;
  stream.format = *format;
  stream.kind = sse::Kind::kLog;
  stream.encoding = *encoding;
  stream.after_seq = start;
  stream.follow = *follow;
  stream.flow = *flow;
  co_await ServeStream(ctx, stream);
}

asio::awaitable<void> ProcessStdin(Context& ctx) {
  auto p = FindProcess(ctx);
  if (!p) co_return co_await ReplyError(ctx, p.error());
  auto process = *p;
  std::string data;
  auto eof_query = ctx.QueryFlag("eof");
  if (!eof_query) co_return co_await ReplyError(ctx, eof_query.error());
  bool eof = *eof_query;
  const std::string_view type = ctx.Header(http::field::content_type);
  if (type.starts_with("application/json")) {
    auto body = ParseBody(ctx);
    if (!body) co_return co_await ReplyError(ctx, body.error());
    const json::value* d = body->if_contains("data");
    if (d && !d->is_null() && !d->is_string()) {
      co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest, "data must be a string");
    }
    if (d && d->is_string()) data = std::string(d->as_string());
    const json::value* enc = body->if_contains("encoding");
    if (enc && !enc->is_null() && !enc->is_string()) {
      co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest, "encoding must be a string");
    }
    auto encoding = enc && enc->is_string() ? ParseEncoding(std::string_view(enc->as_string()))
                                            : Result<sse::Encoding>(sse::Encoding::kUtf8);
    if (!encoding) co_return co_await ReplyError(ctx, encoding.error());
    if (*encoding == sse::Encoding::kBase64) {
      auto decoded = DecodeBase64(data);
      if (!decoded) {
        co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest, "data is not valid base64");
      }
      data = std::move(*decoded);
    }
    if (const json::value* e = body->if_contains("eof"); e && !e->is_null()) {
      if (!e->is_bool()) {
        co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest, "eof must be true or false");
      }
      eof = eof || e->as_bool();
    }
  } else if (type.empty() || type.starts_with("application/octet-stream") ||
             type.starts_with("text/plain")) {
    data = std::move(ctx.req.body());
  } else {
    co_return co_await ReplyError(
        ctx, ErrorCode::kUnsupportedMediaType,
        "stdin takes application/octet-stream or application/json, not " + std::string(type));
  }
  size_t written = 0;
  if (!data.empty()) {
    auto w = co_await process->WriteStdin(std::move(data));
    if (!w) co_return co_await ReplyError(ctx, w.error());
    written = *w;
  } else if (!process->stdin_open() || process->status() != ProcessStatus::kRunning) {
    co_return co_await ReplyError(ctx, ErrorCode::kConflict,
                                  "stdin of " + process->id() + " is closed");
  }
  if (eof) (void)process->CloseStdin();
  json::object body;
  body["written"] = written;
  co_await ReplyJson(ctx, http::status::ok, body);
}

asio::awaitable<void> SignalProcess(Context& ctx) {
  auto p = FindProcess(ctx);
  if (!p) co_return co_await ReplyError(ctx, p.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  const json::value* s = body->if_contains("signal");
  std::optional<int> sig;
  if (s && s->is_string())
    sig = ParseSignal(s->as_string());
  else if (s && s->is_int64())
    sig = ParseSignal(std::to_string(s->as_int64()));
  if (!sig) {
    co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest,
                                  "signal must be a signal name (\"TERM\") or number");
  }
  bool group = true;
  if (const json::value* g = body->if_contains("group"); g && !g->is_null()) {
    if (!g->is_bool()) {
      co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest, "group must be true or false");
    }
    group = g->as_bool();
  }
  if (auto r = (*p)->Signal(*sig, group); !r) co_return co_await ReplyError(ctx, r.error());
  co_await ReplyJson(ctx, http::status::ok, ProcessJson(**p));
}

asio::awaitable<void> WaitProcess(Context& ctx) {
  auto p = FindProcess(ctx);
  if (!p) co_return co_await ReplyError(ctx, p.error());
  auto process = *p;
  const double max = ctx.service.options().max_timeout_seconds;
  auto timeout_or = TimeoutFromQuery(ctx, max, 1e9);
  if (!timeout_or) co_return co_await ReplyError(ctx, timeout_or.error());
  const double timeout = *timeout_or;
  if (process->status() == ProcessStatus::kRunning) {
    Timer timer(ctx.stream.get_executor());
    timer.expires_after(std::chrono::duration_cast<SteadyClock::duration>(
        std::chrono::duration<double>(std::min(timeout, 1e9))));
    co_await (process->WaitExit() || timer.async_wait(asio::as_tuple(asio::use_awaitable)));
  }
  if (process->status() == ProcessStatus::kRunning) {
    co_return co_await ReplyError(ctx, ErrorCode::kTimeout,
                                  "process " + process->id() + " is still running");
  }
  co_await ReplyJson(ctx, http::status::ok, ProcessJson(*process));
}

}  // namespace sandstream::api
