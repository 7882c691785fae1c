#include "cluster/http_client.h"

#include <charconv>
#include <memory>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include "base/timer.h"

namespace sandstream::cluster {
namespace asio = boost::asio;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;

std::string HostPort::text() const {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port;
}

namespace {
Error BadAddress(std::string_view text, std::string_view what) {
  return Error{ErrorCode::kInvalidRequest, "'" + std::string(text) + "' " + std::string(what)};
}
}  // namespace

Result<HostPort> ParseHostPort(std::string_view text) {
  std::string_view rest = text;
  if (rest.starts_with("http://")) rest.remove_prefix(7);
  while (rest.ends_with('/')) rest.remove_suffix(1);
  if (rest.find("://") != std::string_view::npos)
    return BadAddress(text, "is not http://host:port");
  HostPort out;
  size_t colon;
  if (rest.starts_with('[')) {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      return BadAddress(text, "is not [address]:port");
    }
    out.host = std::string(rest.substr(1, close - 1));
    colon = close + 1;
  } else {
    colon = rest.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
      return BadAddress(text, "is not host:port");
    }
    out.host = std::string(rest.substr(0, colon));
  }
  out.port = std::string(rest.substr(colon + 1));
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(out.port.data(), out.port.data() + out.port.size(), port);
  if (ec != std::errc() || end != out.port.data() + out.port.size() || port < 1 || port > 65535) {
    return BadAddress(text, "has no port from 1 to 65535");
  }
  return out;
}

asio::awaitable<Result<void>> Connect(tcp::socket& socket, const HostPort& to,
                                      SteadyClock::duration timeout) {
  constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
  tcp::resolver resolver(socket.get_executor());
  auto [rec, endpoints] =
      co_await resolver.async_resolve(to.host, to.port, tcp::resolver::numeric_service, kTuple);
  if (rec)
    co_return Error{ErrorCode::kNodeUnreachable, "resolve " + to.text() + ": " + rec.message()};
  if (endpoints.empty()) co_return Error{ErrorCode::kNodeUnreachable, to.text() + ": no address"};
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  Timer timer(socket.get_executor(), timeout);
  auto connected = co_await (socket.async_connect(endpoint, kTuple) || timer.async_wait(kTuple));
  if (connected.index() == 1) {
    co_return Error{ErrorCode::kNodeUnreachable, "connect to " + to.text() + ": no answer in time"};
  }
  const auto [cec] = std::get<0>(connected);
  if (cec)
    co_return Error{ErrorCode::kNodeUnreachable, "connect to " + to.text() + ": " + cec.message()};
  boost::system::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  co_return Ok{};
}

namespace {

// The socket and the deadline that closes it: shared with the timer's handler, which may run
// after the call has returned.
struct Exchange {
  explicit Exchange(const asio::any_io_executor& ex) : socket(ex), deadline(ex) {}
  tcp::socket socket;
  Timer deadline;
  bool expired = false;
};

// After the request went out, the error is kBadGateway: the other side may have acted on it.
Error Failed(const HostPort& to, std::string_view step, const Exchange& x,
             const boost::system::error_code& ec) {
  return Error{ErrorCode::kBadGateway,
               std::string(step) + " " + to.text() + ": " +
                   (x.expired ? std::string("no answer in time") : ec.message())};
}

}  // namespace

asio::awaitable<Result<http::response<http::string_body>>> Call(
    asio::any_io_executor ex, const HostPort& to, http::request<http::string_body> req,
    SteadyClock::duration timeout, uint64_t body_limit) {
  auto x = std::make_shared<Exchange>(ex);
  if (auto connected = co_await Connect(x->socket, to, timeout); !connected) {
    co_return std::move(connected).error();
  }
  x->deadline.expires_after(timeout);
  x->deadline.async_wait([x](const boost::system::error_code& ec) {
    if (ec) return;
    x->expired = true;
    boost::system::error_code ignored;
    x->socket.close(ignored);
  });
  struct Disarm {
    Exchange& x;
    ~Disarm() { x.deadline.cancel(); }
  } disarm{*x};

  req.set(http::field::host, to.text());
  req.keep_alive(false);
  req.prepare_payload();
  auto [wec, wrote] =
      co_await http::async_write(x->socket, req, asio::as_tuple(asio::use_awaitable));
  (void)wrote;
  if (wec) co_return Failed(to, "write to", *x, wec);

  boost::beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(body_limit);
  auto [ec, read] =
      co_await http::async_read(x->socket, buffer, parser, asio::as_tuple(asio::use_awaitable));
  (void)read;
  if (ec) co_return Failed(to, "read from", *x, ec);
  co_return parser.release();
}

}  // namespace sandstream::cluster
