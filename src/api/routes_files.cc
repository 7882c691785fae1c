// Files of a sandbox: read (streamed), write (streamed upload), list, stat, mkdir, delete,
// move, and an SSE watch of changes. Paths resolve inside the sandbox's root only
// (sandbox/files.h); a relative path is relative to the sandbox's cwd.
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/json.hpp>

#include "api/lookup.h"
#include "api/request.h"
#include "api/routes.h"
#include "api/server.h"
#include "api/sse.h"
#include "api/stream.h"
#include "api/websocket.h"
#include "sandbox/files.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

constexpr size_t kChunk = 256 * 1024;
constexpr size_t kListLimit = 10000;
constexpr size_t kMaxWatches = 1024;

auto Tuple() {
  return asio::as_tuple(asio::use_awaitable);
}

// Acting as `user` (uid 1000 inside) unless ?user=root.
Result<sandbox::SandboxFs> OpenFs(const Context& ctx, const SandboxEntry& sb) {
  uint32_t uid = 1000;
  if (auto user = ctx.Query("user"); user && !user->empty()) {
    if (*user == "root")
      uid = 0;
    else if (*user != "user")
      return Invalid("user must be \"user\" or \"root\"");
  }
  return sandbox::SandboxFs::Open(sb.runtime->RootPath(), sb.runtime->HostId(uid));
}

std::string Absolute(const SandboxEntry& sb, std::string_view path) {
  if (path.starts_with('/')) return std::string(path);
  return sb.cwd + "/" + std::string(path);
}

// What a route with ?path= acts on: the sandbox's files, as the requested user, and the path.
struct Target {
  std::string path;
  sandbox::SandboxFs fs;
};

Result<Target> FindTarget(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) return std::move(sb).error();
  auto path = ctx.Query("path");
  if (!path || path->empty())
    return Invalid("the path query parameter is required (?path=/workspace/file)");
  auto fs = OpenFs(ctx, **sb);
  if (!fs) return std::move(fs).error();
  return Target{Absolute(**sb, *path), std::move(*fs)};
}

