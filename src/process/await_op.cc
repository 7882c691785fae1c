#include "process/await_op.h"

namespace sandstream {
namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;

namespace {

asio::awaitable<bool> AwaitReady(sandbox::WaitFor wait, asio::posix::descriptor_base::wait_type type) {
  const auto ex = co_await asio::this_coro::executor;
  // Real time, not SteadyClock: the deadline is the sandbox layer's (op.h), for the kernel to
  // answer within, and a test moving the daemon's clock on must not fail a spawn.
  asio::steady_timer timer(ex, wait.deadline);
  if (wait.fd < 0) {
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    co_return false;
  }
  // A descriptor object only for this wait: registering the fd anew reports its readiness now.
  asio::posix::stream_descriptor fd(ex, wait.fd);
  auto result = co_await (fd.async_wait(type, asio::as_tuple(asio::use_awaitable)) ||
                          timer.async_wait(asio::as_tuple(asio::use_awaitable)));
  fd.release();
  co_return result.index() == 0;
}

}  // namespace

asio::awaitable<bool> AwaitReadable(sandbox::WaitFor wait) {
  return AwaitReady(wait, asio::posix::descriptor_base::wait_read);
}

asio::awaitable<bool> AwaitWritable(sandbox::WaitFor wait) {
  return AwaitReady(wait, asio::posix::descriptor_base::wait_write);
}

}  // namespace sandstream
