// Files of a sandbox: read (streamed), write (streamed upload), list, stat, mkdir, delete,
// move, and an SSE watch of changes. Paths resolve inside the sandbox's root only
// (sandbox/files.h); a relative path is relative to the sandbox's cwd. Every file syscall runs
// on the service's blocking pool, never on the I/O thread.
#include "api/routes/files.h"

#include <type_traits>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/json.hpp>

#include "api/common/lookup.h"
#include "api/request.h"
#include "api/routes/routes.h"
#include "api/server.h"
#include "api/sse.h"
#include "api/stream.h"
#include "api/websocket.h"
#include "base/utf8.h"
#include "sandbox/files.h"
#include "service/file_sink.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

constexpr size_t kChunk = 256 * 1024;
// Open watches; in all: half the kernel's default fs.inotify.max_user_instances (128), so the
// host's other users of the daemon's uid keep the rest; a tenant's sandboxes, a quarter of
// those unless its `watches` quota says otherwise.
constexpr size_t kWatchesPerSandbox = 8;
constexpr size_t kWatchesInAll = 64;
constexpr size_t kWatchesPerTenant = kWatchesInAll / 4;

// Acting as `user` (uid 1000 inside) unless ?user=root.
Result<sandbox::SandboxFs> OpenFs(Context& ctx, const SandboxEntry& sb) {
  uint32_t uid = 1000;
  if (auto user = ctx.Query("user"); user && !user->empty()) {
    if (*user == "root")
      uid = 0;
    else if (*user != "user")
      return Invalid("user must be \"user\" or \"root\"");
  }
  return ctx.service.Files(sb.id, uid);
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

struct TypeEntry {
  std::string_view extension;
  std::string_view type;
  bool shown_inline;  // nothing a browser runs: text, JSON, YAML, raster images, media
};

constexpr TypeEntry kTypes[] = {
    {".txt", "text/plain; charset=utf-8", true},
    {".log", "text/plain; charset=utf-8", true},
    {".md", "text/markdown; charset=utf-8", true},
    {".csv", "text/csv; charset=utf-8", true},
    {".html", "text/html; charset=utf-8", false},
    {".htm", "text/html; charset=utf-8", false},
    {".css", "text/css; charset=utf-8", false},
    {".js", "text/javascript; charset=utf-8", false},
    {".mjs", "text/javascript; charset=utf-8", false},
    {".ts", "text/plain; charset=utf-8", true},
    {".py", "text/x-python; charset=utf-8", true},
    {".sh", "text/x-shellscript; charset=utf-8", true},
    {".json", "application/json", true},
    {".xml", "application/xml", false},
    {".yaml", "application/yaml", true},
    {".yml", "application/yaml", true},
    {".png", "image/png", true},
    {".jpg", "image/jpeg", true},
    {".jpeg", "image/jpeg", true},
    {".gif", "image/gif", true},
    {".webp", "image/webp", true},
    {".svg", "image/svg+xml", false},
    {".ico", "image/x-icon", true},
    {".pdf", "application/pdf", false},
    {".zip", "application/zip", false},
    {".gz", "application/gzip", false},
    {".tar", "application/x-tar", false},
    {".wasm", "application/wasm", false},
    {".mp3", "audio/mpeg", true},
    {".mp4", "video/mp4", true},
    {".wav", "audio/wav", true},
};
constexpr TypeEntry kUnknownType = {"", "application/octet-stream", false};

const TypeEntry& TypeOf(std::string_view path) {
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  if (dot == std::string_view::npos || (slash != std::string_view::npos && dot < slash)) {
    return kUnknownType;
  }
  std::string ext(path.substr(dot));
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& entry : kTypes) {
    if (entry.extension == ext) return entry;
  }
  return kUnknownType;
}

bool IsAsciiAlnum(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

// RFC 3986 percent-encoding: letters, digits and `keep` stay, every other byte is %XX.
void AppendPercentEncoded(std::string& out, std::string_view bytes, std::string_view keep) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (IsAsciiAlnum(c) || keep.find(ch) != std::string_view::npos) {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
}

}  // namespace

