// What the file routes share, sandstream's (api/routes/files.cc) and the dialects'
// (cloudflare/, e2b/): downloads, the one way to write a file, and watches. Every file syscall
// runs on the service's blocking pool, never on the I/O thread.
#include "api/common/files.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <utility>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/json.hpp>

#include "base/utf8.h"

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

std::string ModeText(uint32_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
  return buf;
}

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

}  // namespace sandstream::api
