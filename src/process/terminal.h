// A process on a terminal that outlives the connections showing it: clients attach and
// detach, their input reaches the terminal in order through one queue, and a terminal nobody
// has been attached to for the idle time is ended. Its output log is the replay buffer.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "base/result.h"
#include "base/async.h"
#include "process/process.h"

namespace sandstream {

class Terminal : public std::enable_shared_from_this<Terminal> {
 public:
  // Keeps the terminal of a running process started with a pty findable by its process id
  // until the process exits.
  static std::shared_ptr<Terminal> Adopt(const boost::asio::any_io_executor& ex,
                                         std::shared_ptr<Process> process,
                                         SteadyClock::duration idle);
  // The running terminal of a process, or null.
  static std::shared_ptr<Terminal> Find(std::string_view process_id);

  Terminal(const boost::asio::any_io_executor& ex, std::shared_ptr<Process> process,
           SteadyClock::duration idle);

  Process& process() { return *process_; }
  const std::shared_ptr<Process>& shared_process() const { return process_; }
  size_t attached() const { return attached_; }

  // While it lives, the terminal is not idle.
  class Attachment {
   public:
    explicit Attachment(std::shared_ptr<Terminal> t);
    Attachment(Attachment&&) noexcept = default;
    Attachment& operator=(Attachment&&) = delete;
    ~Attachment();

   private:
    std::shared_ptr<Terminal> terminal_;
  };
  Attachment Attach() { return Attachment(shared_from_this()); }

  // Queues input; returns once it is queued, or later while more than a bound is queued, so a
  // client typing into a terminal that does not read is slowed down rather than buffered.
  boost::asio::awaitable<void> Write(std::string bytes);
  Result<void> Resize(sandbox::PtySize size) { return process_->Resize(size); }

 private:
  boost::asio::awaitable<void> IdleLoop();
  boost::asio::awaitable<void> InputLoop();
  void Spawn(boost::asio::awaitable<void> task);

  boost::asio::any_io_executor ex_;
  std::shared_ptr<Process> process_;
  SteadyClock::duration idle_;
  size_t attached_ = 0;
  SteadyTime detached_since_;
  AsyncSignal changed_;  // attach, detach or exit: the idle loop looks again
  std::deque<std::string> input_;
  size_t queued_bytes_ = 0;
  bool writing_ = false;
  AsyncSignal drained_;
};

}  // namespace sandstream