std::string_view MimeType(std::string_view path) {
  return TypeOf(path).type;
}

std::string ContentDisposition(std::string_view disposition, std::string_view name) {
  std::string utf8;
  AppendSanitizedUtf8(utf8, name);
  for (char& c : utf8) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '_';
  }
  std::string out(disposition);
  out += "; filename=\"";
  for (size_t i = 0; i < utf8.size();) {
    const auto c = static_cast<unsigned char>(utf8[i]);
    if (c >= 0x80) {
      out += '_';
      i += std::max<size_t>(1, Utf8SequenceAt(utf8, i));
      continue;
    }
    out += (c == '"' || c == '\\' || c == '%') ? '_' : static_cast<char>(c);
    ++i;
  }
  out += "\"; filename*=UTF-8''";
  AppendPercentEncoded(out, utf8, "!#$&+-.^_`|~");  // RFC 5987 attr-char
  return out;
}

std::string DownloadHeaders(std::string_view path) {
  const TypeEntry& type = TypeOf(path);
  const size_t slash = path.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  std::string out = "Content-Type: ";
  out += type.type;
  out += "\r\nContent-Disposition: ";
  out += ContentDisposition(type.shown_inline ? "inline" : "attachment", name);
  // Even shown inline, a file is the sandbox's content, not the API's: never sniffed into
  // something that runs, and any document it turns out to be runs in an opaque origin.
  out += "\r\nX-Content-Type-Options: nosniff";
  out += "\r\nContent-Security-Policy: default-src 'none'; sandbox";
  out += "\r\nX-File-Path: ";
  AppendPercentEncoded(out, path, "-._~/");
  out += "\r\n";
  return out;
}

WatchQuota& FileWatchQuota() {
  // The pool it guards is per uid, so the count is the process's. Only the I/O thread uses it.
  static WatchQuota* const quota =
      new WatchQuota(kWatchesPerSandbox, kWatchesInAll, kWatchesPerTenant);
  return *quota;
}

Result<WatchQuota::Ticket> TakeWatch(Context& ctx, const std::string& sandbox_id) {
  const SandboxEntry* sb = ctx.service.Find(sandbox_id);
  const std::string tenant = sb ? sb->tenant : std::string();
  const Tenant* t = tenant.empty() ? nullptr : ctx.service.quotas().TenantOf(tenant);
  const size_t share = t ? static_cast<size_t>(t->quotas.watches) : 0;
  return FileWatchQuota().Take(sandbox_id, tenant, share);
}

WatchQuota::Ticket::Ticket(Ticket&& other) noexcept
    : quota_(std::exchange(other.quota_, nullptr)),
      sandbox_id_(std::move(other.sandbox_id_)),
      tenant_(std::move(other.tenant_)) {}

WatchQuota::Ticket::~Ticket() {
  if (quota_) quota_->Give(sandbox_id_, tenant_);
}

bool WatchQuota::Full(const std::string& sandbox_id, const std::string& tenant,
                      size_t share) const {
  const auto held = by_sandbox_.find(sandbox_id);
  const auto owned = by_tenant_.find(tenant);
  return open_ >= total_ || (held != by_sandbox_.end() && held->second >= per_sandbox_) ||
         (!tenant.empty() && owned != by_tenant_.end() && owned->second >= share);
}

