// Blocking HTTP/1.1, SSE and WebSockets over loopback TCP for sandstream-bench.
#include "client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "base/base64.h"

namespace sandstream::bench {

namespace {

std::string Errno(std::string_view what) {
  return std::string(what) + ": " + std::strerror(errno);
}

void SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw BenchError(Errno("send"));
    data.remove_prefix(static_cast<size_t>(n));
  }
}

// Appends what one recv() returns to `in`; false on EOF.
bool RecvAppend(int fd, std::string& in) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw BenchError(Errno("recv"));
    in.append(buf, static_cast<size_t>(n));
    return n > 0;
  }
}

std::string RequestHead(std::string_view method, std::string_view target, std::string_view api_key,
                        size_t body_size, std::string_view extra_headers = {},
                        std::string_view content_type = "application/json") {
  std::string head;
  head.reserve(256);
  head.append(method).append(" ").append(target).append(" HTTP/1.1\r\n");
  head.append("Host: 127.0.0.1\r\nAuthorization: Bearer ").append(api_key).append("\r\n");
  if (body_size > 0) {
    head.append("Content-Type: ").append(content_type).append("\r\nContent-Length: ")
        .append(std::to_string(body_size))
        .append("\r\n");
  }
  head.append(extra_headers).append("\r\n");
  return head;
}

// The value of header `name` in a response head, or empty.
std::string_view HeaderValue(std::string_view head, std::string_view name) {
  size_t pos = head.find("\r\n");
  while (pos != std::string_view::npos && pos + 2 < head.size()) {
    const size_t start = pos + 2;
    const size_t end = head.find("\r\n", start);
    std::string_view line = head.substr(start, end == std::string_view::npos ? end : end - start);
    if (line.size() > name.size() && line[name.size()] == ':' &&
        ::strncasecmp(line.data(), name.data(), name.size()) == 0) {
      std::string_view value = line.substr(name.size() + 1);
      while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      return value;
    }
    pos = end;
  }
  return {};
}

int StatusOf(std::string_view head) {
  // "HTTP/1.1 200 OK"
  if (head.size() < 12 || !head.starts_with("HTTP/1.")) throw BenchError("bad status line");
  return std::atoi(std::string(head.substr(9, 3)).c_str());
}

enum WebSocketOpcode : uint8_t {
  kContinuation = 0x0,
  kText = 0x1,
  kBinary = 0x2,
  kClose = 0x8,
  kPing = 0x9,
  kPong = 0xa,
};

constexpr uint64_t kMaxWebSocketMessage = 64 << 20;

}  // namespace

void ConnectSocket(int fd, uint16_t port) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    throw BenchError(Errno("connect 127.0.0.1:" + std::to_string(port)));
  }
}

int ConnectLoopback(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw BenchError(Errno("socket"));
  try {
    ConnectSocket(fd, port);
  } catch (const BenchError&) {
    ::close(fd);
    throw;
  }
  return fd;
}

uint64_t ExchangeToEof(int fd, std::string_view request, int expected_status) {
  constexpr size_t kBuffer = 1 << 20;
  static thread_local std::unique_ptr<char[]> buf(new char[kBuffer]);
  SendAll(fd, request);
  std::string head;
  uint64_t body = 0;
  bool in_head = true;
  std::string length;
  for (;;) {
    const ssize_t n = ::recv(fd, buf.get(), kBuffer, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw BenchError(Errno("recv"));
    if (n == 0) break;
    if (!in_head) {
      body += static_cast<uint64_t>(n);
      continue;
    }
    head.append(buf.get(), static_cast<size_t>(n));
    const size_t end = head.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (head.size() > 64 * 1024) throw BenchError("a response head over 64 KiB");
      continue;
    }
    const std::string_view response_head(head.data(), end);
    const int status = StatusOf(response_head);
    if (status != expected_status) {
      throw BenchError("status " + std::to_string(status) + ", expected " +
                       std::to_string(expected_status) + ": " + head.substr(0, 300));
    }
    length = std::string(HeaderValue(response_head, "Content-Length"));
    body = head.size() - end - 4;
    in_head = false;
  }
  if (in_head) throw BenchError("the connection closed before a response head");
  if (!length.empty() && body != std::stoull(length)) {
    throw BenchError("a body of " + std::to_string(body) + " bytes, Content-Length " + length);
  }
  return body;
}

HttpClient::HttpClient(uint16_t port, std::string api_key)
    : port_(port), api_key_(std::move(api_key)) {}

HttpClient::~HttpClient() {
  Close();
}

void HttpClient::Connect() {
  Close();
  fd_ = ConnectLoopback(port_);
}

void HttpClient::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  in_.clear();
}

bool HttpClient::ReadMore() {
  return RecvAppend(fd_, in_);
}

