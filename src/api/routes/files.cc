// Files of a sandbox or of a volume: read (streamed), write (streamed upload), list, stat,
// mkdir, delete, move, and a sandbox's SSE watch of changes. Paths resolve inside the sandbox's
// root, or the volume's top, only (sandbox/files.h); a relative path is relative to the
// sandbox's cwd, or the volume's top. Every file syscall runs on the service's blocking pool,
// never on the I/O thread.
#include "api/common/files.h"

#include <cstdlib>

#include <boost/json.hpp>

#include "api/common/lookup.h"
#include "api/request.h"
#include "api/routes/routes.h"
#include "api/server.h"
#include "api/sse.h"
#include "api/stream.h"
#include "sandbox/files.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// Acting as `user` (uid 1000 inside) unless ?user=root.
Result<uint32_t> UserOf(Context& ctx) {
  if (auto user = ctx.Query("user"); user && !user->empty()) {
    if (*user == "root") return 0u;
    if (*user != "user") return Invalid("user must be \"user\" or \"root\"");
  }
  return uint32_t{sandbox::kSandboxUserId};
}

// What a file route acts on: a sandbox's files, relative paths taken from its cwd, or a
// volume's (no sandbox), relative paths taken from its top.
struct Scope {
  std::string sandbox_id;  // "" for a volume
  std::string cwd;
  sandbox::SandboxFs fs;

  std::string Absolute(std::string_view path) const {
    if (path.starts_with('/')) return std::string(path);
    return (cwd == "/" ? "" : cwd) + "/" + std::string(path);
  }
};
using ScopeOf = Result<Scope> (*)(Context&);

Result<Scope> SandboxScope(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) return std::move(sb).error();
  auto uid = UserOf(ctx);
  if (!uid) return std::move(uid).error();
  auto fs = ctx.service.Files((*sb)->id, *uid);
  if (!fs) return std::move(fs).error();
  return Scope{(*sb)->id, (*sb)->cwd, std::move(*fs)};
}

// A volume's files are owned by the ids a sandbox's are inside (its user is 1000 on disk).
Result<Scope> VolumeScope(Context& ctx) {
  const Volume* v = FindVolume(ctx);
  if (!v) return VolumeNotFound(ctx);
  auto uid = UserOf(ctx);
  if (!uid) return std::move(uid).error();
  auto root = ctx.service.volumes().Root(*v);
  if (!root) return std::move(root).error();
  auto fs = sandbox::SandboxFs::Open(*root, *uid);
  if (!fs) return std::move(fs).error();
  return Scope{"", "/", std::move(*fs)};
}

// What a route with ?path= acts on, and the path.
struct Target {
  std::string path;
  Scope scope;
};

Result<Target> FindTarget(Context& ctx, ScopeOf scope_of) {
  auto scope = scope_of(ctx);
  if (!scope) return std::move(scope).error();
  auto path = ctx.Query("path");
  if (!path || path->empty())
    return Invalid("the path query parameter is required (?path=/workspace/file)");
  std::string absolute = scope->Absolute(*path);
  return Target{std::move(absolute), std::move(*scope)};
}

Result<std::string> PathField(const json::object& body, std::string_view key, const Scope& scope) {
  const json::value* v = body.if_contains(key);
  if (!v || !v->is_string() || v->as_string().empty()) {
    return Invalid(std::string(key) + " must be a non-empty string (a path)");
  }
  return scope.Absolute(std::string_view(v->as_string()));
}

// "0755", "755" or 493.
Result<std::optional<uint32_t>> ParseMode(const json::value* v) {
  if (!v || v->is_null()) return std::optional<uint32_t>();
  if (v->is_int64() && v->as_int64() >= 0 && v->as_int64() <= 07777) {
    return std::optional<uint32_t>(static_cast<uint32_t>(v->as_int64()));
  }
  if (v->is_string()) {
    const std::string text(v->as_string());
    char* end = nullptr;
    const unsigned long m = std::strtoul(text.c_str(), &end, 8);
    if (!text.empty() && *end == '\0' && m <= 07777)
      return std::optional<uint32_t>(static_cast<uint32_t>(m));
  }
  return Invalid("mode must be an octal string like \"0644\" (or a number up to 4095)");
}

