// /api/contexts and /api/execute/code: sandstream's code contexts, and a cell's run as the
// events Cloudflare's InterpreterClient reads (one `data:` line each, converted as they go).
#include <boost/json.hpp>

#include "api/cloudflare/errors.h"
#include "api/cloudflare/routes.h"
#include "api/cloudflare/wire.h"
#include "api/common/cells.h"
#include "api/common/lookup.h"
#include "api/request.h"
#include "api/stream.h"
#include "base/clock.h"
#include "service/contexts.h"

namespace sandstream::api::cloudflare {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// One event of a run (spec/events.md, code contexts) in Cloudflare's streaming shape; `start`
// and what it has no counterpart for are left out.
std::optional<json::object> Convert(std::string_view name, const json::object& data) {
  json::object out;
  if (name == "stdout" || name == "stderr") {
    out["type"] = name;
    out["text"] = data.contains("chunk") ? data.at("chunk") : json::string();
    out["timestamp"] = ToUnixMillis(SystemNow());
  } else if (name == "result") {
    out["type"] = "result";
    const json::value* bundle = data.if_contains("data");
    if (bundle && bundle->is_object()) {
      CopyFormats(bundle->as_object(), out);
      out["data"] = *bundle;
    }
    out["is_main_result"] = data.contains("is_main_result") ? data.at("is_main_result") : false;
    out["metadata"] = json::object();
  } else if (name == "error") {
    out["type"] = "error";
    out["ename"] = data.contains("name") ? data.at("name") : json::string("Error");
    out["evalue"] = data.contains("value") ? data.at("value") : json::string();
    json::array lines;
    if (const json::value* tb = data.if_contains("traceback"); tb && tb->is_string()) {
      std::string_view text = tb->as_string();
      while (!text.empty()) {
        const size_t nl = text.find('\n');
        lines.emplace_back(text.substr(0, nl));
        text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
      }
    } else if (tb && tb->is_array()) {
      lines = tb->as_array();
    }
    out["traceback"] = std::move(lines);
  } else if (name == "exit") {
    out["type"] = "execution_complete";
    out["execution_count"] = data.contains("execution_count") ? data.at("execution_count") : 0;
  } else {
    return std::nullopt;
  }
  return out;
}

void RenderCellEvent(std::string& out, const Event& e) {
  boost::system::error_code ec;
  json::value data = json::parse(e.data, ec);
  if (ec || !data.is_object()) return;
  auto converted = Convert(e.name, data.as_object());
  if (!converted) return;
  // The id keeps Last-Event-ID working; the InterpreterClient reads only the data line.
  sse::AppendEvent(out, e.seq, e.name, json::serialize(*converted));
}

// python (python3), javascript (js, node), typescript (ts): Cloudflare's names for
// sandstream's languages.
Result<std::string> LanguageOf(const json::object& request) {
  auto language = StringField(request, "language");
  if (!language) return std::move(language).error();
  return language->value_or("python");
}

}  // namespace

asio::awaitable<void> CreateCodeContext(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto request = ParseBody(ctx);
  if (!request) co_return co_await ReplyError(ctx, request.error());
  auto language = LanguageOf(*request);
  if (!language) co_return co_await ReplyError(ctx, language.error());
  json::object body;
  body["language"] = *language;
  if (const json::value* cwd = request->if_contains("cwd")) body["cwd"] = *cwd;
  if (const json::value* env = request->if_contains("env_vars")) body["env"] = *env;
  auto req = ParseContextRequest(body);
  if (!req) co_return co_await ReplyError(ctx, req.error());
  Result<std::shared_ptr<CodeContext>> context =
      co_await CodeContext::Create(ctx.service, (*sb)->id, std::move(*req));
  if (!context) co_return co_await Fail(ctx, context.error(), Subject::kContext);
  json::object out;
  out["contextId"] = (*context)->id();
  out["language"] = LanguageName((*context)->language());
  out["cwd"] = (*context)->cwd();
  co_await ReplyOk(ctx, std::move(out));
}

asio::awaitable<void> ListCodeContexts(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  json::array items;
  for (const auto& [id, context] : (*sb)->contexts) {
    items.push_back(json::object{
        {"id", id}, {"language", LanguageName(context->language())}, {"cwd", context->cwd()}});
  }
  json::object out;
  out["contexts"] = std::move(items);
  co_await ReplyOk(ctx, std::move(out));
}

asio::awaitable<void> DeleteCodeContext(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  const std::string& id = ctx.params.at(1);
  if (auto r = CodeContext::Delete(ctx.service, (*sb)->id, id); !r) {
    co_return co_await Fail(ctx, r.error(), Subject::kContext, id);
  }
  json::object out;
  out["contextId"] = id;
  co_await ReplyOk(ctx, std::move(out));
}

asio::awaitable<void> ExecuteCode(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto request = ParseBody(ctx);
  if (!request) co_return co_await ReplyError(ctx, request.error());
  auto given = StringField(*request, "context_id");
  if (!given) co_return co_await ReplyError(ctx, given.error());
  std::shared_ptr<CodeContext> context;
  std::string id;
  if (*given) {
    id = **given;
    auto found = FindContext(**sb, id);
    if (!found) co_return co_await Fail(ctx, found.error(), Subject::kContext, id);
    context = std::move(*found);
  } else {
    // No context named: the language's default one, made on first use (as the container does).
    auto language = LanguageOf(*request);
    if (!language) co_return co_await ReplyError(ctx, language.error());
    const std::optional<Language> parsed = ParseLanguage(*language);
    if (!parsed) {
      const Error unknown = Invalid(std::string(kLanguageChoices));
      co_return co_await ReplyError(ctx, unknown);
    }
    auto made = co_await DefaultContext(ctx, **sb, *parsed);
    if (!made) co_return co_await Fail(ctx, made.error(), Subject::kContext);
    context = *made;
    id = context->id();
  }
  // sandstream's cell request: code, and timeout_seconds from Cloudflare's timeout_ms.
  json::object body;
  if (const json::value* code = request->if_contains("code")) body["code"] = *code;
  if (const json::value* ms = request->if_contains("timeout_ms"); ms && ms->is_number()) {
    body["timeout_seconds"] = ms->to_number<double>() / 1000;
  }
  auto cell = ParseCellRequest(ctx, body);
  if (!cell) co_return co_await ReplyError(ctx, cell.error());
  auto after = ResumePoint(ctx, 0);
  if (!after) co_return co_await ReplyError(ctx, after.error());
  auto run = context->Submit(ctx.service, std::move(cell->code), cell->timeout_seconds,
                             std::move(cell->idempotency_key));
  if (!run) co_return co_await Fail(ctx, run.error(), Subject::kContext, id);
  co_await ServeEvents(ctx, (*run)->log(), *after, true, RenderCellEvent);
}

}  // namespace sandstream::api::cloudflare