HttpResponse HttpClient::Request(std::string_view method, std::string_view target,
                                 std::string_view body, std::string_view content_type) {
  const std::string head = RequestHead(method, target, api_key_, body.size(), {}, content_type);
  // A kept-alive connection the server has since closed fails on the first read: retry once.
  for (int attempt = 0;; ++attempt) {
    const bool reused = fd_ >= 0;
    if (!reused) Connect();
    in_.clear();
    bool sent = true;
    try {
      SendAll(fd_, head);
      SendAll(fd_, body);
    } catch (const BenchError&) {
      sent = false;
    }
    size_t head_end = std::string::npos;
    bool eof = false;
    if (sent) {
      while ((head_end = in_.find("\r\n\r\n")) == std::string::npos) {
        if (!ReadMore()) {
          eof = true;
          break;
        }
      }
    }
    if (!sent || eof) {
      Close();
      if (reused && attempt == 0 && in_.empty()) continue;
      throw BenchError("connection closed before a response to " + std::string(method) + " " +
                       std::string(target));
    }

    HttpResponse res;
    const std::string_view response_head(in_.data(), head_end);
    res.status = StatusOf(response_head);
    const std::string length = std::string(HeaderValue(response_head, "Content-Length"));
    const bool chunked =
        HeaderValue(response_head, "Transfer-Encoding").find("chunked") != std::string_view::npos;
    const bool close = ::strncasecmp(std::string(HeaderValue(response_head, "Connection")).c_str(),
                                     "close", 5) == 0;
    size_t pos = head_end + 4;
    if (!length.empty()) {
      const size_t n = std::stoull(length);
      while (in_.size() < pos + n) {
        if (!ReadMore()) throw BenchError("connection closed inside a response body");
      }
      res.body.assign(in_, pos, n);
      in_.erase(0, pos + n);
    } else if (chunked) {
      for (;;) {
        size_t line_end;
        while ((line_end = in_.find("\r\n", pos)) == std::string::npos) {
          if (!ReadMore()) throw BenchError("connection closed inside a chunked body");
        }
        const size_t size = std::stoull(in_.substr(pos, line_end - pos), nullptr, 16);
        pos = line_end + 2;
        while (in_.size() < pos + size + 2) {
          if (!ReadMore()) throw BenchError("connection closed inside a chunk");
        }
        res.body.append(in_, pos, size);
        pos += size + 2;
        if (size == 0) break;
      }
      in_.erase(0, pos);
    } else if (res.status == 204 || res.status == 304 || res.status < 200) {
      in_.erase(0, pos);
    } else {
      while (ReadMore()) {
      }
      res.body.assign(in_, pos);
      Close();
    }
    if (close) Close();
    return res;
  }
}

std::string HttpClient::Expect(int expected, std::string_view method, std::string_view target,
                               std::string_view body, std::string_view content_type) {
  HttpResponse res = Request(method, target, body, content_type);
  if (res.status != expected) {
    throw BenchError(std::string(method) + " " + std::string(target) + ": status " +
                     std::to_string(res.status) + ", expected " + std::to_string(expected) + ": " +
                     res.body.substr(0, 300));
  }
  return std::move(res.body);
}

SseStream::SseStream(uint16_t port, const std::string& api_key, std::string_view method,
                     std::string_view target, std::string_view body)
    : fd_(ConnectLoopback(port)), buf_(new char[4096]), cap_(4096) {
  std::string head = RequestHead(method, target, api_key, body.size());
  head.append(body);
  SendAll(fd_, head);
  for (;;) {
    if (!Receive()) throw BenchError("stream closed before its response head");
    std::string_view received(buf_.get(), end_);
    const size_t head_end = received.find("\r\n\r\n");
    if (head_end == std::string_view::npos) continue;
    const int status = StatusOf(received.substr(0, head_end));
    if (status != 200) {
      while (Receive()) {
      }
      throw BenchError(std::string(method) + " " + std::string(target) + ": status " +
                       std::to_string(status) + ": " +
                       std::string(buf_.get() + head_end + 4, end_ - head_end - 4).substr(0, 300));
    }
    begin_ = scan_ = head_end + 4;
    chunked_ = HeaderValue(received.substr(0, head_end), "Transfer-Encoding").find("chunked") !=
               std::string_view::npos;
    if (chunked_) Dechunk(begin_);
    return;
  }
}

