#include "process/terminal.h"

#include <signal.h>

#include <map>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "base/log.h"

namespace sandstream {
namespace asio = boost::asio;

namespace {

constexpr size_t kMaxQueuedInput = 64 * 1024;

// Running terminals by process id. Weak: a terminal lives as long as its idle loop (until the
// process exits) and the connections attached to it.
std::map<std::string, std::weak_ptr<Terminal>, std::less<>>& Registry() {
  static std::map<std::string, std::weak_ptr<Terminal>, std::less<>> registry;
  return registry;
}

}  // namespace

Terminal::Terminal(const asio::any_io_executor& ex, std::shared_ptr<Process> process,
                   SteadyClock::duration idle)
    : ex_(ex),
      process_(std::move(process)),
      idle_(idle),
      detached_since_(SteadyNow()),
      changed_(ex),
      drained_(ex) {}

std::shared_ptr<Terminal> Terminal::Adopt(const asio::any_io_executor& ex,
                                          std::shared_ptr<Process> process,
                                          SteadyClock::duration idle) {
  auto& registry = Registry();
  std::erase_if(registry, [](const auto& kv) { return kv.second.expired(); });
  auto t = std::make_shared<Terminal>(ex, std::move(process), idle);
  registry[t->process_->id()] = t;
  t->Spawn(t->IdleLoop());
  return t;
}

std::shared_ptr<Terminal> Terminal::Find(std::string_view process_id) {
  auto& registry = Registry();
  auto it = registry.find(process_id);
  return it == registry.end() ? nullptr : it->second.lock();
}

void Terminal::Spawn(asio::awaitable<void> task) {
  asio::co_spawn(ex_, std::move(task), [id = process_->id()](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      log::Error("terminal task failed", {{"process", id}, {"error", ex.what()}});
    }
  });
}

Terminal::Attachment::Attachment(std::shared_ptr<Terminal> t) : terminal_(std::move(t)) {
  ++terminal_->attached_;
  terminal_->changed_.Notify();
}

Terminal::Attachment::~Attachment() {
  if (!terminal_) return;
  if (--terminal_->attached_ == 0) {
    terminal_->detached_since_ = SteadyNow();
  }
  terminal_->changed_.Notify();
}

asio::awaitable<void> Terminal::IdleLoop() {
  auto self = shared_from_this();
  // The exit wakes the loop too, so it ends (and drops its reference) with the process.
  Spawn([](std::shared_ptr<Terminal> t) -> asio::awaitable<void> {
    co_await t->process_->WaitExit();
    t->changed_.Notify();
  }(self));
  while (!process_->exit()) {
    if (attached_ > 0) {
      co_await changed_.Wait();
      continue;
    }
    const auto left = detached_since_ + idle_ - SteadyNow();
    if (left > SteadyClock::duration::zero()) {
      co_await changed_.Wait(left);
      continue;
    }
    log::Info("terminal idle: ending it", {{"process", process_->id()}});
    // A shell ignores TERM but not HUP, as when its terminal goes away; KILL follows the grace.
    process_->Kill(ExitReason::kIdleTimeout);
    (void)process_->Signal(SIGHUP, true);
    co_await process_->WaitExit();
  }
  auto& registry = Registry();
  if (auto it = registry.find(process_->id()); it != registry.end() && it->second.lock() == self) {
    registry.erase(it);
  }
}

asio::awaitable<void> Terminal::Write(std::string bytes) {
  auto self = shared_from_this();
  if (process_->exit() || bytes.empty()) co_return;
  queued_bytes_ += bytes.size();
  input_.push_back(std::move(bytes));
  if (!writing_) {
    writing_ = true;
    Spawn(InputLoop());
  }
  while (writing_ && queued_bytes_ > kMaxQueuedInput) co_await drained_.Wait();
}

asio::awaitable<void> Terminal::InputLoop() {
  auto self = shared_from_this();
  while (!input_.empty()) {
    std::string chunk = std::move(input_.front());
    input_.pop_front();
    queued_bytes_ -= chunk.size();
    auto written = co_await process_->WriteStdin(std::move(chunk));
    drained_.Notify();
    if (!written) {
      // The terminal is gone (or its input was closed): what is queued can never arrive.
      input_.clear();
      queued_bytes_ = 0;
      break;
    }
  }
  writing_ = false;
  drained_.Notify();
}

}  // namespace sandstream
