// A minimal blocking HTTP/1.1 client over loopback for the benchmarks: keep-alive JSON requests,
// SSE streams and WebSockets, cheap on the client side so that the figures show the daemon.
// Failures throw BenchError (a failed figure, not a result).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>

namespace sandstream::bench {

struct BenchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct HttpResponse {
  int status = 0;
  std::string body;
};

// One keep-alive connection; reconnects when the server closed it.
class HttpClient {
 public:
  HttpClient(uint16_t port, std::string api_key);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  HttpResponse Request(std::string_view method, std::string_view target,
                       std::string_view body = {},
                       std::string_view content_type = "application/json");
  // Request() that throws unless the status is `expected`.
  std::string Expect(int expected, std::string_view method, std::string_view target,
                     std::string_view body = {},
                     std::string_view content_type = "application/json");

 private:
  void Connect();
  void Close();
  bool ReadMore();  // false on EOF

  uint16_t port_;
  std::string api_key_;
  int fd_ = -1;
  std::string in_;  // bytes read but not consumed
};

// One SSE response. Events are handed out as views into the receive buffer, valid only during
// the callback. A chunked body (what the daemon sends HTTP/1.1 clients) is decoded in place.
class SseStream {
 public:
  // Connects, sends the request and reads the response head; throws unless 200.
  SseStream(uint16_t port, const std::string& api_key, std::string_view method,
            std::string_view target, std::string_view body = {});
  ~SseStream();
  SseStream(const SseStream&) = delete;
  SseStream& operator=(const SseStream&) = delete;

  struct Event {
    std::string_view type;  // "message" when the block has no event: line
    std::string_view data;  // one data: line (the daemon never splits data)
  };

  // One recv(), then every complete event is passed to `on_event`; false once the server closed
  // the stream. `on_event` returns false to stop early (the rest stays buffered).
  template <typename F>
  bool Pump(F&& on_event) {
    if (!Receive()) return false;
    Event e;
    while (NextEvent(&e)) {
      if (!on_event(e)) break;
    }
    return true;
  }
  int fd() const { return fd_; }

 private:
  bool Receive();
  bool NextEvent(Event* e);
  // Removes chunked framing from buf_[from, end_) in place; sets done_ at the last chunk.
  void Dechunk(size_t from);

  enum class Chunk { kSize, kSizeLf, kData, kDataCr, kDataLf };
  int fd_ = -1;
  bool chunked_ = false;
  bool done_ = false;
  Chunk state_ = Chunk::kSize;
  size_t chunk_left_ = 0;
  std::unique_ptr<char[]> buf_;
  size_t cap_ = 0;
  size_t begin_ = 0;  // first unconsumed byte
  size_t end_ = 0;    // one past the last received byte
  size_t scan_ = 0;   // where the search for the next "\n\n" resumes
};

// One client WebSocket (RFC 6455): frames it sends are masked, frames it receives must not be;
// fragmented messages are joined and pings answered while a message is awaited.
class WebSocketClient {
 public:
  // Connects and upgrades; throws unless the server answers 101 with `Upgrade: websocket`.
  WebSocketClient(uint16_t port, const std::string& api_key, std::string_view target);
  ~WebSocketClient();
  WebSocketClient(const WebSocketClient&) = delete;
  WebSocketClient& operator=(const WebSocketClient&) = delete;

  void SendText(std::string_view text);
  // The next text or binary message; nullopt once the server closed the WebSocket (its close
  // is answered). A connection that ends without a close frame throws.
  std::optional<std::string> Receive();
  // The closing handshake: sends a close (1000) and reads until the server's answering close.
  void Close();

 private:
  void SendFrame(uint8_t opcode, std::string_view payload);
  // Appends one whole frame's payload to *payload; returns its FIN bit and opcode.
  bool ReadFrame(uint8_t* opcode, std::string* payload);
  void Need(size_t bytes);

  int fd_ = -1;
  bool close_sent_ = false;
  bool close_received_ = false;
  std::string in_;  // bytes read but not consumed
  std::string out_;
  std::mt19937 mask_rng_;
};

// Connects a TCP socket to 127.0.0.1:port with TCP_NODELAY; throws on failure.
int ConnectLoopback(uint16_t port);
// Connects `fd`, a TCP socket of any network namespace, to 127.0.0.1:port in that namespace,
// with TCP_NODELAY; throws on failure (the caller still owns `fd`).
void ConnectSocket(int fd, uint16_t port);

// One HTTP/1.1 exchange on a connected socket whose server closes it after the answer (the
// request says `Connection: close`): sends `request`, reads to EOF into a reused buffer and
// keeps nothing. Throws unless the status is `expected_status` and the body matches its
// Content-Length; returns the body's size.
uint64_t ExchangeToEof(int fd, std::string_view request, int expected_status);

}  // namespace sandstream::bench
