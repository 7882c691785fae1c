// Runs a sandbox operation (sandbox/op.h) on the daemon's event loop: its waits for a child's
// report, a spawner's reply or a cgroup to empty become reactor waits raced with a timer, so a
// sandbox that starves itself of CPU delays only its own operations.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "sandbox/op.h"

namespace sandstream {

// True once `wait.fd` is readable, false when the deadline passed first.
boost::asio::awaitable<bool> AwaitReadable(sandbox::WaitFor wait);
// True once `wait.fd` is writable (or its reader is gone), false when the deadline passed first.
boost::asio::awaitable<bool> AwaitWritable(sandbox::WaitFor wait);

template <class T>
boost::asio::awaitable<T> Await(sandbox::Op<T> op) {
  for (;;) {
    const std::optional<sandbox::WaitFor> wait = op.Run();
    if (!wait) break;
    const bool ready = co_await AwaitReadable(*wait);
    op.Deliver(ready);
  }
  co_return op.Take();
}

}  // namespace sandstream