json::object InfoJson(const sandbox::FileInfo& f) {
  json::object o;
  o["path"] = f.path;
  o["name"] = f.name;
  o["type"] = sandbox::FileTypeName(f.type);
  o["size"] = f.size;
  o["mtime"] = FormatRfc3339(FromUnixMillis(f.mtime_ms));
  o["mode"] = ModeText(f.mode);
  if (f.type == sandbox::FileType::kSymlink) o["target"] = f.link_target;
  return o;
}

asio::awaitable<void> Read(Context& ctx, ScopeOf scope_of) {
  auto target = FindTarget(ctx, scope_of);
  if (!target) co_return co_await ReplyError(ctx, target.error());
  co_await ServeDownload(ctx, target->scope.fs, target->path);
}

asio::awaitable<std::optional<Error>> ReceiveUpload(Context& ctx, const BodySink& sink) {
  co_return co_await ReceiveBody(ctx, sink, "file upload (max_file_bytes)",
                                 ctx.server.options().max_file_bytes);
}

asio::awaitable<void> Write(Context& ctx, ScopeOf scope_of) {
  // An answer given before the whole body is read must close the connection, and say so, or
  // the client would send its next request into the rest of this body.
  const bool keep_alive = ctx.req.keep_alive();
  if (ctx.body_parser && !ctx.body_parser->is_done()) ctx.req.keep_alive(false);
  auto target = FindTarget(ctx, scope_of);
  if (!target) co_return co_await ReplyError(ctx, target.error());
  std::optional<json::value> mode_text;
  if (auto m = ctx.Query("mode"); m && !m->empty()) mode_text = json::string(*m);
  auto mode = ParseMode(mode_text ? &*mode_text : nullptr);
  if (!mode) co_return co_await ReplyError(ctx, mode.error());
  auto parents = ctx.QueryFlag("parents", true);
  if (!parents) co_return co_await ReplyError(ctx, parents.error());
  const Feed upload = [&ctx](const BodySink& sink) { return ReceiveUpload(ctx, sink); };
  auto written = co_await WriteFile(ctx, target->scope.sandbox_id, target->scope.fs, target->path,
                                    *mode, *parents, upload);
  if (!ctx.body_parser || ctx.body_parser->is_done()) ctx.req.keep_alive(keep_alive);
  if (!written) co_return co_await ReplyError(ctx, written.error());
  co_await ReplyJson(ctx, written->created ? http::status::created : http::status::ok,
                     InfoJson(written->info));
}

asio::awaitable<void> Stat(Context& ctx, ScopeOf scope_of) {
  auto target = FindTarget(ctx, scope_of);
  if (!target) co_return co_await ReplyError(ctx, target.error());
  auto info = co_await OffThread(ctx, [&] { return target->scope.fs.Stat(target->path); });
  if (!info) co_return co_await ReplyError(ctx, info.error());
  co_await ReplyJson(ctx, http::status::ok, InfoJson(*info));
}

asio::awaitable<void> List(Context& ctx, ScopeOf scope_of) {
  auto target = FindTarget(ctx, scope_of);
  if (!target) co_return co_await ReplyError(ctx, target.error());
  bool truncated = false;
  auto entries = co_await OffThread(
      ctx, [&] { return target->scope.fs.List(target->path, kListLimit, &truncated); });
  if (!entries) co_return co_await ReplyError(ctx, entries.error());
  json::array items;
  for (const auto& e : *entries) items.push_back(InfoJson(e));
  auto norm = sandbox::NormalizeSandboxPath(target->path);
  json::object body;
  body["path"] = norm ? *norm : target->path;
  body["entries"] = std::move(items);
  body["truncated"] = truncated;
  co_await ReplyJson(ctx, http::status::ok, body);
}

asio::awaitable<void> Mkdir(Context& ctx, ScopeOf scope_of) {
  auto scope = scope_of(ctx);
  if (!scope) co_return co_await ReplyError(ctx, scope.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  auto path = PathField(*body, "path", *scope);
  if (!path) co_return co_await ReplyError(ctx, path.error());
  auto mode = ParseMode(body->if_contains("mode"));
  if (!mode) co_return co_await ReplyError(ctx, mode.error());
  bool parents = true;
  if (const json::value* p = body->if_contains("parents"); p && !p->is_null()) {
    if (!p->is_bool())
      co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest,
                                    "parents must be true or false");
    parents = p->as_bool();
  }
  const uint32_t bits = mode->value_or(0755);
  auto info = co_await OffThread(ctx, [&] { return scope->fs.Mkdir(*path, bits, parents); });
  if (!info) co_return co_await ReplyError(ctx, info.error());
  co_await ReplyJson(ctx, http::status::created, InfoJson(*info));
}

