#include "api/websocket.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>

#include "base/log.h"
#include "service/service.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace beast = boost::beast;

namespace {

constexpr size_t kHighWater = 256 * 1024;
// What queues up for a client that does not read: each stream adds at most one batch (rendered,
// escaped and framed) past kHighWater before it waits; replies to the client's own messages
// (errors of bad control messages, say) add up to kMaxReplies.
constexpr size_t kPerSink = 1u << 20;
constexpr size_t kMaxReplies = 1u << 20;
constexpr size_t kFrameCost = 64;
constexpr auto kHandshakeTimeout = std::chrono::seconds(30);
constexpr auto kFlushTimeout = std::chrono::seconds(5);

}  // namespace

WebSocket::WebSocket(Context& ctx)
    : ctx_(ctx),
      ws_(ctx.stream),
      write_deadline_(ctx.stream.get_executor()),
      drained_(ctx.stream.get_executor()),
      stop_(ctx.stream.get_executor()),
      handle_{[this] { stop_.Notify(); }, false, {}, {}, {}},
      tasks_(ctx.stream.get_executor()) {}

WebSocket::~WebSocket() {
  if (registration_) ctx_.server.RemoveStream(*registration_);
}

asio::awaitable<bool> WebSocket::Accept() {
  ctx_.streamed = true;  // whatever happens, this connection carries no more HTTP requests
  websocket::stream_base::timeout timeout;
  timeout.handshake_timeout = kHandshakeTimeout;
  // A ping after half of this without a frame from the client; closed after all of it.
  timeout.idle_timeout = 2 * ctx_.server.options().keepalive;
  timeout.keep_alive_pings = true;
  ws_.set_option(timeout);
  ws_.set_option(
      websocket::stream_base::decorator([id = ctx_.request_id](websocket::response_type& res) {
        res.set(http::field::server, "sandstreamd");
        res.set("X-Request-Id", id);
      }));
  ws_.read_message_max(kMaxMessage);
  auto [ec] = co_await ws_.async_accept(ctx_.req, Tuple());
  if (ec) {
    gone_ = true;
    ctx_.status = 400;
    co_return false;
  }
  ctx_.status = 101;
  handle_.StandOn(ctx_.principal);
  registration_ = ctx_.server.AddStream(&handle_);
  ++ctx_.service.metrics().streams_open;
  ctx_.service.quotas().StreamOpened(ctx_.principal.tenant);
  tasks_.Spawn(ShutdownWatch());
  co_return true;
}

asio::awaitable<std::optional<WebSocket::Message>> WebSocket::Read() {
  buffer_.clear();
  auto [ec, n] = co_await ws_.async_read(buffer_, Tuple());
  (void)n;
  if (ec) {
    gone_ = true;
    drained_.Notify();
    co_return std::nullopt;
  }
  Message m;
  m.binary = ws_.got_binary();
  m.data = beast::buffers_to_string(buffer_.data());
  co_return m;
}

void WebSocket::Send(std::string data, bool binary) {
  if (gone()) return;
  const size_t cost = data.size() + kFrameCost;
  if (queued_bytes_ + cost > kHighWater + sinks_ * kPerSink + kMaxReplies) {
    log::Warn("websocket client reads too little, closing",
              {{"request", ctx_.request_id}, {"queued_bytes", std::to_string(queued_bytes_)}});
    queue_.clear();
    queued_bytes_ = 0;
    Close(websocket::close_code::policy_error, "too many unread messages");
    return;
  }
  queued_bytes_ += cost;
  queue_.push_back(Frame{std::move(data), binary, false, {}});
  Kick();
}

void WebSocket::Close(websocket::close_code code, std::string_view reason) {
  if (gone()) return;
  close_queued_ = true;
  Frame f;
  f.close = true;
  f.reason = websocket::close_reason(code);
  f.reason.reason.assign(reason.data(), std::min(reason.size(), f.reason.reason.max_size()));
  queue_.push_back(std::move(f));
  Kick();
}

void WebSocket::Kick() {
  if (writing_ || queue_.empty()) return;
  writing_ = true;
  tasks_.Spawn(WriteLoop());
}

asio::awaitable<boost::system::error_code> WebSocket::Write(Frame& frame) {
  const uint64_t write = ++writes_;
  write_deadline_.expires_after(ctx_.server.options().write_timeout);
  write_deadline_.async_wait([this, write](const boost::system::error_code& ec) {
    if (ec || write != writes_ || gone_) return;
    // Closing the socket ends the stuck write and the connection's reader with it.
    gone_ = true;
    boost::system::error_code ignored;
    ctx_.stream.socket().close(ignored);
  });
  boost::system::error_code ec;
  if (frame.close) {
    auto [close_ec] = co_await ws_.async_close(frame.reason, Tuple());
    ec = close_ec;
    gone_ = true;
  } else {
    ws_.binary(frame.binary);
    auto [write_ec, n] = co_await ws_.async_write(asio::buffer(frame.data), Tuple());
    ec = write_ec;
    ctx_.service.metrics().stream_bytes_total += n;
  }
  ++writes_;
  write_deadline_.cancel();
  co_return ec;
}

asio::awaitable<void> WebSocket::WriteLoop() {
  while (!queue_.empty() && !gone_) {
    Frame f = std::move(queue_.front());
    queue_.pop_front();
    queued_bytes_ -= f.data.size() + (f.close ? 0 : kFrameCost);
    const boost::system::error_code ec = co_await Write(f);
    if (ec) gone_ = true;
    drained_.Notify();
  }
  queue_.clear();
  queued_bytes_ = 0;
  writing_ = false;
  drained_.Notify();
}

asio::awaitable<void> WebSocket::WaitWritable() {
  while (!gone() && queued_bytes_ >= kHighWater) co_await drained_.Wait();
}

asio::awaitable<bool> WebSocket::Sink::Flush() {
  co_await ws_.WaitWritable();
  co_return !gone();
}

asio::awaitable<void> WebSocket::ShutdownWatch() {
  while (!finished_ && !handle_.stopping) co_await stop_.Wait();
  if (!handle_.stopping) co_return;
  if (handle_.reason) {
    boost::json::object ended{{"type", "error"},
                              {"code", ErrorCodeName(handle_.reason->code)},
                              {"message", handle_.reason->message}};
    Send(boost::json::serialize(ended), false);
    Close(websocket::close_code::policy_error, "unauthorized");
    co_return;
  }
  Send(R"({"type":"error","code":"shutting_down","message":"sandstreamd is shutting down"})",
       false);
  Close(websocket::close_code::going_away, "shutting down");
}

asio::awaitable<void> WebSocket::Finish() {
  finished_ = true;
  stop_.Notify();
  // Queued frames (an exit, a close) get a bounded time to go out; then the socket's
  // operations are cancelled, which ends the writer.
  const SteadyTime deadline = SteadyNow() + kFlushTimeout;
  AsyncSignal tick(ctx_.stream.get_executor());
  while (writing_ && SteadyNow() < deadline) {
    co_await tick.Wait(std::chrono::milliseconds(20));
  }
  if (writing_) ctx_.stream.cancel();
  co_await tasks_.Join();
  if (ctx_.status == 101) {
    --ctx_.service.metrics().streams_open;
    ctx_.service.quotas().StreamClosed(ctx_.principal.tenant);
  }
}

}  // namespace sandstream::api
