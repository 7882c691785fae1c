#include "api/stream.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <charconv>

#include "api/server.h"
#include "process/async_signal.h"
#include "service/service.h"

namespace sandstream::api {
namespace asio = boost::asio;

namespace {

constexpr uint64_t kBatchBytes = 256 * 1024;

constexpr std::string_view kHeader =
    "HTTP/1.1 200 OK\r\n"
    "Server: sandstreamd\r\n"
    "Content-Type: text/event-stream; charset=utf-8\r\n"
    "Cache-Control: no-cache\r\n"
    "X-Accel-Buffering: no\r\n"
    "Connection: close\r\n";

// Shared with the socket-readiness handler, which may outlive the coroutine frame.
struct Watch : OutputLog::Listener {
  explicit Watch(const asio::any_io_executor& ex) : wake(ex) {}
  void OnAppend() override { wake.Notify(); }
  AsyncSignal wake;
  bool client_gone = false;
};

}  // namespace

Result<uint64_t> ResumePoint(const Context& ctx, uint64_t fallback) {
  std::string_view text = ctx.Header("Last-Event-ID");
  if (text.empty()) {
    if (auto since = ctx.Query("since")) text = *since;
  }
  if (text.empty()) return fallback;
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size()) {
    return Error{ErrorCode::kInvalidRequest,
                 "Last-Event-ID / since must be a sequence number, got '" + std::string(text) + "'"};
  }
  return value;
}

bool WantsStream(const Context& ctx) {
  return ctx.QueryFlag("follow") ||
         ctx.Header(http::field::accept).find("text/event-stream") != std::string_view::npos;
}

Result<uint64_t> StartPoint(const Context& ctx, const OutputLog& log, uint64_t fallback) {
  auto after = ResumePoint(ctx, fallback);
  if (!after) return after;
  auto tail = ctx.Query("tail");
  if (!tail) return after;
  uint64_t n = 0;
  auto [ptr, ec] = std::from_chars(tail->data(), tail->data() + tail->size(), n);
  if (tail->empty() || ec != std::errc() || ptr != tail->data() + tail->size()) {
    return Error{ErrorCode::kInvalidRequest, "tail must be a non-negative number"};
  }
  return std::max(*after, log.SeqBeforeTail(n));
}

asio::awaitable<void> ServeStream(Context& ctx, StreamSource source, CursorOptions cursor) {
  ctx.streamed = true;
  ctx.status = 200;
  auto& metrics = ctx.service.metrics();
  auto watch = std::make_shared<Watch>(ctx.stream.get_executor());
  StreamHandle handle{&watch->wake, false};
  auto registration = ctx.server.AddStream(&handle);
  source.log->AddListener(watch.get());
  ++metrics.streams_open;

  std::string out;
  out.reserve(kBatchBytes + 4096);
  out += kHeader;
  out += "X-Request-Id: " + ctx.request_id + "\r\n\r\n";

  // Readable while streaming means the client closed (or broke the protocol): stop then.
  ctx.stream.socket().async_wait(asio::socket_base::wait_read,
                                 [watch](const boost::system::error_code& ec) {
                                   if (ec == asio::error::operation_aborted) return;
                                   watch->client_gone = true;
                                   watch->wake.Notify();
                                 });

  uint64_t after = cursor.after_seq;
  std::optional<uint64_t> offset;  // the client's output offset, once known exactly
  const auto keepalive = ctx.server.options().keepalive;
  for (;;) {
    if (handle.stopping) {
      sse::AppendError(out, source.format, ErrorCode::kShuttingDown, "sandstreamd is shutting down");
      co_await asio::async_write(ctx.stream.socket(), asio::buffer(out),
                                 asio::as_tuple(asio::use_awaitable));
      break;
    }
    auto slice = source.log->Read(after, kBatchBytes, offset);
    if (slice.gap) {
      sse::AppendGap(out, source.format, *slice.gap);
      ++metrics.gaps_total;
      after = slice.gap->to_seq;
    }
    for (const LogEntry* e : slice.entries) {
      source.render(out, *e);
      after = e->seq;
      offset = e->offset + e->data.size();
    }
    const bool done = source.log->ended() && after >= source.log->last_seq();
    if (!out.empty()) {
      auto [ec, n] = co_await asio::async_write(ctx.stream.socket(), asio::buffer(out),
                                                asio::as_tuple(asio::use_awaitable));
      metrics.stream_bytes_total += n;
      out.clear();
      if (ec) break;
      if (out.capacity() > 4 * kBatchBytes) out.shrink_to_fit();
      continue;  // more may have arrived while writing
    }
    if (done || !cursor.follow || watch->client_gone) break;
    if (!co_await watch->wake.Wait(keepalive)) sse::AppendComment(out, "keepalive");
  }

  --metrics.streams_open;
  source.log->RemoveListener(watch.get());
  ctx.server.RemoveStream(registration);
  boost::system::error_code ignored;
  ctx.stream.socket().cancel(ignored);
}

}  // namespace sandstream::api
