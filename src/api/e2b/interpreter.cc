// The code interpreter of E2B's `e2b-code-interpreter` SDKs (its server listens on port 49999
// of E2B's sandboxes): /execute streams a cell's run as JSON lines, /contexts lists, makes,
// removes and restarts contexts. Served from sandstream's code contexts, for the sandbox the
// E2b-Sandbox-Id header names, with its access token (X-Access-Token on /execute; the SDKs
// send only E2B-Traffic-Access-Token on /contexts, which the control plane hands out as the
// same token).
#include <chrono>

#include <boost/json.hpp>

#include "api/common/cells.h"
#include "api/common/lookup.h"
#include "api/e2b/connect.h"
#include "api/e2b/routes.h"
#include "api/request.h"
#include "api/stream.h"
#include "process/cursor.h"

namespace sandstream::api::e2b {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// The language E2B's SDKs name, as sandstream's: none is python. R and Java, which E2B's
// template has kernels for, are refused by name.
Result<Language> LanguageOf(const json::object& body) {
  auto name = OptString(body, "language");
  if (!name) return std::move(name).error();
  if (!*name || (*name)->empty()) return Language::kPython;
  if (auto language = ParseLanguage(**name)) return *language;
  return Invalid("language '" + **name +
                 "' is not available: sandstream's code contexts run python, javascript, "
                 "typescript and bash");
}

json::object ContextJson(const CodeContext& context) {
  json::object o;
  o["id"] = context.id();
  o["language"] = LanguageName(context.language());
  o["cwd"] = context.cwd();
  return o;
}

// The body's code, context_id and language, with the context the cell runs in when named.
struct CellTarget {
  std::string code;
  std::optional<std::string> context_id;
  Language language = Language::kPython;
};

Result<CellTarget> TargetOf(const json::object& body) {
  CellTarget t;
  auto code = OptString(body, "code");
  if (!code) return std::move(code).error();
  if (!*code) return Invalid("code must be a string");
  t.code = std::move(**code);
  auto context_id = OptString(body, "context_id");
  if (!context_id) return std::move(context_id).error();
  t.context_id = std::move(*context_id);
  auto language = LanguageOf(body);
  if (!language) return std::move(language).error();
  t.language = *language;
  const json::value* named = Field(body, "language");
  if (t.context_id && named && named->is_string() && !named->as_string().empty()) {
    return Invalid("give context_id or language, not both: a context has its language");
  }
  return t;
}

// Whether a result's MIME type has a field of its own in E2B's Result (the rest go to extra).
bool KnownFormat(std::string_view mime) {
  return mime == kChartMime || mime == kDataMime ||
         std::any_of(std::begin(kResultFormats), std::end(kResultFormats),
                     [mime](const ResultFormat& f) { return f.mime == mime; });
}

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One event of a run (spec/events.md, code contexts) as the line E2B's SDKs parse: stdout,
// stderr, result, error and number_of_executions; nothing for the rest.
void RenderLine(std::string& out, const Event& e) {
  boost::system::error_code ec;
  json::value parsed = json::parse(e.data, ec);
  if (ec || !parsed.is_object()) return;
  const json::object& data = parsed.as_object();
  const std::string_view name = e.name;
  json::object line;
  if (name == "start") {
    line["type"] = "number_of_executions";
    line["execution_count"] =
        data.contains("execution_count") ? data.at("execution_count") : json::value(0);
  } else if (name == "stdout" || name == "stderr") {
    line["type"] = name;
    line["text"] = data.contains("chunk") ? data.at("chunk") : json::string();
    line["timestamp"] = NowNanos();
  } else if (name == "result") {
    line["type"] = "result";
    if (const json::value* bundle = data.if_contains("data"); bundle && bundle->is_object()) {
      const json::object& formats = bundle->as_object();
      CopyFormats(formats, line);
      if (const json::value* chart = formats.if_contains(kChartMime)) line["chart"] = *chart;
      if (const json::value* table = formats.if_contains(kDataMime)) line["data"] = *table;
      json::object extra;
      for (const auto& [mime, value] : formats) {
        if (!KnownFormat(mime)) extra[mime] = value;
      }
      if (!extra.empty()) line["extra"] = std::move(extra);
    }
    line["is_main_result"] = data.contains("is_main_result") ? data.at("is_main_result") : false;
  } else if (name == "error") {
    line["type"] = "error";
    line["name"] = data.contains("name") ? data.at("name") : json::string("Error");
    line["value"] = data.contains("value") ? data.at("value") : json::string();
    line["traceback"] = data.contains("traceback") ? data.at("traceback") : json::string();
  } else {
    return;
  }
  out += json::serialize(line);
  out += '\n';
}

// A response of JSON lines: a blank line would break the SDKs' parsers, so no keepalives (the
// client going away is still seen, by its socket).
class LineSink {
 public:
  explicit LineSink(StreamResponse& response) : response_(response) {}
  bool stopping() const { return response_.stopping(); }
  bool gone() const { return response_.gone(); }
  uint64_t batch_bytes() const { return response_.batch_bytes(); }
  SteadyClock::duration keepalive() const { return response_.keepalive(); }
  void Keepalive() {}
  asio::awaitable<bool> Flush() { return response_.Flush(); }