void SseStream::Dechunk(size_t from) {
  char* b = buf_.get();
  size_t out = from;
  size_t pos = from;
  while (pos < end_ && !done_) {
    if (state_ == Chunk::kData) {
      const size_t take = std::min(chunk_left_, end_ - pos);
      if (out != pos) std::memmove(b + out, b + pos, take);
      out += take;
      pos += take;
      chunk_left_ -= take;
      if (chunk_left_ == 0) state_ = Chunk::kDataCr;
      continue;
    }
    const char c = b[pos++];
    switch (state_) {
      case Chunk::kSize:
        if (c == '\r') {
          state_ = Chunk::kSizeLf;
        } else {
          const int digit = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                                                                        : std::tolower(c) - 'a' + 10;
          if (digit < 0 || digit > 15) throw BenchError("bad chunk size");
          chunk_left_ = chunk_left_ * 16 + static_cast<size_t>(digit);
        }
        break;
      case Chunk::kSizeLf:
        if (c != '\n') throw BenchError("bad chunk header");
        if (chunk_left_ == 0) done_ = true;
        state_ = Chunk::kData;
        break;
      case Chunk::kDataCr:
        if (c != '\r') throw BenchError("chunk not followed by CRLF");
        state_ = Chunk::kDataLf;
        break;
      case Chunk::kDataLf:
        if (c != '\n') throw BenchError("chunk not followed by CRLF");
        state_ = Chunk::kSize;
        break;
      case Chunk::kData:
        break;
    }
  }
  end_ = out;
}

SseStream::~SseStream() {
  if (fd_ >= 0) ::close(fd_);
}

