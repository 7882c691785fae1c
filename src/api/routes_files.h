// What routes_files.cc holds beyond its handlers (routes.h), apart so tests can reach it: the
// header fields of a download, safe whatever bytes a file's name holds, and the watch quota.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>

#include "base/result.h"

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

// File watches open now, per sandbox and in all. Each holds an inotify instance, and those
// come from one kernel pool per uid (fs.inotify.max_user_instances, 128 by default) that the
// daemon shares with everything else running as its user.
class WatchQuota {
 public:
  WatchQuota(size_t per_sandbox, size_t total) : per_sandbox_(per_sandbox), total_(total) {}

  // Held while a watch is open; gives it back when destroyed.
  class Ticket {
   public:
    Ticket(Ticket&& other) noexcept;
    Ticket& operator=(Ticket&&) = delete;
    ~Ticket();

   private:
    friend class WatchQuota;
    Ticket(WatchQuota* quota, std::string sandbox_id)
        : quota_(quota), sandbox_id_(std::move(sandbox_id)) {}
    WatchQuota* quota_;
    std::string sandbox_id_;
  };

  // kQuotaExceeded, naming the limit, when the sandbox or the daemon has all it may.
  Result<Ticket> Take(const std::string& sandbox_id);
  size_t open() const { return open_; }

 private:
  void Give(const std::string& sandbox_id);

  size_t per_sandbox_;
  size_t total_;
  size_t open_ = 0;
  std::map<std::string, size_t, std::less<>> by_sandbox_;
};

}  // namespace sandstream::api