Result<WatchQuota::Ticket> WatchQuota::Take(const std::string& sandbox_id,
                                            const std::string& tenant, size_t share) {
  if (share == 0) share = tenant_share_;
  if (reclaim_ && Full(sandbox_id, tenant, share)) reclaim_();
  const auto it = by_sandbox_.find(sandbox_id);
  if (it != by_sandbox_.end() && it->second >= per_sandbox_) {
    return Error{ErrorCode::kQuotaExceeded,
                 "sandbox " + sandbox_id + " has " + std::to_string(per_sandbox_) +
                     " file watches open, the most a sandbox may (each holds one of the "
                     "host's inotify instances); close one first"};
  }
  if (const auto owned = by_tenant_.find(tenant);
      !tenant.empty() && owned != by_tenant_.end() && owned->second >= share) {
    return Error{ErrorCode::kQuotaExceeded,
                 "tenant '" + tenant + "' has " + std::to_string(share) +
                     " file watches open, its share (quota watches); close one first"};
  }
  if (open_ >= total_) {
    return Error{ErrorCode::kQuotaExceeded,
                 "the daemon has " + std::to_string(total_) +
                     " file watches open, the most it keeps at once (each holds one of the "
                     "host's inotify instances, fs.inotify.max_user_instances); try again later"};
  }
  ++by_sandbox_[sandbox_id];
  if (!tenant.empty()) ++by_tenant_[tenant];
  ++open_;
  return Ticket(this, sandbox_id, tenant);
}

void WatchQuota::Give(const std::string& sandbox_id, const std::string& tenant) {
  --open_;
  const auto it = by_sandbox_.find(sandbox_id);
  if (it != by_sandbox_.end() && --it->second == 0) by_sandbox_.erase(it);
  const auto owned = by_tenant_.find(tenant);
  if (owned != by_tenant_.end() && --owned->second == 0) by_tenant_.erase(owned);
}

asio::awaitable<void> ServeDownload(Context& ctx, const sandbox::SandboxFs& fs,
                                    const std::string& path) {
  auto file = co_await OffThread(ctx, [&] { return fs.OpenRead(path); });
  if (!file) co_return co_await ReplyError(ctx, file.error());

  const uint64_t size = file->info.size;
  std::string head = "HTTP/1.1 200 OK\r\nServer: sandstreamd\r\n";
  head += DownloadHeaders(file->info.path);
  head += "Content-Length: " + std::to_string(size);
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
    const size_t want = std::min<uint64_t>(kChunk, size - sent);
    const Result<size_t> n = co_await OffThread(ctx, [&] { return file->Read(buf.data(), want); });
    if (!n || *n == 0) break;  // the file shrank meanwhile
    auto [ec, w] =
        co_await asio::async_write(ctx.stream.socket(), asio::buffer(buf.data(), *n), Tuple());
    (void)w;
    if (ec) break;
    sent += *n;
  }
  // Fewer bytes than announced: only closing the connection tells the client.
  if (sent < size) ctx.streamed = true;
}

asio::awaitable<void> FilesRead(Context& ctx) {
  auto target = FindTarget(ctx);
  if (!target) co_return co_await ReplyError(ctx, target.error());
  co_await ServeDownload(ctx, target->fs, target->path);
}

std::string Absolute(const SandboxEntry& sb, std::string_view path) {
  if (path.starts_with('/')) return std::string(path);
  return sb.cwd + "/" + std::string(path);
}

asio::awaitable<Result<std::unique_ptr<FileUpload>>> FileUpload::Open(
    Context& ctx, std::string sandbox_id, const sandbox::SandboxFs& fs, std::string path,
    std::optional<uint32_t> mode, bool parents) {
  auto file = co_await OffThread(ctx, [&] { return fs.OpenWrite(path, mode, parents); });
  if (!file) co_return std::move(file).error();
  std::unique_ptr<FileUpload> upload(new FileUpload(ctx, fs, std::move(*file)));
  Result<FileSink> sink =
      co_await FileSink::Open(ctx.service, std::move(sandbox_id), upload->file_);
  if (sink) {
    upload->sink_.emplace(std::move(*sink));
  } else {
    upload->failed_ = sink.error();
  }
  co_return upload;
}

asio::awaitable<Result<void>> FileUpload::Write(std::string_view data) {
  if (failed_) co_return *failed_;
  Result<void> written = co_await sink_->Write(data);
  if (!written) failed_ = written.error();
  co_return written;
}

