// OnThread: a blocking call (netlink round trips that may wait on the kernel's rtnl_lock) made
// on a thread of its own while the Op that wants its result suspends on an eventfd, so the
// daemon's event loop never waits for it.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "platform/unique_fd.h"
#include "sandbox/op.h"

namespace sandstream::sandbox {

// The result of `fn()`, or nullopt when it has not returned within `timeout` (the thread then
// finishes on its own and its result is dropped; `fn` must own what it uses) or no thread
// could be started.
template <class Fn>
Op<std::optional<std::invoke_result_t<Fn&>>> OnThread(Fn fn, std::chrono::milliseconds timeout) {
  using T = std::invoke_result_t<Fn&>;
  struct Shared {
    std::optional<T> result;
    std::atomic<bool> done{false};
    UniqueFd wake;
  };
  auto shared = std::make_shared<Shared>();
  shared->wake.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!shared->wake) co_return std::nullopt;
  try {
    std::thread([shared, fn = std::move(fn)]() mutable {
      shared->result.emplace(fn());
      shared->done.store(true, std::memory_order_release);
      const uint64_t one = 1;
      (void)!::write(shared->wake.get(), &one, sizeof one);
    }).detach();
  } catch (const std::system_error&) {
    co_return std::nullopt;
  }
  const Deadline deadline = In(timeout);
  while (!shared->done.load(std::memory_order_acquire)) {
    const bool ready = co_await Readable{shared->wake.get(), deadline};
    if (!ready && std::chrono::steady_clock::now() >= deadline) break;
    uint64_t count = 0;
    (void)!::read(shared->wake.get(), &count, sizeof count);
  }
  if (!shared->done.load(std::memory_order_acquire)) co_return std::nullopt;
  co_return std::move(shared->result);
}

}  // namespace sandstream::sandbox
