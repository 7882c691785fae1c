// Templates: list, get, import an image archive (its progress as SSE when asked), delete.
#include <fcntl.h>
#include <unistd.h>

#include <memory>

#include <boost/json.hpp>

#include "api/common/lookup.h"
#include "api/request.h"
#include "api/routes/routes.h"
#include "api/stream.h"
#include "base/async.h"
#include "base/ids.h"
#include "http/headers.h"
#include "platform/fd.h"
#include "service/codec.h"
#include "service/service.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// A template the principal may see: its own, the admin's (everyone's), or any for the admin.
Result<const Template*> FindTemplate(Context& ctx, std::string_view name) {
  const Template* t = ctx.service.templates().Find(name);
  if (!t || !TemplateService::MayUse(*t, ctx.principal.tenant, ctx.principal.admin())) {
    return Error{ErrorCode::kNotFound, "no template '" + std::string(name) + "'"};
  }
  return t;
}

bool IsArchiveType(std::string_view type) {
  const std::string_view base = type.substr(0, type.find(';'));
  return base == "application/x-tar" || base == "application/tar" ||
         base == "application/octet-stream" || base == "application/vnd.oci.image.layout.v1+tar";
}

// What a template is made from: an uploaded archive, or an image in a registry.
struct ImageSource {
  UniqueFd archive;
  std::optional<image::Reference> reference;
  image::Credentials credentials;
};

asio::awaitable<Result<const Template*>> MakeTemplate(Service& service, std::string name,
                                                      std::string tenant, ImageSource source,
                                                      TemplateService::Progress report) {
  if (source.reference) {
    co_return co_await service.template_service().Pull(
        std::move(name), std::move(tenant), std::move(*source.reference),
        std::move(source.credentials), std::move(report));
  }
  co_return co_await service.template_service().Import(
      std::move(name), std::move(tenant), std::move(source.archive), std::move(report));
}

// Makes the template, then ends `progress` with it or the error.
asio::awaitable<void> Import(Service& service, std::string name, std::string tenant,
                             ImageSource source, TemplateService::Progress report,
                             std::shared_ptr<EventLog> progress) {
  auto made = co_await MakeTemplate(service, name, tenant, std::move(source), report);
  if (made) {
    progress->Append("template", json::serialize(TemplateJson(**made)), {}, true);
    co_return;
  }
  const json::object error{{"code", ErrorCodeName(made.error().code)},
                           {"message", made.error().message}};
  progress->Append("error", json::serialize(json::object{{"error", error}}), {}, true);
}

// The answer to a template's creation: the template (201), or, to a client that accepts
// text/event-stream, the progress as SSE ending with it.
asio::awaitable<void> ReplyWithTemplate(Context& ctx, std::string name, ImageSource source) {
  auto progress = std::make_shared<EventLog>(LogLimits{1u << 20, 4096});
  auto report = [progress](const json::object& step) {
    progress->Append("progress", json::serialize(step));
  };
  if (!WantsStream(ctx, false)) {
    auto made = co_await MakeTemplate(ctx.service, std::move(name), ctx.principal.tenant,
                                      std::move(source), report);
    if (!made) co_return co_await ReplyError(ctx, made.error());
    co_return co_await ReplyJson(ctx, http::status::created, TemplateJson(**made));
  }
  // The import runs on; the stream follows its log until the last event (the template, or the
  // error), and a client that leaves does not stop it.
  Spawn(ctx.service.executor(),
        Import(ctx.service, std::move(name), ctx.principal.tenant, std::move(source), report,
               progress),
        "template import");
  co_await ServeEvents(ctx, progress, 0, true, RenderEvent);
}

}  // namespace

asio::awaitable<void> ListTemplates(Context& ctx) {
  json::array items;
  for (const Template* t : ctx.service.templates().List()) {
    if (TemplateService::MayUse(*t, ctx.principal.tenant, ctx.principal.admin())) {
      items.push_back(TemplateJson(*t));
    }
  }
  json::object body;
  body["templates"] = std::move(items);
  co_await ReplyJson(ctx, http::status::ok, body);
}