asio::awaitable<Result<WrittenFile>> FileUpload::Close(std::optional<Error> failure) {
  if (!failure) failure = failed_;
  if (sink_) {
    Result<void> closed = co_await sink_->Close();
    if (!closed && !failure) failure = std::move(closed).error();
  }
  // Closing, removing a half-written new file and the final stat all touch the sandbox's files.
  const std::string shown = file_.info.path;
  const bool created = file_.created;
  Result<sandbox::FileInfo> info = co_await OffThread(ctx_, [&]() -> Result<sandbox::FileInfo> {
    file_.fd.reset();
    if (!failure) return fs_.Stat(shown);
    if (created) (void)fs_.Remove(shown, false);
    return *failure;
  });
  if (failure && !created) failure->message += "; " + shown + " was truncated";
  if (failure) co_return *failure;
  if (!info) co_return std::move(info).error();
  co_return WrittenFile{std::move(*info), created};
}

asio::awaitable<Result<WrittenFile>> WriteFile(Context& ctx, std::string sandbox_id,
                                               const sandbox::SandboxFs& fs, std::string path,
                                               std::optional<uint32_t> mode, bool parents,
                                               Feed feed) {
  auto upload =
      co_await FileUpload::Open(ctx, std::move(sandbox_id), fs, std::move(path), mode, parents);
  if (!upload) co_return std::move(upload).error();
  FileUpload& u = **upload;
  const BodySink write = [&u](std::string_view chunk) { return u.Write(chunk); };
  std::optional<Error> failure = co_await feed(write);
  co_return co_await u.Close(std::move(failure));
}

namespace {

asio::awaitable<std::optional<Error>> ReceiveUpload(Context& ctx, const BodySink& sink) {
  co_return co_await ReceiveBody(ctx, sink, "file upload (max_file_bytes)",
                                 ctx.server.options().max_file_bytes);
}

}  // namespace

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
  auto parents = ctx.QueryFlag("parents", true);
  if (!parents) co_return co_await ReplyError(ctx, parents.error());
  const Feed upload = [&ctx](const BodySink& sink) { return ReceiveUpload(ctx, sink); };
  auto written =
      co_await WriteFile(ctx, ctx.params.at(0), target->fs, target->path, *mode, *parents, upload);
  if (!ctx.body_parser || ctx.body_parser->is_done()) ctx.req.keep_alive(keep_alive);
  if (!written) co_return co_await ReplyError(ctx, written.error());
  co_await ReplyJson(ctx, written->created ? http::status::created : http::status::ok,
                     InfoJson(written->info));
}

asio::awaitable<void> FilesStat(Context& ctx) {
  auto target = FindTarget(ctx);
  if (!target) co_return co_await ReplyError(ctx, target.error());
  auto info = co_await OffThread(ctx, [&] { return target->fs.Stat(target->path); });
  if (!info) co_return co_await ReplyError(ctx, info.error());
  co_await ReplyJson(ctx, http::status::ok, InfoJson(*info));
}

asio::awaitable<void> FilesList(Context& ctx) {
  auto target = FindTarget(ctx);
  if (!target) co_return co_await ReplyError(ctx, target.error());
  bool truncated = false;
  auto entries = co_await OffThread(
      ctx, [&] { return target->fs.List(target->path, kListLimit, &truncated); });
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
  const uint32_t bits = mode->value_or(0755);
  auto info = co_await OffThread(ctx, [&] { return fs->Mkdir(*path, bits, parents); });
  if (!info) co_return co_await ReplyError(ctx, info.error());
  co_await ReplyJson(ctx, http::status::created, InfoJson(*info));
}

