// A small HTTP/1.1 client on the daemon's event loop, for what a cluster member asks of another
// (a gateway of a node, either of etcd): one request per connection, one deadline for the whole
// exchange, a bounded answer. A tenant's bytes to one node go through the relay; NodeCall is for
// the few requests a gateway sends to every node (an image archive, a pull's progress).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "base/clock.h"
#include "base/result.h"

namespace sandstream::cluster {

namespace http = boost::beast::http;

// "host:port", "[v6]:port" or "http://host:port", as written in a config or a node's record.
struct HostPort {
  std::string host;
  std::string port;
  std::string text() const;  // host:port, brackets kept for IPv6
};
Result<HostPort> ParseHostPort(std::string_view text);

// Connects `socket` to the first address of `to` within `timeout`, with TCP_NODELAY; an error
// is kNodeUnreachable (nothing was sent). A node's address is normally an IP literal, which
// resolves at once.
boost::asio::awaitable<Result<void>> Connect(boost::asio::ip::tcp::socket& socket,
                                             const HostPort& to, SteadyClock::duration timeout);

// Connects (Connect), sends `req` (its Host and Content-Length are set here) and reads the
// answer, whole, all within `timeout`, the connection within `connect_timeout` of that: a node
// that does not answer is given up on soon, one that works is given the whole time. An error
// says what failed: kNodeUnreachable before anything was sent, kBadGateway after (the write,
// the read).
boost::asio::awaitable<Result<http::response<http::string_body>>> Call(
    boost::asio::any_io_executor ex, const HostPort& to, http::request<http::string_body> req,
    SteadyClock::duration timeout, uint64_t body_limit = 16u << 20,
    SteadyClock::duration connect_timeout = SteadyClock::duration::max());

// One request to a node taken a step at a time: its head and body written as they come, its
// answer's head read apart from its body, the body whole or piece by piece. Each step has its
// own deadline, and a step that misses it closes the connection (every later step fails). Errors
// as Call's: kNodeUnreachable from Open, kBadGateway after.
class NodeCall {
 public:
  NodeCall(boost::asio::any_io_executor ex, HostPort to);
  ~NodeCall();  // NOLINT(bugprone-exception-escape): see http_client.cc
  NodeCall(const NodeCall&) = delete;
  NodeCall& operator=(const NodeCall&) = delete;

  const HostPort& to() const { return to_; }
  // Ends the call now: a step under way fails.
  void Close();
  boost::asio::awaitable<Result<void>> Open(SteadyClock::duration timeout);
  boost::asio::awaitable<Result<void>> Write(std::vector<boost::asio::const_buffer> bytes,
                                             SteadyClock::duration timeout);
  boost::asio::awaitable<Result<void>> ReadHead(SteadyClock::duration timeout);
  // After ReadHead: the answer's status and fields.
  const http::response_header<>& head() const;
  // The next piece of the answer's body, valid until the next call; empty at its end.
  boost::asio::awaitable<Result<std::string_view>> ReadSome(SteadyClock::duration timeout);
  // The rest of the body, at most `limit` bytes, all within `timeout`, and the head with it.
  boost::asio::awaitable<Result<http::response<http::string_body>>> ReadRest(
      SteadyClock::duration timeout, uint64_t limit);

 private:
  struct State;
  void Arm(SteadyClock::duration timeout, std::string_view late);
  void Disarm();
  Error Failed(std::string_view step, const boost::system::error_code& ec) const;

  HostPort to_;
  std::shared_ptr<State> state_;  // shared with the deadline's handler
};

}  // namespace sandstream::cluster
