// Serves one SSE response as a cursor over an OutputLog: replays what the client has not
// seen, then follows new entries as they are appended. The log's writer never waits for it; a
// cursor that fell out of the window sends a `gap` and carries on. A client that goes away
// ends only this response.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <functional>
#include <memory>

#include "api/http.h"
#include "api/sse.h"
#include "process/output_log.h"

namespace sandstream::api {

struct StreamSource {
  OutputLog* log = nullptr;
  std::shared_ptr<const void> owner;  // keeps `log` alive for the whole response
  std::function<void(std::string& out, const LogEntry& entry)> render;
  sse::Format format = sse::Format::kPandastack;
};

struct CursorOptions {
  uint64_t after_seq = 0;  // entries after this seq are sent
  bool follow = true;      // false: end after what is retained now
};

boost::asio::awaitable<void> ServeStream(Context& ctx, StreamSource source, CursorOptions cursor);

// Where a reader starts: after Last-Event-ID (else ?since=, else `fallback`), moved forward to
// the last ?tail=N output chunks of `log` when tail is given. Bad numbers: kInvalidRequest.
Result<uint64_t> StartPoint(const Context& ctx, const OutputLog& log, uint64_t fallback);

// Whether a log route answers as SSE: `follow` is set or the client accepts text/event-stream.
bool WantsStream(const Context& ctx);

// Where a reader resumes: Last-Event-ID, else ?since=, else `fallback`.
// Returns kInvalidRequest for a value that is not a non-negative integer.
Result<uint64_t> ResumePoint(const Context& ctx, uint64_t fallback);

}  // namespace sandstream::api