Result<std::string> PathField(const json::object& body, std::string_view key,
                              const SandboxEntry& sb) {
  const json::value* v = body.if_contains(key);
  if (!v || !v->is_string() || v->as_string().empty()) {
    return Invalid(std::string(key) + " must be a non-empty string (a path)");
  }
  return Absolute(sb, std::string_view(v->as_string()));
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

bool FlagOr(const Context& ctx, std::string_view name, bool fallback) {
  auto v = ctx.Query(name);
  if (!v) return fallback;
  if (*v == "0" || *v == "false" || *v == "no") return false;
  return v->empty() || *v == "1" || *v == "true" || *v == "yes";
}

std::string ModeText(uint32_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
  return buf;
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

std::string_view MimeType(std::string_view path) {
  static constexpr std::pair<std::string_view, std::string_view> kTypes[] = {
      {".txt", "text/plain; charset=utf-8"},
      {".log", "text/plain; charset=utf-8"},
      {".md", "text/markdown; charset=utf-8"},
      {".csv", "text/csv; charset=utf-8"},
      {".html", "text/html; charset=utf-8"},
      {".htm", "text/html; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".mjs", "text/javascript; charset=utf-8"},
      {".ts", "text/plain; charset=utf-8"},
      {".py", "text/x-python; charset=utf-8"},
      {".sh", "text/x-shellscript; charset=utf-8"},
      {".json", "application/json"},
      {".xml", "application/xml"},
      {".yaml", "application/yaml"},
      {".yml", "application/yaml"},
      {".png", "image/png"},
      {".jpg", "image/jpeg"},
      {".jpeg", "image/jpeg"},
      {".gif", "image/gif"},
      {".webp", "image/webp"},
      {".svg", "image/svg+xml"},
      {".ico", "image/x-icon"},
      {".pdf", "application/pdf"},
      {".zip", "application/zip"},
      {".gz", "application/gzip"},
      {".tar", "application/x-tar"},
      {".wasm", "application/wasm"},
      {".mp3", "audio/mpeg"},
      {".mp4", "video/mp4"},
      {".wav", "audio/wav"},
  };
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  if (dot == std::string_view::npos || (slash != std::string_view::npos && dot < slash)) {
    return "application/octet-stream";
  }
  std::string ext(path.substr(dot));
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& [e, type] : kTypes) {
    if (e == ext) return type;
  }
  return "application/octet-stream";
}

// Writes all of `data`; ENOSPC and friends come back as the files layer names them.
Result<void> WriteFully(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      const bool full = err == ENOSPC || err == EDQUOT || err == EFBIG;
      return SysError(full ? ErrorCode::kPayloadTooLarge : ErrorCode::kInternal,
                      "files: write " + path + (full ? " (the sandbox's disk is full)" : ""), err);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Ok{};
}

}  // namespace

asio::awaitable<void> FilesRead(Context& ctx) {
  auto target = FindTarget(ctx);
  if (!target) co_return co_await ReplyError(ctx, target.error());
  auto file = target->fs.OpenRead(target->path);
  if (!file) co_return co_await ReplyError(ctx, file.error());

  const uint64_t size = file->info.size;
  std::string head = "HTTP/1.1 200 OK\r\nServer: sandstreamd\r\nContent-Type: ";
  head += MimeType(file->info.path);
  head += "\r\nContent-Length: " + std::to_string(size);
  head += "\r\nX-File-Path: " + file->info.path;
  head += "\r\nX-File-Mode: " + ModeText(file->info.mode);
  head += "\r\nLast-Modified-Ms: " + std::to_string(file->info.mtime_ms);
  head += "\r\nX-Request-Id: " + ctx.request_id;
  if (!ctx.req.keep_alive()) head += "\r\nConnection: close";
  head += "\r\n\r\n";
  ctx.status = 200;
  auto [hec, hn] = co_await asio::async_write(ctx.stream.socket(), asio::buffer(head), Tuple());
  (void)hn;
  if (hec) {
    ctx.streamed = true;
    co_return;
  }
  std::string buf(kChunk, '\0');
  uint64_t sent = 0;
  while (sent < size) {
    const ssize_t n = ::read(file->fd.get(), buf.data(), std::min<uint64_t>(kChunk, size - sent));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the file shrank meanwhile
    auto [ec, w] = co_await asio::async_write(
        ctx.stream.socket(), asio::buffer(buf.data(), static_cast<size_t>(n)), Tuple());
    (void)w;
    if (ec) break;
    sent += static_cast<uint64_t>(n);
  }
  // Fewer bytes than announced: only closing the connection tells the client.
  if (sent < size) ctx.streamed = true;
}

asio::awaitable<void> FilesWrite(Context& ctx) {
  // An answer given before the whole body is read must close the connection, and say so, or
  // the client would send its next request into the rest of this body.
  const bool keep_alive = ctx.req.keep_alive();
  if (ctx.body_parser && !ctx.body_parser->is_done()) ctx.req.keep_alive(false);
  auto target = FindTarget(ctx);
  if (!target) co_return co_await ReplyError(ctx, target.error());
  std::optional<json::value> mode_text;
  if (auto m = ctx.Query("mode"); m && !m->empty()) mode_text = json::string(*m);
  auto mode = ParseMode(mode_text ? &*mode_text : nullptr);
  if (!mode) co_return co_await ReplyError(ctx, mode.error());
  const sandbox::SandboxFs& fs = target->fs;
  auto file = fs.OpenWrite(target->path, *mode, FlagOr(ctx, "parents", true));
  if (!file) co_return co_await ReplyError(ctx, file.error());
  const std::string shown = file->info.path;

  std::optional<Error> failure;
  if (ctx.body_parser) {
    auto& parser = *ctx.body_parser;
    while (!parser.is_done()) {
      ctx.stream.expires_after(std::chrono::seconds(60));
      auto [ec, n] = co_await http::async_read_some(ctx.stream, *ctx.body_buffer, parser, Tuple());
      (void)n;
      std::string& chunk = parser.get().body();
      if (!chunk.empty() && !failure) {
        if (auto w = WriteFully(file->fd.get(), chunk, shown); !w) failure = std::move(w).error();
      }
      chunk.clear();
      if (ec == http::error::body_limit) {
        failure = Error{ErrorCode::kPayloadTooLarge,
                        "file upload is larger than max_file_bytes (" +
                            std::to_string(ctx.server.options().max_file_bytes) + " bytes)"};
        break;
      }
      if (ec) {
        failure = Error{ErrorCode::kInvalidRequest, "upload interrupted: " + ec.message()};
        ctx.streamed = true;
        break;
      }
      if (failure) break;
    }
    ctx.stream.expires_never();
    if (parser.is_done()) ctx.req.keep_alive(keep_alive);
  } else if (auto w = WriteFully(file->fd.get(), ctx.req.body(), shown); !w) {
    failure = std::move(w).error();
  }
  file->fd.reset();
  if (failure) {
    // A half-written new file is removed; an existing one stays truncated (the error says so).
    if (file->created)
      (void)fs.Remove(shown, false);
    else
      failure->message += "; " + shown + " was truncated";
    co_return co_await ReplyError(ctx, *failure);
  }
  auto info = fs.Stat(shown);
  if (!info) co_return co_await ReplyError(ctx, info.error());
  co_await ReplyJson(ctx, file->created ? http::status::created : http::status::ok,
                     InfoJson(*info));
}

asio::awaitable<void> FilesStat(Context& ctx) {
  auto target = FindTarget(ctx);
  if (!target) co_return co_await ReplyError(ctx, target.error());
  auto info = target->fs.Stat(target->path);
  if (!info) co_return co_await ReplyError(ctx, info.error());
  co_await ReplyJson(ctx, http::status::ok, InfoJson(*info));
}

asio::awaitable<void> FilesList(Context& ctx) {
  auto target = FindTarget(ctx);
  if (!target) co_return co_await ReplyError(ctx, target.error());
  bool truncated = false;
  auto entries = target->fs.List(target->path, kListLimit, &truncated);
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

asio::awaitable<void> FilesMkdir(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  auto path = PathField(*body, "path", **sb);
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
  auto fs = OpenFs(ctx, **sb);
  if (!fs) co_return co_await ReplyError(ctx, fs.error());
  auto info = fs->Mkdir(*path, mode->value_or(0755), parents);
  if (!info) co_return co_await ReplyError(ctx, info.error());
  co_await ReplyJson(ctx, http::status::created, InfoJson(*info));
}

asio::awaitable<void> FilesDelete(Context& ctx) {
  auto target = FindTarget(ctx);
  if (!target) co_return co_await ReplyError(ctx, target.error());
  if (auto r = target->fs.Remove(target->path, FlagOr(ctx, "recursive", false)); !r) {
    co_return co_await ReplyError(ctx, r.error());
  }
  co_await ReplyEmpty(ctx, http::status::no_content);
}

asio::awaitable<void> FilesMove(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  auto from = PathField(*body, "from", **sb);
  if (!from) co_return co_await ReplyError(ctx, from.error());
  auto to = PathField(*body, "to", **sb);
  if (!to) co_return co_await ReplyError(ctx, to.error());
  bool overwrite = false;
  if (const json::value* o = body->if_contains("overwrite"); o && !o->is_null()) {
    if (!o->is_bool())
      co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest,
                                    "overwrite must be true or false");
    overwrite = o->as_bool();
  }
  auto fs = OpenFs(ctx, **sb);
  if (!fs) co_return co_await ReplyError(ctx, fs.error());
  auto info = fs->Move(*from, *to, overwrite);
  if (!info) co_return co_await ReplyError(ctx, info.error());
  co_await ReplyJson(ctx, http::status::ok, InfoJson(*info));
}

namespace {

std::string FileEventJson(const sandbox::FileEvent& e) {
  json::object data;
  data["type"] = e.type;
  data["path"] = e.path;
  if (!e.from.empty()) data["from"] = e.from;
  data["is_dir"] = e.is_dir;
  data["timestamp"] = FormatRfc3339(SystemNow());
  return json::serialize(data);
}

// Moves inotify's events into `log` until the watched directory goes or `stop` is set.
asio::awaitable<void> ProduceFileEvents(sandbox::FileWatch& watch, const sandbox::SandboxFs& fs,
                                        asio::posix::stream_descriptor& inotify, EventLog& log,
                                        const bool& stop) {
  while (!stop) {
    auto [ec] = co_await inotify.async_wait(asio::posix::stream_descriptor::wait_read, Tuple());
    if (ec || stop) break;
    bool gone = false;
    for (const auto& e : watch.Drain(fs, &gone)) log.Append(e.type, FileEventJson(e));
    if (gone) {
      json::object error{{"code", ErrorCodeName(ErrorCode::kNotFound)},
                         {"message", "the watched directory " + watch.path() + " is gone"}};
      log.Append("error", json::serialize(error), {}, true);
      break;
    }
  }
}

}  // namespace

asio::awaitable<void> FilesWatch(Context& ctx) {
  auto target = FindTarget(ctx);
  if (!target) co_return co_await ReplyError(ctx, target.error());
  auto watch = sandbox::FileWatch::Start(target->fs, target->path, FlagOr(ctx, "recursive", true),
                                         kMaxWatches);
  if (!watch) co_return co_await ReplyError(ctx, watch.error());
  // Watches are not resumable: a follower that falls behind the window gets a gap.
  auto log = std::make_shared<EventLog>(LogLimits{1u << 20, 4096});
  json::object ready;
  ready["path"] = watch->path();
  log->Append("ready", json::serialize(ready));

  const auto ex = ctx.stream.get_executor();
  asio::posix::stream_descriptor inotify(ex);
  boost::system::error_code ec;
  inotify.assign(::dup(watch->fd()), ec);
  bool stop = false;
  TaskGroup producer(ex);
  producer.Spawn(ProduceFileEvents(*watch, target->fs, inotify, *log, stop));
  co_await ServeEvents(ctx, log, 0, true, [](std::string& out, const Event& e) {
    sse::AppendEvent(out, 0, e.name, e.data);
  });
  stop = true;
  inotify.cancel(ec);
  co_await producer.Join();
  inotify.close(ec);
}

}  // namespace sandstream::api
