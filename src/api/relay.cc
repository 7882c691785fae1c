#include "api/relay.h"

#include <fcntl.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "base/timer.h"
#include "platform/fd.h"

namespace sandstream::api {
namespace asio = boost::asio;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;

namespace {

constexpr size_t kRelayPipeBytes = 1024 * 1024;  // what one direction of a relay holds in flight

}  // namespace

asio::awaitable<bool> WriteWithin(tcp::socket& to, asio::const_buffer data,
                                  SteadyClock::duration timeout) {
  Timer timer(to.get_executor());
  while (data.size() > 0) {
    timer.expires_after(timeout);
    auto result = co_await (to.async_write_some(data, asio::as_tuple(asio::use_awaitable)) ||
                            timer.async_wait(asio::as_tuple(asio::use_awaitable)));
    if (result.index() == 1) co_return false;
    auto [ec, n] = std::get<0>(result);
    if (ec) co_return false;
    data += n;
  }
  co_return true;
}

asio::awaitable<bool> Pump(tcp::socket& from, tcp::socket& to, SteadyClock::duration write_timeout,
                           uint64_t& bytes) {
  auto pipe = MakePipe();
  if (!pipe) co_return false;
  const UniqueFd& out = pipe->read;
  const UniqueFd& in = pipe->write;
  GrowPipe(in.get(), static_cast<int>(kRelayPipeBytes));  // a smaller pipe works too
  boost::system::error_code ec;
  from.native_non_blocking(true, ec);
  if (!ec) to.native_non_blocking(true, ec);
  if (ec) co_return false;
  constexpr unsigned kFlags = SPLICE_F_MOVE | SPLICE_F_NONBLOCK;
  Timer timer(to.get_executor());
  for (;;) {
    const ssize_t got =
        ::splice(from.native_handle(), nullptr, in.get(), nullptr, kRelayPipeBytes, kFlags);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) {
      auto [waited] =
          co_await from.async_wait(tcp::socket::wait_read, asio::as_tuple(asio::use_awaitable));
      if (waited) co_return false;
      continue;
    }
    if (got < 0) co_return false;
    if (got == 0) {
      to.shutdown(tcp::socket::shutdown_send, ec);
      co_return true;
    }
    for (size_t left = static_cast<size_t>(got); left > 0;) {
      const ssize_t put = ::splice(out.get(), nullptr, to.native_handle(), nullptr, left, kFlags);
      if (put < 0 && (errno == EAGAIN || errno == EINTR)) {
        timer.expires_after(write_timeout);
        auto result =
            co_await (to.async_wait(tcp::socket::wait_write, asio::as_tuple(asio::use_awaitable)) ||
                      timer.async_wait(asio::as_tuple(asio::use_awaitable)));
        if (result.index() == 1 || std::get<0>(std::get<0>(result))) co_return false;
        continue;
      }
      if (put <= 0) co_return false;
      left -= static_cast<size_t>(put);
      bytes += static_cast<uint64_t>(put);
    }
    // One pipeful per turn: a producer and a reader that are both always ready would otherwise
    // keep this loop, and the I/O thread with it, to themselves.
    co_await asio::post(to.get_executor(), asio::use_awaitable);
  }
}

}  // namespace sandstream::api
