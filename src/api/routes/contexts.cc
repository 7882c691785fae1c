// Code interpreter contexts: create, list, get, delete, restart, run a cell, and read a
// remembered run again (SSE of its events, or one JSON document when the client accepts only
// JSON).
#include "service/contexts.h"

#include <charconv>

#include <boost/json.hpp>

#include "api/common/lookup.h"
#include "api/request.h"
#include "api/routes/routes.h"
#include "api/sse.h"
#include "api/stream.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// Wakes a waiter once the run has ended.
class EndWaiter : public EventLog::Listener {
 public:
  EndWaiter(EventLog& log, const asio::any_io_executor& ex) : log_(log), signal_(ex) {
    log_.AddListener(this);
  }
  ~EndWaiter() override { log_.RemoveListener(this); }
  void OnAppend() override {
    if (log_.ended()) signal_.Notify();
  }
  asio::awaitable<void> Wait() {
    while (!log_.ended()) co_await signal_.Wait();
  }

 private:
  EventLog& log_;
  AsyncSignal signal_;
};

// The whole run as one document: {"execution_count", "results", "logs", "error", "exit"}.
json::object RunJson(const CellRun& run, const EventLog& log) {
  json::array results;
  json::array out;
  json::array err;
  json::value error = nullptr;
  json::value exit = nullptr;
  for (const Event& e : log.entries()) {
    const std::string_view name = e.name;
    boost::system::error_code ec;
    json::value data = json::parse(e.data, ec);
    if (ec || !data.is_object()) continue;
    const json::object& o = data.as_object();
    if (name == "result") {
      results.push_back(o);
    } else if (name == "stdout" || name == "stderr") {
      (name == "stdout" ? out : err).push_back(o.contains("chunk") ? o.at("chunk") : "");
    } else if (name == "error") {
      error = o;
    } else if (name == "exit") {
      exit = o;
    }
  }
  json::object logs;
  logs["stdout"] = std::move(out);
  logs["stderr"] = std::move(err);
  json::object body;
  body["execution_count"] = run.number();
  body["results"] = std::move(results);
  body["logs"] = std::move(logs);
  body["error"] = std::move(error);
  body["exit"] = std::move(exit);
  return body;
}

}  // namespace

asio::awaitable<void> CreateContext(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  auto req = ParseContextRequest(*body);
  if (!req) co_return co_await ReplyError(ctx, req.error());
  Result<std::shared_ptr<CodeContext>> context =
      co_await CodeContext::Create(ctx.service, (*sb)->id, std::move(*req));
  if (!context) co_return co_await ReplyError(ctx, context.error());
  co_await ReplyJson(ctx, http::status::created, (*context)->Json());
}

asio::awaitable<void> ListContexts(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  json::array items;
  for (const auto& [id, c] : (*sb)->contexts) items.push_back(c->Json());
  json::object body;
  body["contexts"] = std::move(items);
  co_await ReplyJson(ctx, http::status::ok, body);
}

asio::awaitable<void> GetContext(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto context = FindContext(**sb, ctx.params.at(1));
  if (!context) co_return co_await ReplyError(ctx, context.error());
  co_await ReplyJson(ctx, http::status::ok, (*context)->Json());
}

asio::awaitable<void> DeleteContext(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  if (auto r = CodeContext::Delete(ctx.service, (*sb)->id, ctx.params.at(1)); !r) {
    co_return co_await ReplyError(ctx, r.error());
  }
  co_await ReplyEmpty(ctx, http::status::no_content);
}

asio::awaitable<void> RestartContext(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto context = FindContext(**sb, ctx.params.at(1));
  if (!context) co_return co_await ReplyError(ctx, context.error());
  auto keep = *context;
  auto r = co_await keep->Restart(ctx.service);
  if (!r) co_return co_await ReplyError(ctx, r.error());
  co_await ReplyJson(ctx, http::status::ok, keep->Json());
}

namespace {

// A run's events from after the client's Last-Event-ID (or ?since=), live until it ends; or
// the whole run as one JSON document once it has ended.
asio::awaitable<void> ServeRun(Context& ctx, std::shared_ptr<CellRun> run, uint64_t after) {
  const std::string_view accept = ctx.Header(http::field::accept);
  if (accept.find("application/json") != std::string_view::npos &&
      accept.find("text/event-stream") == std::string_view::npos) {
    EndWaiter waiter(*run->log(), ctx.stream.get_executor());
    co_await waiter.Wait();
    co_return co_await ReplyJson(ctx, http::status::ok, RunJson(*run, *run->log()));
  }
  co_await ServeEvents(ctx, run->log(), after, true, RenderEvent);
}

}  // namespace

asio::awaitable<void> RunCode(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto context = FindContext(**sb, ctx.params.at(1));
  if (!context) co_return co_await ReplyError(ctx, context.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  auto cell = ParseCellRequest(ctx, *body);
  if (!cell) co_return co_await ReplyError(ctx, cell.error());
  // Every check before the cell is queued: a refused request must not run it.
  auto after = ResumePoint(ctx, 0);
  if (!after) co_return co_await ReplyError(ctx, after.error());
  auto keep = *context;
  auto run = keep->Submit(ctx.service, std::move(cell->code), cell->timeout_seconds,
                          std::move(cell->idempotency_key));
  if (!run) co_return co_await ReplyError(ctx, run.error());
  co_await ServeRun(ctx, std::move(*run), *after);
}

asio::awaitable<void> GetRun(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto context = FindContext(**sb, ctx.params.at(1));
  if (!context) co_return co_await ReplyError(ctx, context.error());
  auto after = ResumePoint(ctx, 0);
  if (!after) co_return co_await ReplyError(ctx, after.error());
  const std::string& text = ctx.params.at(2);
  uint64_t number = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  std::shared_ptr<CellRun> run;
  if (ec == std::errc() && ptr == text.data() + text.size()) run = (*context)->FindRun(number);
  if (!run) {
    const std::string message = "no run '" + text + "' in code context '" + ctx.params.at(1) +
                                "' (a context remembers its last runs, up to " +
                                std::to_string(CodeContext::kRememberedRuns) + ")";
    co_return co_await ReplyError(ctx, ErrorCode::kNotFound, message);
  }
  co_await ServeRun(ctx, std::move(run), *after);
}

}  // namespace sandstream::api