asio::awaitable<void> GetTemplate(Context& ctx) {
  auto t = FindTemplate(ctx, ctx.params.at(0));
  if (!t) co_return co_await ReplyError(ctx, t.error());
  co_await ReplyJson(ctx, http::status::ok, TemplateJson(**t));
}

asio::awaitable<void> DeleteTemplate(Context& ctx) {
  auto t = FindTemplate(ctx, ctx.params.at(0));
  if (!t) co_return co_await ReplyError(ctx, t.error());
  if (!ctx.principal.admin() && (*t)->tenant != ctx.principal.tenant) {
    co_return co_await ReplyError(ctx, ErrorCode::kForbidden,
                                  "template '" + (*t)->name + "' is the admin's");
  }
  auto deleted = co_await ctx.service.DeleteTemplate(ctx.params.at(0));
  if (!deleted) co_return co_await ReplyError(ctx, deleted.error());
  co_await ReplyEmpty(ctx, http::status::no_content);
}

// POST /v1/templates: from an image archive as the body (?name=NAME; an OCI image layout or a
// `docker save`, as a tar), which goes to an unnamed file first, then the import reads it; or,
// with a JSON body {"name", "image", "auth"?}, from an image pulled from a registry.
asio::awaitable<void> CreateTemplate(Context& ctx) {
  const bool keep_alive = ctx.req.keep_alive();
  if (ctx.body_parser && !ctx.body_parser->is_done()) ctx.req.keep_alive(false);
  std::string name(ctx.Query("name").value_or(""));
  const std::string_view type = ctx.Header(http::field::content_type);
  const bool pull = sandstream::http::IsJsonType(type);
  if (!pull && !IsArchiveType(type)) {
    co_return co_await ReplyError(
        ctx, ErrorCode::kUnsupportedMediaType,
        "the body is an image archive (Content-Type application/x-tar: an OCI image layout or a "
        "docker save), or a pull's JSON (application/json: {\"name\", \"image\"})");
  }
  ImageSource source;
  if (pull) {
    std::string text;
    const BodySink keep = [&text](std::string_view chunk) -> asio::awaitable<Result<void>> {
      text.append(chunk);
      co_return Ok{};
    };
    std::optional<Error> failure = co_await ReceiveBody(ctx, keep, "request body (max_body_bytes)",
                                                        ctx.server.options().max_body_bytes);
    if (failure) co_return co_await ReplyError(ctx, *failure);
    ctx.req.keep_alive(keep_alive);
    ctx.req.body() = std::move(text);
    auto body = ParseBody(ctx);
    if (!body) co_return co_await ReplyError(ctx, body.error());
    auto parsed = ParsePullRequest(*body);
    if (!parsed) co_return co_await ReplyError(ctx, parsed.error());
    if (!parsed->name.empty()) name = std::move(parsed->name);
    source.reference = std::move(parsed->image);
    source.credentials = std::move(parsed->credentials);
  }
  if (name.empty()) {
    co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest,
                                  pull ? "name is required: the template's name"
                                       : "name is required (?name=), the template's name");
  }
  // Before the upload, which may be gigabytes: the import checks again when it takes the name.
  if (ctx.service.templates().Find(name)) {
    co_return co_await ReplyError(ctx, ErrorCode::kConflict, "template '" + name + "' exists");
  }
  if (!pull) {
    auto archive = ctx.service.templates().NewArchive();
    if (!archive) co_return co_await ReplyError(ctx, archive.error());
    const int fd = archive->get();
    const BodySink write = [&](std::string_view chunk) -> asio::awaitable<Result<void>> {
      co_return co_await OffThread(ctx.service.blocking_pool(),
                                   [fd, chunk] { return sandstream::WriteAll(fd, chunk); });
    };
    std::optional<Error> failure = co_await ReceiveBody(
        ctx, write, "image archive (max_image_bytes)", ctx.server.options().max_image_bytes);
    if (failure) co_return co_await ReplyError(ctx, *failure);
    ctx.req.keep_alive(keep_alive);
    source.archive = std::move(*archive);
  }
  co_await ReplyWithTemplate(ctx, std::move(name), std::move(source));
}

