#include "api/stream.h"

#include <array>
#include <charconv>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "service/service.h"

namespace sandstream::api {
namespace asio = boost::asio;

namespace {

// Room at the front of every batch for its chunk-size line ("ffffffff\r\n"), so a chunk goes
// out in one write without copying the events after it.
constexpr size_t kChunkRoom = 10;
// SO_SNDBUF of a stream's socket; the kernel doubles it for its own bookkeeping.
constexpr int kSendBuffer = 1 << 20;

Result<uint64_t> ParseCount(std::string_view text, std::string_view what) {
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    return Error{ErrorCode::kInvalidRequest,
                 std::string(what) + ", got '" + std::string(text.substr(0, 64)) + "'"};
  }
  return value;
}

}  // namespace

StreamResponse::StreamResponse(Context& ctx, std::string_view content_type)
    : ctx_(ctx), state_(std::make_shared<State>()), keepalive_(ctx.server.options().keepalive) {
  ctx_.status = 200;
  ctx_.streamed = true;  // until it ends cleanly on a connection that can carry more
  chunked_ = ctx_.req.version() >= 11;
  handle_.wake = [state = state_] {
    if (state->wake) state->wake();
  };
  handle_.StandOn(ctx_.principal);
  registration_ = ctx_.server.AddStream(&handle_);
  ++ctx_.service.metrics().streams_open;
  ctx_.service.quotas().StreamOpened(ctx_.principal.tenant);
  head_ =
      "HTTP/1.1 200 OK\r\n"
      "Server: sandstreamd\r\n"
      "Content-Type: " +
      std::string(content_type) +
      "\r\n"
      "Cache-Control: no-cache\r\n"
      "X-Accel-Buffering: no\r\n";
  head_ += chunked_ ? "Transfer-Encoding: chunked\r\n" : "Connection: close\r\n";
  if (chunked_ && !ctx_.req.keep_alive()) head_ += "Connection: close\r\n";
  head_ += "X-Request-Id: " + ctx_.request_id + "\r\n\r\n";
  out_.reserve(kBatchBytes + 4096);
  out_.assign(kChunkRoom, ' ');
  // What the kernel holds for a client is in flight: a cut loses it, and a resume can only be
  // whole while the log still has it (the resume slack). Bounded here, not left to autotuning.
  boost::system::error_code ignored;
  ctx_.stream.socket().set_option(asio::socket_base::send_buffer_size(kSendBuffer), ignored);
  // Readable while streaming means the client closed (or broke the protocol): stop then.
  ctx_.stream.socket().async_wait(asio::socket_base::wait_read,
                                  [state = state_](const boost::system::error_code& ec) {
                                    if (ec == asio::error::operation_aborted) return;
                                    state->gone = true;
                                    if (state->wake) state->wake();
                                  });
}

StreamResponse::~StreamResponse() {
  --ctx_.service.metrics().streams_open;
  ctx_.service.quotas().StreamClosed(ctx_.principal.tenant);
  ctx_.server.RemoveStream(registration_);
  state_->wake = nullptr;
  boost::system::error_code ignored;
  ctx_.stream.socket().cancel(ignored);
}

asio::awaitable<bool> StreamResponse::Flush() {
  if (state_->gone) co_return false;
  const size_t body = out_.size() - kChunkRoom;
  if (body == 0 && head_.empty()) co_return true;
  size_t from = kChunkRoom;
  if (chunked_ && body > 0) {
    // A zero-size chunk would end the response: only non-empty batches are framed.
    char hex[16];
    auto [end, ec] = std::to_chars(hex, hex + sizeof hex, body, 16);
    const size_t digits = static_cast<size_t>(end - hex);
    from = kChunkRoom - digits - 2;
    std::copy(hex, end, out_.begin() + static_cast<std::ptrdiff_t>(from));
    out_[kChunkRoom - 2] = '\r';
    out_[kChunkRoom - 1] = '\n';
    out_ += "\r\n";
  }
  auto [ec, n] = co_await WriteAll(ctx_, asio::buffer(head_),
                                   asio::buffer(out_.data() + from, out_.size() - from));
  ctx_.service.metrics().stream_bytes_total += n;
  head_.clear();
  out_.resize(kChunkRoom);
  if (out_.capacity() > 4 * kBatchBytes) {
    out_.shrink_to_fit();
    out_.reserve(kBatchBytes + 4096);
  }
  if (ec) state_->gone = true;
  co_return !ec;
}

asio::awaitable<void> StreamResponse::Finish(StreamEnd end, sse::Format format) {
  if (end == StreamEnd::kStopping) {
    const Error reason = StopReason();
    sse::AppendError(out_, format, reason.code, reason.message);
  }
  co_await Close(end);
}

