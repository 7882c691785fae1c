// What the file routes share, sandstream's (routes/files.cc) and the dialects' (cloudflare/,
// e2b/): the header fields of a download, safe whatever bytes a file's name holds, the one way
// to write a file, watches and their quota. No handlers: those are in routes/routes.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include <boost/asio/awaitable.hpp>

#include "api/http.h"
#include "base/async.h"
#include "base/result.h"
#include "process/event_log.h"
#include "sandbox/files.h"
#include "service/file_sink.h"
#include "service/service.h"

namespace sandstream::api {

// `Content-Type` from the extension (else application/octet-stream).
std::string_view MimeType(std::string_view path);

// `inline` or `attachment` (RFC 6266) with an ASCII `filename` (control characters, non-ASCII,
// `"`, `\` and `%` replaced by `_`) and `filename*=UTF-8''...` (RFC 5987; control characters
// replaced, invalid UTF-8 made valid).
std::string ContentDisposition(std::string_view disposition, std::string_view name);

// The header lines ("Name: value\r\n" each) of a download of the sandbox file `path` that
// depend on it: its type, disposition, X-File-Path (percent-encoded) and the guards that keep
// a browser from running it on the API's origin. Content that a browser would run (HTML, SVG,
// XML, scripts, PDF, anything unknown) is always an attachment.
std::string DownloadHeaders(std::string_view path);

// The permission bits of `mode` as four octal digits ("0644"), as file routes show a mode.
std::string ModeText(uint32_t mode);

// A directory listing holds at most this many entries.
inline constexpr size_t kListLimit = 10000;

// Runs `fn` on the service's blocking pool (OffThread in base/async.h): every call that touches
// a sandbox's files may block on its disk.
template <class Fn>
boost::asio::awaitable<std::invoke_result_t<Fn&>> OffThread(Context& ctx, Fn fn) {
  co_return co_await sandstream::OffThread(ctx.service.blocking_pool(), std::move(fn));
}

// `path` as an absolute path of the sandbox: a relative one is taken from its cwd.
std::string Absolute(const SandboxEntry& sb, std::string_view path);

// Sends the file `path` of `fs` as a download: 200 with DownloadHeaders, its length, mode and
// mtime, the bytes read on the blocking pool; an error (not found, a directory) before any byte.
boost::asio::awaitable<void> ServeDownload(Context& ctx, const sandbox::SandboxFs& fs,
                                           const std::string& path);

// A write of one file of sandbox `sandbox_id` as PUT files/content does it: through the
// sandbox's own writer, so the bytes count against its disk; a new file that fails half-way is
// removed again. Open, Write as the bytes come, then Close, always: the file stays open until
// Close.
struct WrittenFile {
  sandbox::FileInfo info;
  bool created = false;
};
class FileUpload {
 public:
  static boost::asio::awaitable<Result<std::unique_ptr<FileUpload>>> Open(
      Context& ctx, std::string sandbox_id, const sandbox::SandboxFs& fs, std::string path,
      std::optional<uint32_t> mode, bool parents);
  FileUpload(const FileUpload&) = delete;
  FileUpload& operator=(const FileUpload&) = delete;

  boost::asio::awaitable<Result<void>> Write(std::string_view data);
  // Ends the write; with `failure` (the bytes stopped coming), undoes it as far as it can and
  // returns that failure, saying whether an existing file was left truncated.
  boost::asio::awaitable<Result<WrittenFile>> Close(std::optional<Error> failure = {});
  const std::string& path() const { return file_.info.path; }

 private:
  FileUpload(Context& ctx, const sandbox::SandboxFs& fs, sandbox::OpenedFile file)
      : ctx_(ctx), fs_(fs), file_(std::move(file)) {}

