// A log of named events with JSON data (a sandbox's journal, a code cell's run, a file watch):
// sequence-numbered, in a bounded window, rendered once when appended instead of parsed again
// for every reader. The daemon writes it, so readers never hold it back: one that falls out of
// the window learns which events it missed. Pure data structure, like OutputLog.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "process/output_log.h"

namespace sandstream {

struct Event {
  uint64_t seq = 0;
  SystemTime time;
  std::string name;     // the SSE event name
  std::string data;     // one line of JSON
  std::string summary;  // a second, shorter rendering where the log has one (the journal's /logs)
  bool last = false;    // the log ended with it
};

class EventLog {
 public:
  using Listener = OutputLog::Listener;

  explicit EventLog(LogLimits limits) : limits_(limits) {}
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Appends an event; `last` ends the log. Appending after the end is ignored (returns 0).
  uint64_t Append(std::string name, std::string data, std::string summary = {}, bool last = false,
                  SystemTime time = SystemNow());
  // Ends the log without an event of its own (a deleted sandbox's journal).
  void End();

  struct Slice {
    std::optional<Gap> gap;  // without bytes: events are not output
    std::vector<const Event*> entries;
  };
  Slice Read(uint64_t after_seq, uint64_t max_bytes) const;
  uint64_t SeqBeforeTail(uint64_t n) const;

  uint64_t last_seq() const { return next_seq_ - 1; }
  uint64_t next_seq() const { return next_seq_; }
  bool ended() const { return ended_; }
  uint64_t retained_bytes() const { return retained_bytes_; }
  const std::deque<Event>& entries() const { return entries_; }

  void AddListener(Listener* l);
  void RemoveListener(Listener* l);
  size_t listener_count() const { return listeners_.size(); }

 private:
  void Notify();

  LogLimits limits_;
  std::deque<Event> entries_;
  uint64_t next_seq_ = 1;
  uint64_t retained_bytes_ = 0;
  bool ended_ = false;
  std::vector<Listener*> listeners_;
};

}  // namespace sandstream
