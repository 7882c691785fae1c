#include "base/async.h"

#include <boost/asio/co_spawn.hpp>
#include <exception>
#include <utility>

#include "base/log.h"

namespace sandstream {

namespace asio = boost::asio;

void Spawn(const asio::any_io_executor& ex, asio::awaitable<void> task, std::string what,
           std::function<void()> done) {
  asio::co_spawn(ex, std::move(task),
                 [what = std::move(what), done = std::move(done)](std::exception_ptr e) {
                   if (done) done();
                   if (!e) return;
                   try {
                     std::rethrow_exception(e);
                   } catch (const std::exception& thrown) {
                     log::Error(what + " failed", {{"error", thrown.what()}});
                   } catch (...) {
                     log::Error(what + " failed", {{"error", "unknown exception"}});
                   }
                 });
}

void TaskGroup::Spawn(asio::awaitable<void> task, std::string what) {
  ++running_;
  sandstream::Spawn(ex_, std::move(task), std::move(what), [this] {
    --running_;
    done_.Notify();
  });
}

asio::awaitable<void> TaskGroup::Join() {
  while (running_ > 0) co_await done_.Wait();
}

asio::awaitable<bool> TaskGroup::Join(SteadyClock::duration within) {
  const SteadyTime deadline = SteadyNow() + within;
  while (running_ > 0) {
    const auto left = deadline - SteadyNow();
    if (left <= SteadyClock::duration::zero()) co_return false;
    const bool woken = co_await done_.Wait(left);
    (void)woken;
  }
  co_return true;
}

}  // namespace sandstream
