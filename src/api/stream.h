// The one stream primitive: a cursor (process/cursor.h) read into a sink until its log ends,
// the client goes away or the daemon stops. Two sinks: an SSE response (this file) and a
// WebSocket (websocket.h). Every streaming route is a cursor, a sink and a renderer.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <string>

#include "api/http.h"
#include "api/server.h"
#include "api/sse.h"
#include "process/cursor.h"
#include "process/event_log.h"
#include "process/output_log.h"

namespace sandstream::api {

enum class StreamEnd { kEnded, kGone, kStopping };

// Reads `cursor` into `sink` until the log ends (without `follow`: until what it holds now has
// been sent), the client goes or the daemon stops. `render(slice)` puts a batch (its gap
// included) into the sink; the cursor lets the log drop it once the sink has it.
template <class Cursor, class Sink, class Render>
boost::asio::awaitable<StreamEnd> Pump(Cursor& cursor, Sink& sink, Render render, bool follow) {
  bool flushed = false;  // since the last look at the cursor and the flags
  for (;;) {
    if (sink.stopping()) co_return StreamEnd::kStopping;
    auto slice = cursor.Next(sink.batch_bytes());
    if (slice.gap || !slice.entries.empty()) {
      render(slice);
      if (!co_await sink.Flush()) co_return StreamEnd::kGone;
      cursor.Taken();
      flushed = false;
      continue;
    }
    if (cursor.AtEnd() || !follow) co_return StreamEnd::kEnded;
    if (sink.gone()) co_return StreamEnd::kGone;
    // What waits in the sink (the response header, a keepalive) goes out before the wait; a
    // wake-up that came while it went (output, the client leaving, shutdown) is not remembered,
    // so everything is looked at again before waiting.
    if (!flushed) {
      if (!co_await sink.Flush()) co_return StreamEnd::kGone;
      flushed = true;
      continue;
    }
    flushed = false;
    if (!co_await cursor.Wait(sink.keepalive())) sink.Keepalive();
  }
}

// A streaming response (SSE by default, or another body of `content_type` such as a Connect
// stream): `Transfer-Encoding: chunked` to HTTP/1.1 clients (each flush one chunk),
// close-delimited to HTTP/1.0 ones. Knows when the client has gone (the socket turns readable
// mid-stream) and when the daemon stops, and wakes the cursor then.
class StreamResponse {
 public:
  static constexpr uint64_t kBatchBytes = 256 * 1024;
  static constexpr std::string_view kEventStream = "text/event-stream; charset=utf-8";

  explicit StreamResponse(Context& ctx, std::string_view content_type = kEventStream);
  ~StreamResponse();
  StreamResponse(const StreamResponse&) = delete;
  StreamResponse& operator=(const StreamResponse&) = delete;

  // The signal to notify when the client goes or the daemon stops (the cursor's).
  template <class Cursor>
  void Watch(Cursor& cursor) {
    state_->wake = [&cursor] { cursor.Wake(); };
  }
  // Events are appended here, then sent by Flush().
  std::string& out() { return out_; }
  // Sends the headers (the first time) and what out() holds. False once the client is gone.
  boost::asio::awaitable<bool> Flush();
  // Ends the response: an `error` event if the daemon is stopping, the last chunk.
  boost::asio::awaitable<void> Finish(StreamEnd end, sse::Format format);
  // Ends the response with what out() holds and the last chunk; `end` says whether it ended
  // whole (the connection may then carry the client's next request).
  boost::asio::awaitable<void> Close(StreamEnd end);
  // Why the stream was stopped: the daemon stopping, or the reason it was given.
  Error StopReason() const;

  bool stopping() const { return handle_.stopping; }
  bool gone() const { return state_->gone; }
  uint64_t batch_bytes() const { return kBatchBytes; }
  SteadyClock::duration keepalive() const { return keepalive_; }
  void Keepalive() { sse::AppendComment(out_, "keepalive"); }

 private:
  // Shared with the readiness handler, which may outlive the response.
  struct State {
    bool gone = false;
    std::function<void()> wake;
  };

  Context& ctx_;
  std::shared_ptr<State> state_;
  StreamHandle handle_;
  std::list<StreamHandle*>::iterator registration_;
  std::string head_;  // the response header, until it is sent
  std::string out_;   // from kChunkRoom on: the events of this chunk
  bool chunked_ = false;
  SteadyClock::duration keepalive_;
};

// How a reader of a process's output paces it: `?flow=` on GET routes, `"flow"` in JSON bodies;
// `fallback` when absent. Anything else is kInvalidRequest.
Result<Flow> FlowFromQuery(const Context& ctx, Flow fallback);

// Serves a process's output log as SSE from after `after_seq`.
struct OutputStream {
  std::shared_ptr<Process> process;
  sse::Format format = sse::Format::kPandastack;
  sse::Kind kind = sse::Kind::kExec;
  sse::Encoding encoding = sse::Encoding::kUtf8;
  uint64_t after_seq = 0;
  bool follow = true;
  Flow flow = Flow::kWait;
};
boost::asio::awaitable<void> ServeStream(Context& ctx, const OutputStream& stream);

// Serves an event log as SSE from after `after_seq`; `render` writes one event (or nothing).
using EventRender = std::function<void(std::string& out, const Event& e)>;
boost::asio::awaitable<void> ServeEvents(Context& ctx, std::shared_ptr<EventLog> log,
                                         uint64_t after_seq, bool follow, EventRender render);
// The default rendering: `id`, `event` and `data` as the log holds them.
void RenderEvent(std::string& out, const Event& e);

// Where a reader starts: after Last-Event-ID (else ?since=, else `fallback`; past the end of
// `log`: its end), moved forward to the last ?tail=N output chunks of `log` when tail is given.
// Bad numbers: kInvalidRequest.
template <class Log>
Result<uint64_t> StartPoint(const Context& ctx, const Log& log, uint64_t fallback);

// Whether a log route answers as SSE: `follow` (its ?follow) is set or the client accepts
// text/event-stream.
bool WantsStream(const Context& ctx, bool follow);

// Where a reader resumes: Last-Event-ID, else ?since=, else `fallback`. A reader clamps it to
// the end of its log, so a number past the end never wraps round to a replay from the start.
// Returns kInvalidRequest when either is not a non-negative integer.
Result<uint64_t> ResumePoint(const Context& ctx, uint64_t fallback);

// ?tail=N, when given. Returns kInvalidRequest for a value that is not a non-negative integer.
Result<std::optional<uint64_t>> TailQuery(const Context& ctx);

template <class Log>
Result<uint64_t> StartPoint(const Context& ctx, const Log& log, uint64_t fallback) {
  auto resume = ResumePoint(ctx, fallback);
  if (!resume) return resume;
  const uint64_t after = std::min(*resume, log.last_seq());
  auto tail = TailQuery(ctx);
  if (!tail) return std::move(tail).error();
  if (!*tail) return after;
  return std::max(after, log.SeqBeforeTail(**tail));
}

}  // namespace sandstream::api