namespace {

// The snapshot's name from the body ({"name"}), or `fallback` when it has none.
Result<std::string> SnapshotName(Context& ctx, std::string fallback) {
  auto body = ParseBody(ctx);
  if (!body) return std::move(body).error();
  const json::value* name = body->if_contains("name");
  if (name == nullptr || name->is_null()) {
    if (fallback.empty()) return Invalid("name is required: the template the snapshot becomes");
    return fallback;
  }
  if (!name->is_string()) return Invalid("name must be a string");
  return std::string(name->as_string());
}

// The body's "memory", or `fallback` when it has none.
Result<bool> MemoryFlag(Context& ctx, bool fallback) {
  auto body = ParseBody(ctx);
  if (!body) return std::move(body).error();
  const json::value* v = body->if_contains("memory");
  if (v == nullptr || v->is_null()) return fallback;
  if (!v->is_bool()) return Invalid("memory must be a boolean");
  return v->as_bool();
}

}  // namespace

// POST /v1/sandboxes/{id}/snapshot {"name", "memory"?}: the sandbox's files now, as a
// template; with "memory": true, its running processes and code contexts too (a sandbox made
// from it starts with them where they were).
asio::awaitable<void> SnapshotSandbox(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto name = SnapshotName(ctx, "");
  if (!name) co_return co_await ReplyError(ctx, name.error());
  auto memory = MemoryFlag(ctx, false);
  if (!memory) co_return co_await ReplyError(ctx, memory.error());
  auto made = co_await ctx.service.SnapshotSandbox(ctx.params.at(0), *name, *memory);
  if (!made) co_return co_await ReplyError(ctx, made.error());
  co_await ReplyJson(ctx, http::status::created, TemplateJson(**made));
}

// POST /v1/sandboxes/{id}/fork {"memory"?, "count"?, "name"?}: sandboxes made from this one as
// it is now, with its settings. "memory" (default true): its processes and code contexts run
// on in each where they were; false: its files only, through a snapshot as template "name".
// Without "count", the fork itself; with it, {"sandboxes": [...]}.
asio::awaitable<void> ForkSandbox(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  auto flag = MemoryFlag(ctx, true);
  if (!flag) co_return co_await ReplyError(ctx, flag.error());
  const bool memory = *flag;
  std::optional<int64_t> count;
  if (const json::value* v = body->if_contains("count"); v && !v->is_null()) {
    if (!v->is_int64() || v->as_int64() < 1 || v->as_int64() > Service::kMaxForks) {
      co_return co_await ReplyError(
          ctx, Invalid("count must be an integer from 1 to " + std::to_string(Service::kMaxForks)));
    }
    count = v->as_int64();
  }
  auto name = SnapshotName(ctx, "fork-" + NewId("").substr(0, 12));
  if (!name) co_return co_await ReplyError(ctx, name.error());
  if (const json::value* given = body->if_contains("name"); memory && given && !given->is_null()) {
    co_return co_await ReplyError(
        ctx, Invalid("name is the template of a fork of files (\"memory\": false); a fork with "
                     "memory makes no template"));
  }
  auto forks = co_await ctx.service.ForkSandbox(ctx.params.at(0), *name, ctx.principal.credential,
                                                static_cast<int>(count.value_or(1)), memory);
  if (!forks) co_return co_await ReplyError(ctx, forks.error());
  if (!count) {
    if (forks->empty()) {
      const Error gone{ErrorCode::kNotFound, "the fork was deleted meanwhile"};
      co_return co_await ReplyError(ctx, gone);
    }
    co_return co_await ReplyJson(ctx, http::status::created, SandboxJson(*forks->front()));
  }
  json::array list;
  for (const SandboxEntry* fork : *forks) list.push_back(SandboxJson(*fork));
  json::object answer;
  answer["sandboxes"] = std::move(list);
  co_await ReplyJson(ctx, http::status::created, std::move(answer));
}

}  // namespace sandstream::api