asio::awaitable<void> StreamResponse::Close(StreamEnd end) {
  if (!co_await Flush() || !chunked_) co_return;
  auto [ec, n] = co_await WriteAll(ctx_, asio::buffer("0\r\n\r\n", 5));
  (void)n;
  // A response that ended whole leaves a connection the client may send its next request on.
  ctx_.streamed = ec || end != StreamEnd::kEnded || !ctx_.req.keep_alive();
}

Error StreamResponse::StopReason() const {
  if (handle_.reason) return *handle_.reason;
  return Error{ErrorCode::kShuttingDown, "sandstreamd is shutting down"};
}

Result<Flow> FlowFromQuery(const Context& ctx, Flow fallback) {
  auto text = ctx.Query("flow");
  if (!text) return fallback;
  auto flow = ParseFlow(*text);
  if (!flow) return Error{ErrorCode::kInvalidRequest, "flow must be \"wait\" or \"skip\""};
  return *flow;
}

asio::awaitable<void> ServeStream(Context& ctx, const OutputStream& stream) {
  Process& process = *stream.process;
  const uint64_t after = std::min(stream.after_seq, process.log().last_seq());
  // EventSource stops reconnecting on 204: a follower that has seen the exit is done.
  if (stream.follow && process.log().ended() && after >= process.log().last_seq()) {
    co_return co_await ReplyEmpty(ctx, http::status::no_content);
  }
  auto& metrics = ctx.service.metrics();
  StreamResponse sse(ctx);
  OutputCursor cursor(stream.process, ctx.stream.get_executor(), after, stream.flow);
  sse.Watch(cursor);
  const auto render = [&](const OutputLog::Slice& slice) {
    if (slice.gap) {
      sse::AppendGap(sse.out(), stream.format, *slice.gap);
      ++metrics.gaps_total;
    }
    for (const LogEntry* e : slice.entries) {
      sse::AppendEntry(sse.out(), stream.format, stream.kind, stream.encoding, process, *e);
    }
  };
  const StreamEnd end = co_await Pump(cursor, sse, render, stream.follow);
  if (end == StreamEnd::kGone) cursor.Park(ctx.service.options().resume_grace);
  co_await sse.Finish(end, stream.format);
}

void RenderEvent(std::string& out, const Event& e) {
  sse::AppendEvent(out, e.seq, e.name, e.data);
}

asio::awaitable<void> ServeEvents(Context& ctx, std::shared_ptr<EventLog> log, uint64_t after_seq,
                                  bool follow, EventRender render) {
  StreamResponse sse(ctx);
  const uint64_t after = std::min(after_seq, log->last_seq());
  EventCursor cursor(std::move(log), ctx.stream.get_executor(), after);
  sse.Watch(cursor);
  auto& metrics = ctx.service.metrics();
  const auto render_slice = [&](const EventLog::Slice& slice) {
    if (slice.gap) {
      sse::AppendGap(sse.out(), sse::Format::kPandastack, *slice.gap);
      ++metrics.gaps_total;
    }
    for (const Event* e : slice.entries) render(sse.out(), *e);
  };
  const StreamEnd end = co_await Pump(cursor, sse, render_slice, follow);
  co_await sse.Finish(end, sse::Format::kPandastack);
}

Result<uint64_t> ResumePoint(const Context& ctx, uint64_t fallback) {
  // Both are checked though the header wins: a bad number (an empty one too) is refused, never
  // silently dropped.
  std::vector<std::string_view> given;
  if (auto since = ctx.Query("since")) given.push_back(*since);
  if (auto it = ctx.req.find("Last-Event-ID"); it != ctx.req.end()) {
    given.emplace_back(it->value());
  }
  uint64_t point = fallback;
  for (std::string_view text : given) {
    auto n = ParseCount(text, "Last-Event-ID / since must be a sequence number (0 to 2^64-1)");
    if (!n) return std::move(n).error();
    point = *n;
  }
  return point;
}

Result<std::optional<uint64_t>> TailQuery(const Context& ctx) {
  auto tail = ctx.Query("tail");
  if (!tail) return std::optional<uint64_t>();
  auto n = ParseCount(*tail, "tail must be a whole number (0 to 2^64-1)");
  if (!n) return std::move(n).error();
  return std::optional<uint64_t>(*n);
}

bool WantsStream(const Context& ctx, bool follow) {
  return follow ||
         ctx.Header(http::field::accept).find("text/event-stream") != std::string_view::npos;
}

}  // namespace sandstream::api
