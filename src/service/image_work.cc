#include "service/image_work.h"

#include <algorithm>

namespace sandstream {

ImageWork::ImageWork(size_t threads) : pool_(std::max<size_t>(threads, 1)) {}

void ImageWork::Post(const std::string& queue, std::function<void()> job) {
  std::lock_guard lock(mu_);
  auto& jobs = waiting_[queue];
  jobs.push_back(std::move(job));
  if (jobs.size() == 1 && !running_.contains(queue)) {
    turns_.push_back(queue);
    boost::asio::post(pool_, [this] { RunNext(); });
  }
}

void ImageWork::RunNext() {
  std::function<void()> job;
  std::string queue;
  {
    std::lock_guard lock(mu_);
    queue = std::move(turns_.front());
    turns_.pop_front();
    auto& jobs = waiting_[queue];
    job = std::move(jobs.front());
    jobs.pop_front();
    running_.insert(queue);
  }
  job();
  std::lock_guard lock(mu_);
  running_.erase(queue);
  auto it = waiting_.find(queue);
  if (it->second.empty()) {
    waiting_.erase(it);
    return;
  }
  // Behind every queue already waiting: tenants take turns.
  turns_.push_back(queue);
  boost::asio::post(pool_, [this] { RunNext(); });
}

}  // namespace sandstream
