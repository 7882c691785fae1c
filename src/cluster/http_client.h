// A small HTTP/1.1 client on the daemon's event loop, for what a cluster member asks of another
// (a gateway of a node, either of etcd): one request per connection, one deadline for the whole
// exchange, a bounded answer. Never for a tenant's bytes: those go through the relay.
#pragma once

#include <cstdint>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
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
// answer, whole, each within `timeout`. An error says what failed: kNodeUnreachable before
// anything was sent, kBadGateway after (the write, the read).
boost::asio::awaitable<Result<http::response<http::string_body>>> Call(
    boost::asio::any_io_executor ex, const HostPort& to, http::request<http::string_body> req,
    SteadyClock::duration timeout, uint64_t body_limit = 16u << 20);

}  // namespace sandstream::cluster
