// The daemon's async toolkit, for one io_context thread (so no locks): Tuple() to get error
// codes as values; Spawn() that logs what a task throws; AsyncSignal wakes the coroutines
// waiting on it; TurnQueue hands out turns in arrival order; TaskGroup spawns tasks and joins
// them; OffThread runs a blocking call on a thread pool and resumes the caller with its result.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>

#include "base/timer.h"

namespace sandstream {

// `co_await op(..., Tuple())` returns the error code (and results) instead of throwing.
inline auto Tuple() { return boost::asio::as_tuple(boost::asio::use_awaitable); }

// Runs `task` on `ex`. An exception that escapes it is logged as "<what> failed", never
// swallowed; `done`, if given, runs when the task has ended either way.
void Spawn(const boost::asio::any_io_executor& ex, boost::asio::awaitable<void> task,
           std::string what, std::function<void()> done = {});

// A Notify() with no waiter is not remembered, so callers re-check their condition before
// waiting. Wait() may have many waiters; Wait(timeout) re-arms the timer, so it is for one
// owner only.
class AsyncSignal {
 public:
  explicit AsyncSignal(const boost::asio::any_io_executor& ex) : timer_(ex) {
    timer_.expires_at(Timer::time_point::max());
  }

  // Returns true when notified (or cancelled), false when `timeout` passed first.
  boost::asio::awaitable<bool> Wait(SteadyClock::duration timeout) {
    timer_.expires_after(timeout);
    auto [ec] = co_await timer_.async_wait(Tuple());
    co_return static_cast<bool>(ec);
  }
  boost::asio::awaitable<void> Wait() {
    // After a timed wait the timer still holds that wait's expiry: once past, a wait on it
    // would end at once, and a loop of untimed waits would spin.
    if (timer_.expiry() != Timer::time_point::max()) timer_.expires_at(Timer::time_point::max());
    co_await timer_.async_wait(Tuple());
  }
  void Notify() { timer_.cancel(); }

 private:
  Timer timer_;
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

// Tasks spawned together; Join() waits until all have ended.
class TaskGroup {
 public:
  explicit TaskGroup(const boost::asio::any_io_executor& ex) : ex_(ex), done_(ex) {}
  void Spawn(boost::asio::awaitable<void> task, std::string what = "task");
  boost::asio::awaitable<void> Join();
  // Join() for at most `within`: false if tasks are still running then.
  boost::asio::awaitable<bool> Join(SteadyClock::duration within);
  size_t running() const { return running_; }

 private:
  boost::asio::any_io_executor ex_;
  size_t running_ = 0;
  AsyncSignal done_;
};

// Runs `fn` on `pool` and resumes the caller on its own executor with what `fn` returned. `fn`
// may refer to the caller's locals: the caller waits for it.
template <class Fn>
boost::asio::awaitable<std::invoke_result_t<Fn&>> OffThread(boost::asio::thread_pool& pool, Fn fn) {
  using R = std::invoke_result_t<Fn&>;
  auto initiate = [&pool](auto handler, Fn job) {
    auto work = boost::asio::make_work_guard(boost::asio::get_associated_executor(handler));
    boost::asio::post(pool, [handler = std::move(handler), work = std::move(work),
                             job = std::move(job)]() mutable {
      R result = job();
      const auto ex = work.get_executor();
      boost::asio::post(ex, [handler = std::move(handler), result = std::move(result)]() mutable {
        std::move(handler)(std::move(result));
      });
    });
  };
  co_return co_await boost::asio::async_initiate<const boost::asio::use_awaitable_t<>, void(R)>(
      initiate, boost::asio::use_awaitable, std::move(fn));
}

}  // namespace sandstream
