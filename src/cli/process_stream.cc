// A process's event stream, decoded and resumed; see process_stream.h.
#include "cli/process_stream.h"

#include <algorithm>
#include <boost/json.hpp>

#include "base/base64.h"
#include "cli/interrupt.h"

namespace sandstream::cli {
namespace {

namespace json = boost::json;

std::optional<int64_t> IntField(const json::object& object, std::string_view key) {
  const json::value* v = object.if_contains(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_int64()) return v->get_int64();
  if (v->is_uint64() && v->get_uint64() <= static_cast<uint64_t>(INT64_MAX)) {
    return static_cast<int64_t>(v->get_uint64());
  }
  return std::nullopt;
}

std::string StringField(const json::object& object, std::string_view key) {
  const json::value* v = object.if_contains(key);
  if (v == nullptr || !v->is_string()) return "";
  return std::string(v->get_string());
}

}  // namespace

ProcessStream::ProcessStream(ProcessStreamCallbacks callbacks) : callbacks_(std::move(callbacks)) {}

bool ProcessStream::Feed(std::string_view bytes) {
  for (const SseEvent& event : parser_.Feed(bytes)) {
    if (done()) break;
    HandleEvent(event);
  }
  return !done();
}

void ProcessStream::HandleEvent(const SseEvent& event) {
  const std::string& type = event.type;
  if (type != "start" && type != "stdout" && type != "stderr" && type != "exit" && type != "gap" &&
      type != "error") {
    return;  // a newer server's event this client does not know
  }
  boost::system::error_code ec;
  json::value data = json::parse(event.data, ec);
  if (ec || !data.is_object()) {
    Fail("invalid_event", "malformed '" + type + "' event: " + event.data.substr(0, 200));
    return;
  }
  const json::object& fields = data.as_object();
  if (type == "start") {
    process_id_ = StringField(fields, "process_id");
  } else if (type == "stdout" || type == "stderr") {
    const json::value* chunk = fields.if_contains("chunk");
    std::optional<std::string> bytes;
    if (chunk != nullptr && chunk->is_string()) bytes = DecodeBase64(chunk->get_string());
    if (!bytes) {
      Fail("invalid_event", "'" + type + "' event without a base64 chunk");
      return;
    }
    Channel channel = type == "stdout" ? Channel::kStdout : Channel::kStderr;
    if (callbacks_.on_output && !callbacks_.on_output(channel, *bytes)) output_closed_ = true;
  } else if (type == "exit") {
    std::optional<int64_t> code = IntField(fields, "exit_code");
    if (!code) {
      Fail("invalid_event", "'exit' event without an exit_code: " + event.data.substr(0, 200));
      return;
    }
    ProcessExit exit;
    exit.exit_code = static_cast<int>(std::clamp<int64_t>(*code, 0, 255));
    exit.signal = StringField(fields, "signal");
    exit.reason = StringField(fields, "reason");
    exit.duration_ms = IntField(fields, "duration_ms").value_or(0);
    exit_ = std::move(exit);
  } else if (type == "gap") {
    if (callbacks_.on_gap) {
      callbacks_.on_gap(IntField(fields, "from_seq").value_or(0),
                        IntField(fields, "to_seq").value_or(0),
                        IntField(fields, "bytes").value_or(0));
    }
  } else {
    std::string code = StringField(fields, "code");
    Fail(code.empty() ? "error" : code, StringField(fields, "message"));
  }
}

void ProcessStream::Fail(std::string code, std::string message) {
  ClientError error;
  error.kind = ClientError::Kind::kApi;
  error.code = std::move(code);
  error.message = std::move(message);
  error_ = std::move(error);
}

ClientResult<void> FollowProcess(ProcessStream& stream, const StreamOpener& open, bool until_exit,
                                 const RetryPolicy& policy) {
  bool reached_server = false;
  int failures = 0;
  std::chrono::milliseconds backoff = policy.first_backoff;
  while (true) {
    const std::string resumed_from = stream.last_event_id();
    BodySink sink = [&](std::string_view piece) { return stream.Feed(piece); };
    ClientResult<HttpResponse> response = open(resumed_from, sink);
    if (response && response->status / 100 != 2) return ApiError(*response);
    if (response && response->status == 204) {
      stream.End();
      return {};
    }
    // After the exit a broken connection loses nothing.
    if (stream.done() || (response && !until_exit)) return {};
    if (!response) {
      const ClientError& error = response.error();
      if (error.kind != ClientError::Kind::kTransport) return error;
      reached_server = reached_server || error.connected;
      if (!reached_server) return error;  // nothing listens there; retrying would only hide it
    }
    reached_server = true;
    if (stream.last_event_id() != resumed_from) {
      failures = 0;
      backoff = policy.first_backoff;
    }
    if (++failures > policy.max_attempts) {
      if (response) return {};
      return response.error();
    }
    if (int sig = SleepInterruptibly(backoff); sig != 0) {
      ClientError interrupted;
      interrupted.kind = ClientError::Kind::kInterrupted;
      interrupted.signal = sig;
      interrupted.message = "interrupted";
      return interrupted;
    }
    backoff = std::min(backoff * 2, policy.max_backoff);
    stream.Reconnect();
  }
}

}  // namespace sandstream::cli