bool SseStream::Receive() {
  // Keep room for a large read: shift the unconsumed tail down, or grow.
  constexpr size_t kMinRoom = 64 * 1024;
  if (cap_ - end_ < kMinRoom) {
    if (begin_ > 0) {
      std::memmove(buf_.get(), buf_.get() + begin_, end_ - begin_);
      end_ -= begin_;
      scan_ -= begin_;
      begin_ = 0;
    }
    if (cap_ - end_ < kMinRoom) {
      size_t cap = std::max<size_t>(cap_ * 2, 1 << 20);
      std::unique_ptr<char[]> bigger(new char[cap]);
      std::memcpy(bigger.get(), buf_.get(), end_);
      buf_ = std::move(bigger);
      cap_ = cap;
    }
  }
  // After the last chunk the connection may stay open for another request: nothing more comes.
  if (done_) return false;
  for (;;) {
    ssize_t n = ::recv(fd_, buf_.get() + end_, cap_ - end_, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw BenchError(Errno("recv (stream)"));
    const size_t from = end_;
    end_ += static_cast<size_t>(n);
    if (chunked_) Dechunk(from);
    return n > 0;
  }
}

bool SseStream::NextEvent(Event* e) {
  for (;;) {
    const char* base = buf_.get();
    // Events end with "\n\n"; newlines are rare inside them (JSON escapes its own), so
    // memchr for each '\n' beats a two-byte search. The pair may straddle the last receive.
    size_t from = std::max(scan_, begin_ + 1) - 1;
    size_t block_end = std::string::npos;
    while (from + 1 < end_) {
      const void* nl = std::memchr(base + from, '\n', end_ - from - 1);
      if (nl == nullptr) break;
      from = static_cast<size_t>(static_cast<const char*>(nl) - base);
      if (base[from + 1] == '\n') {
        block_end = from;
        break;
      }
      ++from;
    }
    if (block_end == std::string::npos) {
      scan_ = end_;
      return false;
    }
    std::string_view block(base + begin_, block_end - begin_);
    begin_ = scan_ = block_end + 2;
    e->type = "message";
    e->data = {};
    bool any = false;
    while (!block.empty()) {
      const size_t nl = block.find('\n');
      std::string_view line = block.substr(0, nl);
      block.remove_prefix(nl == std::string_view::npos ? block.size() : nl + 1);
      if (line.starts_with("event: ")) {
        e->type = line.substr(7);
        any = true;
      } else if (line.starts_with("data: ")) {
        e->data = line.substr(6);
        any = true;
      }
    }
    if (any) return true;  // else a comment (keepalive) or an id alone: skip
  }
}

WebSocketClient::WebSocketClient(uint16_t port, const std::string& api_key, std::string_view target)
    : fd_(ConnectLoopback(port)), mask_rng_(std::random_device{}()) {
  try {
    std::random_device random;
    std::string nonce(16, '\0');
    for (char& c : nonce) c = static_cast<char>(random());
    const std::string extra =
        "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " + Base64(nonce) +
        "\r\nSec-WebSocket-Version: 13\r\n";
    SendAll(fd_, RequestHead("GET", target, api_key, 0, extra));
    size_t head_end;
    while ((head_end = in_.find("\r\n\r\n")) == std::string::npos) {
      if (!RecvAppend(fd_, in_)) throw BenchError("connection closed before the upgrade's answer");
    }
    const std::string_view head(in_.data(), head_end);
    const int status = StatusOf(head);
    if (status != 101) {
      throw BenchError("GET " + std::string(target) + ": status " + std::to_string(status) +
                       ", expected 101: " + in_.substr(head_end + 4, 300));
    }
    // Sec-WebSocket-Accept is the SHA-1 of the key; the build has no SHA-1 (libssl is not one of
    // its dependencies), so only its presence is checked, beside the 101 and the Upgrade header.
    if (::strcasecmp(std::string(HeaderValue(head, "Upgrade")).c_str(), "websocket") != 0 ||
        HeaderValue(head, "Sec-WebSocket-Accept").empty()) {
      throw BenchError("GET " + std::string(target) + ": a 101 that is no WebSocket upgrade");
    }
    in_.erase(0, head_end + 4);  // what follows is already frames
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

WebSocketClient::~WebSocketClient() {
  if (fd_ >= 0) ::close(fd_);
}

void WebSocketClient::SendText(std::string_view text) {
  SendFrame(kText, text);
}

void WebSocketClient::SendFrame(uint8_t opcode, std::string_view payload) {
  const uint64_t n = payload.size();
  out_.clear();
  out_.push_back(static_cast<char>(0x80 | opcode));  // FIN: the client never fragments
  if (n < 126) {
    out_.push_back(static_cast<char>(0x80 | n));
  } else {
    const int width = n <= 0xffff ? 2 : 8;
    out_.push_back(static_cast<char>(0x80 | (width == 2 ? 126 : 127)));
    for (int i = width - 1; i >= 0; --i) out_.push_back(static_cast<char>(n >> (8 * i)));
  }
  const uint32_t key = mask_rng_();
  char mask[4];
  std::memcpy(mask, &key, sizeof mask);
  out_.append(mask, sizeof mask);
  const size_t at = out_.size();
  out_.append(payload);
  for (size_t i = 0; i < n; ++i) out_[at + i] = static_cast<char>(out_[at + i] ^ mask[i % 4]);
  SendAll(fd_, out_);
}

void WebSocketClient::Need(size_t bytes) {
  while (in_.size() < bytes) {
    if (!RecvAppend(fd_, in_)) throw BenchError("WebSocket closed without a close frame");
  }
}

bool WebSocketClient::ReadFrame(uint8_t* opcode, std::string* payload) {
  Need(2);
  const auto b0 = static_cast<uint8_t>(in_[0]);
  const auto b1 = static_cast<uint8_t>(in_[1]);
  if ((b1 & 0x80) != 0) throw BenchError("the server sent a masked WebSocket frame");
  if ((b0 & 0x70) != 0) throw BenchError("a WebSocket frame with reserved bits set");
  uint64_t size = b1 & 0x7f;
  size_t head = 2;
  if (size >= 126) {
    const size_t width = size == 126 ? 2 : 8;
    Need(head + width);
    size = 0;
    for (size_t i = 0; i < width; ++i) size = size << 8 | static_cast<uint8_t>(in_[head + i]);
    head += width;
  }
  if (size > kMaxWebSocketMessage) throw BenchError("a WebSocket frame over 64 MiB");
  Need(head + size);
  payload->append(in_, head, size);
  in_.erase(0, head + size);
  *opcode = b0 & 0x0f;
  return (b0 & 0x80) != 0;
}

std::optional<std::string> WebSocketClient::Receive() {
  if (close_received_) return std::nullopt;
  std::string message;
  bool in_message = false;
  for (;;) {
    uint8_t opcode = 0;
    std::string payload;
    const bool fin = ReadFrame(&opcode, &payload);
    if (opcode >= kClose && (!fin || payload.size() > 125)) {
      throw BenchError("a fragmented or oversized WebSocket control frame");
    }
    switch (opcode) {
      case kText:
      case kBinary:
        if (in_message) throw BenchError("a WebSocket message inside a fragmented one");
        in_message = true;
        message = std::move(payload);
        break;
      case kContinuation:
        if (!in_message) throw BenchError("a WebSocket continuation outside a message");
        message += payload;
        break;
      case kPing:
        SendFrame(kPong, payload);
        continue;
      case kPong:
        continue;
      case kClose:
        if (!close_sent_) SendFrame(kClose, std::string_view(payload).substr(0, 2));
        close_sent_ = close_received_ = true;
        return std::nullopt;
      default:
        throw BenchError("WebSocket opcode " + std::to_string(opcode));
    }
    if (message.size() > kMaxWebSocketMessage) throw BenchError("a WebSocket message over 64 MiB");
    if (fin) return message;
  }
}

void WebSocketClient::Close() {
  if (!close_sent_) {
    SendFrame(kClose, "\x03\xe8");  // 1000, normal closure
    close_sent_ = true;
  }
  // Messages still in flight are dropped until the server's answering close.
  while (Receive()) {
  }
  ::close(fd_);
  fd_ = -1;
}

}  // namespace sandstream::bench