 private:
  StreamResponse& response_;
};

}  // namespace

asio::awaitable<void> ExecuteCode(Context& ctx) {
  // A cell's run is a stream of its events.
  auto sb = EnvdSandbox(ctx, EnvdCall::kStream);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  auto target = TargetOf(*body);
  if (!target) co_return co_await ReplyError(ctx, target.error());
  // The cell's own variables, checked as a context's env is.
  json::object env_only;
  if (const json::value* env = Field(*body, "env_vars")) env_only["env"] = *env;
  auto env = ParseContextRequest(env_only);
  if (!env) co_return co_await ReplyError(ctx, env.error());
  std::shared_ptr<CodeContext> context;
  if (target->context_id) {
    auto named = FindContext(**sb, *target->context_id);
    if (!named) co_return co_await ReplyError(ctx, named.error());
    context = *named;
  } else {
    auto made = co_await DefaultContext(ctx, **sb, target->language);
    if (!made) co_return co_await ReplyError(ctx, made.error());
    context = *made;
  }
  // No deadline of its own: E2B's SDKs end a cell by going away at their timeout, and the
  // cell is interrupted then (below). The operator's longest timeout still holds.
  auto run = context->Submit(ctx.service, std::move(target->code),
                             ctx.service.options().max_timeout_seconds, {}, std::move(env->env));
  if (!run) co_return co_await ReplyError(ctx, run.error());

  StreamResponse response(ctx, "application/x-ndjson");
  EventCursor cursor((*run)->log(), ctx.stream.get_executor(), 0);
  response.Watch(cursor);
  LineSink sink(response);
  const auto render = [&](const EventLog::Slice& slice) {
    for (const Event* e : slice.entries) RenderLine(response.out(), *e);
  };
  const StreamEnd end = co_await Pump(cursor, sink, render, true);
  if (end == StreamEnd::kGone) context->Cancel(*run);
  co_await response.Close(end);
}

asio::awaitable<void> ListCodeContexts(Context& ctx) {
  auto sb = EnvdSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  json::array items;
  for (const auto& [id, context] : (*sb)->contexts) items.push_back(ContextJson(*context));
  co_await ReplyJson(ctx, http::status::ok, items);
}

asio::awaitable<void> CreateCodeContext(Context& ctx) {
  auto sb = EnvdSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  auto language = LanguageOf(*body);
  if (!language) co_return co_await ReplyError(ctx, language.error());
  json::object request;
  request["language"] = LanguageName(*language);
  if (const json::value* cwd = Field(*body, "cwd")) request["cwd"] = *cwd;
  auto req = ParseContextRequest(request);
  if (!req) co_return co_await ReplyError(ctx, req.error());
  Result<std::shared_ptr<CodeContext>> context =
      co_await CodeContext::Create(ctx.service, (*sb)->id, std::move(*req));
  if (!context) co_return co_await ReplyError(ctx, context.error());
  co_await ReplyJson(ctx, http::status::ok, ContextJson(**context));
}

asio::awaitable<void> RemoveCodeContext(Context& ctx) {
  auto sb = EnvdSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  if (auto r = CodeContext::Delete(ctx.service, (*sb)->id, ctx.params.at(0)); !r) {
    co_return co_await ReplyError(ctx, r.error());
  }
  co_await ReplyEmpty(ctx, http::status::no_content);
}

asio::awaitable<void> RestartCodeContext(Context& ctx) {
  auto sb = EnvdSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto named = FindContext(**sb, ctx.params.at(0));
  if (!named) co_return co_await ReplyError(ctx, named.error());
  auto context = *named;
  if (auto r = co_await context->Restart(ctx.service); !r) {
    co_return co_await ReplyError(ctx, r.error());
  }
  co_await ReplyEmpty(ctx, http::status::no_content);
}

}  // namespace sandstream::api::e2b
