// A server-side WebSocket on a session's connection (Beast, upgraded from the request already
// read): the handler reads; writes go through a queue with one write in flight; pings keep an
// idle connection open and find a dead one; shutdown closes it with "going away".
#pragma once

#include <deque>
#include <list>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/websocket/stream.hpp>

#include "api/http.h"
#include "api/server.h"
#include "base/async.h"
#include "base/timer.h"

namespace sandstream::api {

namespace websocket = boost::beast::websocket;

class WebSocket {
 public:
  // The largest message a client may send; a larger one closes the connection (1009).
  static constexpr size_t kMaxMessage = 1u << 20;

  explicit WebSocket(Context& ctx);
  ~WebSocket();

  // Answers the upgrade. False when the handshake failed (nothing more can be sent).
  boost::asio::awaitable<bool> Accept();

  struct Message {
    std::string data;
    bool binary = false;
  };
  // The next message; nullopt once the connection is closed or broken.
  boost::asio::awaitable<std::optional<Message>> Read();

  // Queued in order; dropped once a close is queued or the connection is gone. A client that
  // lets more pile up than its streams' batches and kMaxReplies (messages it provoked and does
  // not read) loses the queue and is closed with 1008, policy violation.
  void Send(std::string data, bool binary);
  void Close(websocket::close_code code, std::string_view reason = {});
  bool gone() const { return gone_ || close_queued_; }
  // The daemon is shutting down: the connection is being closed with "going away".
  bool stopping() const { return handle_.stopping; }
  // Until the queue is short enough to add to (or the connection is gone): producers wait
  // here, so a slow client makes them fall behind in their logs, not grow this queue.
  boost::asio::awaitable<void> WaitWritable();
  // Ends the connection's own tasks: waits (bounded) for queued frames to go, then for the
  // writer. Call once, after the last Read().
  boost::asio::awaitable<void> Finish();

  const std::string& request_id() const { return ctx_.request_id; }

  // One stream's view of the connection, as a sink for Pump(): messages are queued on it, and a
  // batch counts as taken once the queue is short enough. `ended` is set when the connection's
  // reader is done (the client closed it).
  class Sink {
   public:
    Sink(WebSocket& ws, const bool& ended) : ws_(ws), ended_(ended) { ++ws_.sinks_; }
    ~Sink() { --ws_.sinks_; }
    Sink(const Sink&) = delete;
    Sink& operator=(const Sink&) = delete;
    boost::asio::awaitable<bool> Flush();
    bool stopping() const { return ws_.stopping(); }
    bool gone() const { return ended_ || ws_.gone(); }
    uint64_t batch_bytes() const { return 64 * 1024; }
    // Beast's pings keep the connection alive; a stream has nothing to add.
    SteadyClock::duration keepalive() const { return std::chrono::hours(1); }
    void Keepalive() {}

   private:
    WebSocket& ws_;
    const bool& ended_;
  };

 private:
  struct Frame {
    std::string data;
    bool binary = false;
    bool close = false;
    websocket::close_reason reason;
  };
  void Kick();
  // Writes the next frame; the connection is closed if the client takes none of it for the
  // write timeout.
  boost::asio::awaitable<boost::system::error_code> Write(Frame& frame);
  boost::asio::awaitable<void> WriteLoop();
  boost::asio::awaitable<void> ShutdownWatch();

  Context& ctx_;
  websocket::stream<boost::beast::tcp_stream&> ws_;
  boost::beast::flat_buffer buffer_;
  std::deque<Frame> queue_;
  size_t queued_bytes_ = 0;  // data, plus a little per frame for the frame itself
  size_t sinks_ = 0;
  Timer write_deadline_;
  uint64_t writes_ = 0;  // frames written, so a deadline that fired late is recognized
  bool writing_ = false;
  bool close_queued_ = false;
  bool gone_ = false;
  bool finished_ = false;
  AsyncSignal drained_;
  AsyncSignal stop_;
  StreamHandle handle_;
  std::optional<std::list<StreamHandle*>::iterator> registration_;
  TaskGroup tasks_;
};

}  // namespace sandstream::api