  Context& ctx_;
  const sandbox::SandboxFs& fs_;
  sandbox::OpenedFile file_;
  std::optional<FileSink> sink_;
  std::optional<Error> failed_;
};

// A whole FileUpload, its bytes handed by `feed` to the sink it is given.
using Feed = std::function<boost::asio::awaitable<std::optional<Error>>(const BodySink&)>;
boost::asio::awaitable<Result<WrittenFile>> WriteFile(Context& ctx, std::string sandbox_id,
                                                      const sandbox::SandboxFs& fs,
                                                      std::string path,
                                                      std::optional<uint32_t> mode, bool parents,
                                                      Feed feed);

// Watches the directory `path` of sandbox `sandbox_id` (and, `recursive`, those below it) while
// `serve` runs: the watch's events go into the log `serve` is given, first `ready` ({"path"}),
// then create, modify, delete, move and overflow (FileEvent as JSON: type, path, from, is_dir,
// timestamp), and an `error` that ends it when the directory goes. Counts against the watch
// quota. An error before the watch starts is returned, and `serve` is not called.
using WatchServe = std::function<boost::asio::awaitable<void>(std::shared_ptr<EventLog>)>;
boost::asio::awaitable<std::optional<Error>> RunWatch(Context& ctx, std::string sandbox_id,
                                                      const sandbox::SandboxFs& fs,
                                                      const std::string& path, bool recursive,
                                                      WatchServe serve);

// File watches open now, per sandbox, per tenant and in all. Each holds an inotify instance,
// and those come from one kernel pool per uid (fs.inotify.max_user_instances, 128 by default)
// that the daemon shares with everything else running as its user. A tenant's sandboxes hold
// at most its share of them, so that one tenant cannot take them all; the admin's have none.
class WatchQuota {
 public:
  WatchQuota(size_t per_sandbox, size_t total, size_t tenant_share)
      : per_sandbox_(per_sandbox), total_(total), tenant_share_(tenant_share) {}

  // Held while a watch is open; gives it back when destroyed.
  class Ticket {
   public:
    Ticket(Ticket&& other) noexcept;
    Ticket& operator=(Ticket&&) = delete;
    ~Ticket();

   private:
    friend class WatchQuota;
    Ticket(WatchQuota* quota, std::string sandbox_id, std::string tenant)
        : quota_(quota), sandbox_id_(std::move(sandbox_id)), tenant_(std::move(tenant)) {}
    WatchQuota* quota_;
    std::string sandbox_id_;
    std::string tenant_;
  };

  // A watch of sandbox `sandbox_id` of `tenant` ("": the admin's, which has no share), whose
  // share is `share` (0: the default one). kQuotaExceeded, naming the limit, when the sandbox,
  // its tenant or the daemon has all it may (after the reclaimer, when there is one, has given
  // back what it could).
  Result<Ticket> Take(const std::string& sandbox_id, const std::string& tenant = {},
                      size_t share = 0);
  // Called when the quota is full: gives back the tickets of watches nobody uses any more
  // (the polled watchers of E2B's adapter, which hold theirs between requests).
  void SetReclaimer(void (*reclaim)()) { reclaim_ = reclaim; }
  size_t open() const { return open_; }
  size_t tenant_share() const { return tenant_share_; }

 private:
  void Give(const std::string& sandbox_id, const std::string& tenant);
  // Whether a watch of that sandbox or tenant, or any watch, would pass a limit now.
  bool Full(const std::string& sandbox_id, const std::string& tenant, size_t share) const;

  size_t per_sandbox_;
  size_t total_;
  size_t tenant_share_;
  size_t open_ = 0;
  std::map<std::string, size_t, std::less<>> by_sandbox_;
  std::map<std::string, size_t, std::less<>> by_tenant_;
  void (*reclaim_)() = nullptr;
};

// The watches of every route that watches files, sandstream's and the adapters'.
WatchQuota& FileWatchQuota();
// A ticket of FileWatchQuota() for a watch of sandbox `sandbox_id`, within its tenant's share:
// the tenant's `watches` quota when it has one, else the default share.
Result<WatchQuota::Ticket> TakeWatch(Context& ctx, const std::string& sandbox_id);
// The directories one recursive watch may hold.
inline constexpr size_t kMaxWatchedDirs = 1024;

}  // namespace sandstream::api