asio::awaitable<void> FilesDelete(Context& ctx) {
  auto target = FindTarget(ctx);
  if (!target) co_return co_await ReplyError(ctx, target.error());
  auto recursive = ctx.QueryFlag("recursive");
  if (!recursive) co_return co_await ReplyError(ctx, recursive.error());
  Result<void> removed =
      co_await OffThread(ctx, [&] { return target->fs.Remove(target->path, *recursive); });
  if (!removed) co_return co_await ReplyError(ctx, removed.error());
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
  auto info = co_await OffThread(ctx, [&] { return fs->Move(*from, *to, overwrite); });
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

// Moves inotify's events into `log` until the watched directory goes or `stop` is set, one
// bounded batch per turn of the event loop.
asio::awaitable<void> ProduceFileEvents(Context& ctx, sandbox::FileWatch& watch,
                                        const sandbox::SandboxFs& fs,
                                        asio::posix::stream_descriptor& inotify, EventLog& log,
                                        const bool& stop) {
  while (!stop) {
    sandbox::FileWatch::Batch batch = watch.Drain();
    for (const auto& e : batch.events) log.Append(e.type, FileEventJson(e));
    if (batch.gone) {
      json::object error{{"code", ErrorCodeName(ErrorCode::kNotFound)},
                         {"message", "the watched directory " + watch.path() + " is gone"}};
      log.Append("error", json::serialize(error), {}, true);
      break;
    }
    if (watch.scanning()) {
      co_await OffThread(ctx, [&] {
        watch.Scan(fs);
        return true;
      });
      continue;
    }
    if (batch.more) {
      co_await asio::post(inotify.get_executor(), asio::use_awaitable);
      continue;
    }
    // Only right after a read found the queue empty: the reactor reports readiness by edges,
    // and one that came while nothing waited for it would be lost.
    auto [ec] = co_await inotify.async_wait(asio::posix::stream_descriptor::wait_read, Tuple());
    if (ec) break;
  }
}

}  // namespace

asio::awaitable<std::optional<Error>> RunWatch(Context& ctx, std::string sandbox_id,
                                               const sandbox::SandboxFs& fs,
                                               const std::string& path, bool recursive,
                                               WatchServe serve) {
  auto ticket = TakeWatch(ctx, sandbox_id);
  if (!ticket) co_return ticket.error();
  auto watch = co_await OffThread(
      ctx, [&] { return sandbox::FileWatch::Start(fs, path, recursive, kMaxWatchedDirs); });
  if (!watch) co_return watch.error();
  auto fd = watch->DupFd();
  if (!fd) co_return fd.error();
  // Watches are not resumable: a follower that falls behind the window gets a gap.
  auto log = std::make_shared<EventLog>(LogLimits{1u << 20, 4096});
  json::object ready;
  ready["path"] = watch->path();
  log->Append("ready", json::serialize(ready));

  const auto ex = ctx.stream.get_executor();
  asio::posix::stream_descriptor inotify(ex, fd->release());
  bool stop = false;
  TaskGroup producer(ex);
  producer.Spawn(ProduceFileEvents(ctx, *watch, fs, inotify, *log, stop));
  co_await serve(log);
  stop = true;
  boost::system::error_code ec;
  inotify.cancel(ec);
  co_await producer.Join();
  inotify.close(ec);
  // The last close of an inotify instance waits for the kernel to let go of its marks (an
  // RCU grace period): not on the I/O thread.
  co_await OffThread(ctx, [&] {
    sandbox::FileWatch closing = std::move(*watch);
    return true;
  });
  co_return std::nullopt;
}

asio::awaitable<void> FilesWatch(Context& ctx) {
  auto target = FindTarget(ctx);
  if (!target) co_return co_await ReplyError(ctx, target.error());
  auto recursive = ctx.QueryFlag("recursive", true);
  if (!recursive) co_return co_await ReplyError(ctx, recursive.error());
  const WatchServe serve = [&ctx](std::shared_ptr<EventLog> log) {
    return ServeEvents(ctx, std::move(log), 0, true, [](std::string& out, const Event& e) {
      sse::AppendEvent(out, 0, e.name, e.data);
    });
  };
  auto failed =
      co_await RunWatch(ctx, ctx.params.at(0), target->fs, target->path, *recursive, serve);
  if (failed) co_await ReplyError(ctx, *failed);
}

}  // namespace sandstream::api
