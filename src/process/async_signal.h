// The daemon's small async toolkit (one io_context thread, so no locks): AsyncSignal wakes the
// coroutines waiting on it; TurnQueue hands out turns in arrival order.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstdint>

namespace sandstream {

// A Notify() with no waiter is not remembered, so callers re-check their condition before
// waiting. Wait() may have many waiters; Wait(timeout) re-arms the timer, so it is for one
// owner only.
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

// Turns in arrival order: Acquire waits until every earlier holder has released.
class TurnQueue {
 public:
  explicit TurnQueue(const boost::asio::any_io_executor& ex) : wake_(ex) {}
  boost::asio::awaitable<void> Acquire() {
    const uint64_t ticket = next_++;
    while (serving_ != ticket) co_await wake_.Wait();
  }
  void Release() {
    ++serving_;
    wake_.Notify();
  }
  bool busy() const { return next_ != serving_; }

 private:
  AsyncSignal wake_;
  uint64_t next_ = 0;
  uint64_t serving_ = 0;
};

}  // namespace sandstream
