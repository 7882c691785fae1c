#include "http/drain.h"

#include <array>

#include "base/async.h"

namespace sandstream::http {
namespace asio = boost::asio;
using asio::ip::tcp;

asio::awaitable<void> Drain(boost::beast::tcp_stream& stream, SteadyClock::duration time) {
  // Its contents are never looked at, so every connection may read into it.
  static std::array<char, 64 * 1024> sink;
  boost::system::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream.expires_after(time);
  for (size_t total = 0; total < kDrainBytes;) {
    auto [read_ec, got] = co_await stream.async_read_some(asio::buffer(sink), Tuple());
    if (read_ec) break;
    total += got;
  }
}

}  // namespace sandstream::http
