// Incremental Server-Sent Events parser (the WHATWG event-stream grammar): bytes in, events out.
// Knows nothing of HTTP or of sandstream's event payloads.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sandstream {

struct SseEvent {
  std::string type = "message";  // the `event:` field, or "message"
  std::string data;              // `data:` lines joined with '\n'
  std::string id;                // the stream's last event id when this event was dispatched
};

class SseParser {
 public:
  // Parses `bytes` (any split, even inside a line or a CRLF) and returns the events completed.
  std::vector<SseEvent> Feed(std::string_view bytes);

  // The id of the last event dispatched (kept across events without an `id:` of their own):
  // what a reconnect sends as Last-Event-ID. An `id:` of an event cut off mid-way does not count.
  const std::string& last_event_id() const { return last_event_id_; }

  // Forgets a partly received line or event, as when a connection dropped; keeps the last id.
  void Reset();

 private:
  void ProcessLine(std::string_view line, std::vector<SseEvent>* out);

  std::string line_;
  bool after_cr_ = false;  // the last byte fed was '\r': a following '\n' belongs to it
  bool started_ = false;   // past the optional leading byte order mark
  std::string event_type_;
  std::string data_;
  bool has_data_ = false;
  std::string id_buffer_;
  std::string last_event_id_;
};

}  // namespace sandstream
