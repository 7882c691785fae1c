// Follows one process's event stream (spec/events.md, format=pandastack, encoding=base64):
// decodes its events, hands output bytes to the caller, records the exit or error, and after a
// dropped connection reopens the stream after the last event seen.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "cli/http.h"
#include "base/sse_parser.h"

namespace sandstream::cli {

enum class Channel { kStdout, kStderr };

struct ProcessExit {
  int exit_code = 0;
  std::string signal;  // empty when no signal ended it
  std::string reason;  // exited, signaled, timeout, idle_timeout, killed, oom
  int64_t duration_ms = 0;
};

struct ProcessStreamCallbacks {
  // Output bytes, exactly as the process wrote them; false when they can no longer be delivered.
  std::function<bool(Channel, std::string_view)> on_output;
  // Output the daemon no longer held when it was asked for.
  std::function<void(int64_t from_seq, int64_t to_seq, int64_t bytes)> on_gap;
};

class ProcessStream {
 public:
  explicit ProcessStream(ProcessStreamCallbacks callbacks);

  // Parses response body bytes; returns false once nothing more should be read.
  bool Feed(std::string_view bytes);
  void HandleEvent(const SseEvent& event);
  // A new connection begins: drops anything half-received, keeps the position.
  void Reconnect() { parser_.Reset(); }
  // The server has nothing more (a 204: the stream was resumed at or past its exit).
  void End() { ended_ = true; }

  bool done() const { return exit_.has_value() || error_.has_value() || output_closed_ || ended_; }
  // End() was called: every event up to the exit was received before, perhaps by another reader.
  bool ended() const { return ended_; }
  const std::string& last_event_id() const { return parser_.last_event_id(); }
  const std::string& process_id() const { return process_id_; }
  const std::optional<ProcessExit>& exit() const { return exit_; }
  // An `error` event, or an event that could not be understood.
  const std::optional<ClientError>& error() const { return error_; }
  // The output callback refused bytes (e.g. stdout is a closed pipe).
  bool output_closed() const { return output_closed_; }

 private:
  void Fail(std::string code, std::string message);

  ProcessStreamCallbacks callbacks_;
  SseParser parser_;
  std::string process_id_;
  std::optional<ProcessExit> exit_;
  std::optional<ClientError> error_;
  bool output_closed_ = false;
  bool ended_ = false;
};

// Opens the stream, resuming after `last_event_id` when it is not empty, and feeds the body
// to `sink`.
using StreamOpener = std::function<ClientResult<HttpResponse>(const std::string& last_event_id,
                                                              const BodySink& sink)>;

struct RetryPolicy {
  int max_attempts = 8;  // consecutive failed reconnects before giving up
  std::chrono::milliseconds first_backoff{100};
  std::chrono::milliseconds max_backoff{2000};
};

// Reads the stream until it ends. With `until_exit`, a stream that ends before the process's
// exit or error is reopened like a dropped connection: a server may end its response with the
// connection, so an end and a drop can look the same. Reopening resumes after the last event
// received; it is not tried when the very first attempt could not reach the server. A 204
// answer ends the stream (stream.ended()). Succeeds
// when the stream ended or retries ran out on streams that ended: the caller then checks
// stream.exit() and stream.error(). Fails with the server's error, an interrupt, or the last
// transport error once retries without progress ran out.
ClientResult<void> FollowProcess(ProcessStream& stream, const StreamOpener& open, bool until_exit,
                                 const RetryPolicy& policy = {});

}  // namespace sandstream::cli
