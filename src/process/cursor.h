// A reader's place in a log and its wake-up when the log grows: the one cursor every stream is
// built on (SSE responses, terminals, exec over WebSocket). Over a process's output a cursor
// is also flow control: a waiting cursor holds what its client has not taken (and a slack
// behind it, for a client that resumes after a cut), so the process pauses until it does; a
// skipping cursor never holds anything and is told of what it missed.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "base/result.h"
#include "base/async.h"
#include "process/event_log.h"
#include "process/output_log.h"
#include "process/process.h"

namespace sandstream {

// How a reader paces its process: kWait holds it back (as a pipe would), kSkip never does.
enum class Flow { kWait, kSkip };
std::optional<Flow> ParseFlow(std::string_view name);
std::string_view FlowName(Flow flow);

class OutputCursor : private OutputLog::Listener {
 public:
  OutputCursor(std::shared_ptr<Process> process, const boost::asio::any_io_executor& ex,
               uint64_t after_seq, Flow flow);
  ~OutputCursor() override;
  OutputCursor(const OutputCursor&) = delete;
  OutputCursor& operator=(const OutputCursor&) = delete;

  // The next entries (and the gap before them, if any) after the cursor, which moves past them.
  // Valid until the log changes: render them before awaiting anything.
  OutputLog::Slice Next(uint64_t max_bytes);
  // The client has what Next() returned (written or queued for it): a waiting cursor lets the
  // log drop it, apart from the resume slack.
  void Taken();
  // The client went away before the end: a waiting cursor's place is kept for `grace`.
  void Park(SteadyClock::duration grace);
  // Everything up to the exit has been read.
  bool AtEnd() const;
  // kSkip for a skipping cursor, and for a waiting one its process dropped as stalled.
  Flow flow() const;

  // Until the log grows or Wake() is called; false when `timeout` passed first.
  boost::asio::awaitable<bool> Wait(SteadyClock::duration timeout) { return wake_.Wait(timeout); }
  void Wake() { wake_.Notify(); }
  Process& process() { return *process_; }
  uint64_t after_seq() const { return after_; }

 private:
  void OnAppend() override { wake_.Notify(); }

  std::shared_ptr<Process> process_;
  AsyncSignal wake_;
  uint64_t after_;
  std::optional<uint64_t> offset_;  // output bytes up to and including `after_`, once known
  OutputLog::HoldId hold_ = 0;      // 0: skipping
  uint64_t kept_after_ = 0;
};

class EventCursor : private EventLog::Listener {
 public:
  EventCursor(std::shared_ptr<EventLog> log, const boost::asio::any_io_executor& ex,
              uint64_t after_seq);
  ~EventCursor() override;
  EventCursor(const EventCursor&) = delete;
  EventCursor& operator=(const EventCursor&) = delete;

  EventLog::Slice Next(uint64_t max_bytes);
  void Taken() {}
  bool AtEnd() const { return log_->ended() && after_ >= log_->last_seq(); }
  boost::asio::awaitable<bool> Wait(SteadyClock::duration timeout) { return wake_.Wait(timeout); }
  void Wake() { wake_.Notify(); }

 private:
  void OnAppend() override { wake_.Notify(); }

  std::shared_ptr<EventLog> log_;
  AsyncSignal wake_;
  uint64_t after_;
};

}  // namespace sandstream
