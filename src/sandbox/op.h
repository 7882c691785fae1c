// A sandbox operation that has to wait for the kernel (a child to exec, a spawner to answer,
// a cgroup to empty) is a coroutine, Op<T>, that suspends on `co_await Readable{fd, deadline}`.
// Whoever runs it does the waiting: the daemon on its event loop (process/await_op.h), tests
// and tools with poll() (RunBlocking). The sandbox layer itself never blocks and knows no Asio.
#pragma once

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <coroutine>
#include <exception>
#include <optional>
#include <utility>

namespace sandstream::sandbox {

using Deadline = std::chrono::steady_clock::time_point;

inline Deadline In(std::chrono::milliseconds ms) { return std::chrono::steady_clock::now() + ms; }

// What a suspended operation waits for: `fd` readable, or the deadline (fd -1: only that).
struct WaitFor {
  int fd = -1;
  Deadline deadline;
};

namespace detail {

struct PromiseBase {
  std::coroutine_handle<> continuation;  // the Op awaiting this one; none for the outermost
  PromiseBase* root = this;
  // Kept by the outermost Op: the innermost suspended one, what it waits for, and the outcome.
  std::coroutine_handle<> leaf;
  WaitFor wait;
  bool ready = false;
  std::exception_ptr error;
};

}  // namespace detail

// `co_await Readable{fd, deadline}` in an Op: true once `fd` is readable (or hung up), false
// when the deadline passed first. `fd` -1 waits for the deadline alone.
struct Readable {
  Readable(int fd_, Deadline deadline_) : fd(fd_), deadline(deadline_) {}
  int fd = -1;
  Deadline deadline;

  bool await_ready() const noexcept { return false; }
  template <class Promise>
  void await_suspend(std::coroutine_handle<Promise> h) noexcept {
    root_ = h.promise().root;
    root_->leaf = h;
    root_->wait = WaitFor{fd, deadline};
  }
  bool await_resume() const noexcept { return root_->ready; }

 private:
  detail::PromiseBase* root_ = nullptr;
};

// A sleep inside an Op (a retry's pause).
inline Readable Sleep(std::chrono::microseconds pause) {
  return Readable{-1, std::chrono::steady_clock::now() + pause};
}

template <class T>
class [[nodiscard]] Op {
 public:
  struct promise_type : detail::PromiseBase {
    std::optional<T> value;

    Op get_return_object() { return Op(std::coroutine_handle<promise_type>::from_promise(*this)); }
    std::suspend_always initial_suspend() noexcept { return {}; }
    auto final_suspend() noexcept {
      struct Final {
        bool await_ready() noexcept { return false; }
        std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> h) noexcept {
          auto next = h.promise().continuation;
          return next ? next : std::noop_coroutine();
        }
        void await_resume() noexcept {}
      };
      return Final{};
    }
    template <class U>
    void return_value(U&& v) {
      value.emplace(std::forward<U>(v));
    }
    void unhandled_exception() { root->error = std::current_exception(); }
  };

  Op(Op&& other) noexcept : h_(std::exchange(other.h_, {})) {}
  Op& operator=(Op&&) = delete;
  ~Op() {
    if (h_) h_.destroy();
  }

  // Inside another Op: runs this one to its end, waits included.
  bool await_ready() const noexcept { return false; }
  template <class Promise>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> parent) noexcept {
    h_.promise().continuation = parent;
    h_.promise().root = parent.promise().root;
    return h_;
  }
  T await_resume() {
    if (auto e = std::exchange(h_.promise().root->error, nullptr)) std::rethrow_exception(e);
    return std::move(*h_.promise().value);
  }

  // Run by its owner: runs until it finishes (nullopt) or has to wait (for what). After a
  // wait, Deliver() the outcome and Run() again.
  std::optional<WaitFor> Run() {
    auto& p = h_.promise();
    std::coroutine_handle<> next = p.leaf ? p.leaf : h_;
    p.leaf = nullptr;
    next.resume();
    if (h_.done()) return std::nullopt;
    return p.wait;
  }
  void Deliver(bool ready) { h_.promise().ready = ready; }
  // The result, once Run() returned nullopt.
  T Take() {
    if (h_.promise().error) std::rethrow_exception(h_.promise().error);
    return std::move(*h_.promise().value);
  }

 private:
  explicit Op(std::coroutine_handle<promise_type> h) : h_(h) {}
  std::coroutine_handle<promise_type> h_;
};

// Runs an Op on the calling thread, waiting with poll(): for tests, tools and the bench.
template <class T>
T RunBlocking(Op<T> op) {
  while (auto wait = op.Run()) {
    bool ready = false;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          wait->deadline - std::chrono::steady_clock::now());
      const int timeout = static_cast<int>(std::clamp<int64_t>(left.count() + 1, 0, 1 << 30));
      pollfd p{wait->fd, POLLIN, 0};
      const int r = ::poll(&p, wait->fd >= 0 ? 1 : 0, timeout);
      if (r < 0 && errno == EINTR) continue;
      ready = r > 0;
      if (ready || std::chrono::steady_clock::now() >= wait->deadline) break;
    }
    op.Deliver(ready);
  }
  return op.Take();
}

}  // namespace sandstream::sandbox
