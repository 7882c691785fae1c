// Wakes the coroutines waiting on it. Single-threaded (the daemon's io_context thread): a
// Notify() with no waiter is not remembered, so callers re-check their condition before waiting.
// Wait() may have many waiters; Wait(timeout) re-arms the timer, so it is for one owner only.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>

namespace sandstream {

class AsyncSignal {
 public:
  explicit AsyncSignal(const boost::asio::any_io_executor& ex) : timer_(ex) {
    timer_.expires_at(boost::asio::steady_timer::time_point::max());
  }

  // Returns true when notified (or cancelled), false when `timeout` passed first.
  boost::asio::awaitable<bool> Wait(std::chrono::steady_clock::duration timeout) {
    timer_.expires_after(timeout);
    auto [ec] = co_await timer_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    co_return static_cast<bool>(ec);
  }
  boost::asio::awaitable<void> Wait() {
    co_await timer_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
  }
  void Notify() { timer_.cancel(); }

 private:
  boost::asio::steady_timer timer_;
};

}  // namespace sandstream