asio::awaitable<void> Delete(Context& ctx, ScopeOf scope_of) {
  auto target = FindTarget(ctx, scope_of);
  if (!target) co_return co_await ReplyError(ctx, target.error());
  auto recursive = ctx.QueryFlag("recursive");
  if (!recursive) co_return co_await ReplyError(ctx, recursive.error());
  Result<void> removed =
      co_await OffThread(ctx, [&] { return target->scope.fs.Remove(target->path, *recursive); });
  if (!removed) co_return co_await ReplyError(ctx, removed.error());
  co_await ReplyEmpty(ctx, http::status::no_content);
}

asio::awaitable<void> Move(Context& ctx, ScopeOf scope_of) {
  auto scope = scope_of(ctx);
  if (!scope) co_return co_await ReplyError(ctx, scope.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  auto from = PathField(*body, "from", *scope);
  if (!from) co_return co_await ReplyError(ctx, from.error());
  auto to = PathField(*body, "to", *scope);
  if (!to) co_return co_await ReplyError(ctx, to.error());
  bool overwrite = false;
  if (const json::value* o = body->if_contains("overwrite"); o && !o->is_null()) {
    if (!o->is_bool())
      co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest,
                                    "overwrite must be true or false");
    overwrite = o->as_bool();
  }
  auto info = co_await OffThread(ctx, [&] { return scope->fs.Move(*from, *to, overwrite); });
  if (!info) co_return co_await ReplyError(ctx, info.error());
  co_await ReplyJson(ctx, http::status::ok, InfoJson(*info));
}

}  // namespace

asio::awaitable<void> FilesRead(Context& ctx) {
  return Read(ctx, SandboxScope);
}
asio::awaitable<void> FilesWrite(Context& ctx) {
  return Write(ctx, SandboxScope);
}
asio::awaitable<void> FilesStat(Context& ctx) {
  return Stat(ctx, SandboxScope);
}
asio::awaitable<void> FilesList(Context& ctx) {
  return List(ctx, SandboxScope);
}
asio::awaitable<void> FilesMkdir(Context& ctx) {
  return Mkdir(ctx, SandboxScope);
}
asio::awaitable<void> FilesDelete(Context& ctx) {
  return Delete(ctx, SandboxScope);
}
asio::awaitable<void> FilesMove(Context& ctx) {
  return Move(ctx, SandboxScope);
}
asio::awaitable<void> VolumeFilesRead(Context& ctx) {
  return Read(ctx, VolumeScope);
}
asio::awaitable<void> VolumeFilesWrite(Context& ctx) {
  return Write(ctx, VolumeScope);
}
asio::awaitable<void> VolumeFilesStat(Context& ctx) {
  return Stat(ctx, VolumeScope);
}
asio::awaitable<void> VolumeFilesList(Context& ctx) {
  return List(ctx, VolumeScope);
}
asio::awaitable<void> VolumeFilesMkdir(Context& ctx) {
  return Mkdir(ctx, VolumeScope);
}
asio::awaitable<void> VolumeFilesDelete(Context& ctx) {
  return Delete(ctx, VolumeScope);
}
asio::awaitable<void> VolumeFilesMove(Context& ctx) {
  return Move(ctx, VolumeScope);
}

asio::awaitable<void> FilesWatch(Context& ctx) {
  auto target = FindTarget(ctx, SandboxScope);
  if (!target) co_return co_await ReplyError(ctx, target.error());
  auto recursive = ctx.QueryFlag("recursive", true);
  if (!recursive) co_return co_await ReplyError(ctx, recursive.error());
  const WatchServe serve = [&ctx](std::shared_ptr<EventLog> log) {
    return ServeEvents(ctx, std::move(log), 0, true, [](std::string& out, const Event& e) {
      sse::AppendEvent(out, 0, e.name, e.data);
    });
  };
  auto failed = co_await RunWatch(ctx, target->scope.sandbox_id, target->scope.fs, target->path,
                                  *recursive, serve);
  if (failed) co_await ReplyError(ctx, *failed);
}

}  // namespace sandstream::api
