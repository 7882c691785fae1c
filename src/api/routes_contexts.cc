// Code interpreter contexts: create, list, get, delete, restart, and run a cell (SSE of its
// events, or one JSON document when the client accepts only JSON).
#include <boost/json.hpp>

#include "api/lookup.h"
#include "api/request.h"
#include "api/routes.h"
#include "api/sse.h"
#include "api/stream.h"
#include "service/contexts.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

Error Invalid(std::string message) { return Error{ErrorCode::kInvalidRequest, std::move(message)}; }

Result<ContextRequest> ParseContextRequest(const json::object& body) {
  ContextRequest r;
  if (const json::value* lang = body.if_contains("language"); lang && !lang->is_null()) {
    auto parsed = lang->is_string() ? ParseLanguage(lang->as_string()) : std::nullopt;
    if (!parsed) return Invalid("language must be \"python\", \"javascript\" or \"bash\"");
    r.language = *parsed;
  }
  if (const json::value* cwd = body.if_contains("cwd"); cwd && !cwd->is_null()) {
    if (!cwd->is_string() || !cwd->as_string().starts_with("/")) return Invalid("cwd must be an absolute path");
    r.cwd = std::string(cwd->as_string());
  }
  if (const json::value* env = body.if_contains("env"); env && !env->is_null()) {
    if (!env->is_object()) return Invalid("env must be an object of strings");
    for (const auto& [k, v] : env->as_object()) {
      if (!v.is_string()) return Invalid("env." + std::string(k) + " must be a string");
      if (k.empty() || k.find('=') != json::string_view::npos) {
        return Invalid("env has an invalid name '" + std::string(k) + "'");
      }
      r.env[std::string(k)] = std::string(v.as_string());
    }
  }
  return r;
}

Result<std::shared_ptr<CodeContext>> FindContext(Context& ctx, SandboxEntry& sb) {
  auto it = sb.contexts.find(ctx.params.at(1));
  if (it == sb.contexts.end()) {
    return Error{ErrorCode::kNotFound,
                 "no code context '" + ctx.params.at(1) + "' in sandbox '" + sb.id + "'"};
  }
  return it->second;
}

std::pair<std::string_view, std::string_view> SplitEntry(const std::string& data) {
  const size_t nl = data.find('\n');
  if (nl == std::string::npos) return {data, "{}"};
  return {std::string_view(data).substr(0, nl), std::string_view(data).substr(nl + 1)};
}

// Wakes a waiter once the run has ended.
class EndWaiter : public OutputLog::Listener {
 public:
  EndWaiter(OutputLog& log, const asio::any_io_executor& ex) : log_(log), signal_(ex) {
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
  OutputLog& log_;
  AsyncSignal signal_;
};

// The whole run as one document: {"execution_count", "results", "logs", "error", "exit"}.
json::object RunJson(const CellRun& run, const OutputLog& log) {
  json::array results;
  json::array out;
  json::array err;
  json::value error = nullptr;
  json::value exit = nullptr;
  for (const LogEntry& e : log.entries()) {
    auto [name, text] = SplitEntry(e.data);
    boost::system::error_code ec;
    json::value data = json::parse(text, ec);
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
  auto context = sandstream::CreateContext(ctx.service, **sb, std::move(*req));
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
  auto context = FindContext(ctx, **sb);
  if (!context) co_return co_await ReplyError(ctx, context.error());
  co_await ReplyJson(ctx, http::status::ok, (*context)->Json());
}

asio::awaitable<void> DeleteContext(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  if (auto r = sandstream::DeleteContext(**sb, ctx.params.at(1)); !r) {
    co_return co_await ReplyError(ctx, r.error());
  }
  co_await ReplyEmpty(ctx, http::status::no_content);
}

asio::awaitable<void> RestartContext(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto context = FindContext(ctx, **sb);
  if (!context) co_return co_await ReplyError(ctx, context.error());
  auto keep = *context;
  auto r = co_await keep->Restart(ctx.service);
  if (!r) co_return co_await ReplyError(ctx, r.error());
  co_await ReplyJson(ctx, http::status::ok, keep->Json());
}

asio::awaitable<void> RunCode(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto context = FindContext(ctx, **sb);
  if (!context) co_return co_await ReplyError(ctx, context.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  const json::value* code = body->if_contains("code");
  if (!code || !code->is_string()) {
    co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest, "code must be a string");
  }
  const auto& opts = ctx.service.options();
  double timeout = opts.exec_default_timeout_seconds > 0 ? opts.exec_default_timeout_seconds
                                                         : opts.max_timeout_seconds;
  if (const json::value* t = body->if_contains("timeout_seconds"); t && !t->is_null()) {
    if (!t->is_number() || !(t->to_number<double>() > 0) ||
        t->to_number<double>() > opts.max_timeout_seconds) {
      co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest,
                                    "timeout_seconds must be greater than 0 and at most " +
                                        std::to_string(static_cast<int64_t>(opts.max_timeout_seconds)));
    }
    timeout = t->to_number<double>();
  }
  auto keep = *context;
  auto run = keep->Submit(ctx.service, std::string(code->as_string()), timeout);

  const std::string_view accept = ctx.Header(http::field::accept);
  if (accept.find("application/json") != std::string_view::npos &&
      accept.find("text/event-stream") == std::string_view::npos) {
    EndWaiter waiter(run->log(), ctx.stream.get_executor());
    co_await waiter.Wait();
    co_return co_await ReplyJson(ctx, http::status::ok, RunJson(*run, run->log()));
  }
  StreamSource source;
  source.log = &run->log();
  source.owner = run;
  source.render = [](std::string& out, const LogEntry& e) {
    auto [name, data] = SplitEntry(e.data);
    sse::AppendEvent(out, e.seq, name, data);
  };
  const CursorOptions cursor{0, true};
  co_await ServeStream(ctx, std::move(source), cursor);
}

}  // namespace sandstream::api
