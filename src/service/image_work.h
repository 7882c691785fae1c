// The image store's work (imports, pulls, snapshots, collections) on a few threads of its own:
// one job of a tenant at a time, in the order posted, and tenants served in turn. A tenant's
// slow pull then holds that tenant's next job only, never another tenant's. Not for the event
// loop's work: every job here blocks.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace sandstream {

class ImageWork {
 public:
  // The queue of the daemon's own image work (collections), apart from every tenant's.
  static constexpr const char* kCollections = "(collections)";

  // `threads`: jobs at once, of as many tenants (at least 1).
  explicit ImageWork(size_t threads);
  // Jobs not started are dropped; one running is waited for.
  ~ImageWork() = default;
  ImageWork(const ImageWork&) = delete;
  ImageWork& operator=(const ImageWork&) = delete;

  // Runs `job` on a worker, after `queue`'s earlier jobs ("" is the admin's, like any).
  void Post(const std::string& queue, std::function<void()> job);

 private:
  void RunNext();

  std::mutex mu_;
  std::map<std::string, std::deque<std::function<void()>>> waiting_;  // by queue
  std::set<std::string> running_;                                     // queues with a job running
  // Queues with a job waiting and none running, in turn: one RunNext posted for each.
  std::deque<std::string> turns_;
  // Declared last, so destroyed (stopped, joined) first.
  boost::asio::thread_pool pool_;
};

// Runs `fn` as a job of `queue` and resumes the caller on its own executor with what `fn`
// returned (as OffThread in base/async.h). `fn` may refer to the caller's locals.
template <class Fn>
boost::asio::awaitable<std::invoke_result_t<Fn&>> OffThread(ImageWork& work, std::string queue,
                                                            Fn fn) {
  using R = std::invoke_result_t<Fn&>;
  auto initiate = [&work, &queue](auto handler, Fn job) {
    auto guard = boost::asio::make_work_guard(boost::asio::get_associated_executor(handler));
    auto state = std::make_shared<std::tuple<decltype(handler), decltype(guard), Fn>>(
        std::move(handler), std::move(guard), std::move(job));
    work.Post(queue, [state]() mutable {
      R result = std::get<2>(*state)();
      const auto ex = std::get<1>(*state).get_executor();
      boost::asio::post(ex, [state, result = std::move(result)]() mutable {
        std::move(std::get<0>(*state))(std::move(result));
      });
    });
  };
  co_return co_await boost::asio::async_initiate<const boost::asio::use_awaitable_t<>, void(R)>(
      initiate, boost::asio::use_awaitable, std::move(fn));
}

}  // namespace sandstream
