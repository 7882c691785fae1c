// envd's wire as E2B's SDKs speak it: the Connect protocol with its JSON codec over HTTP/1.1
// (unary calls and server streams), proto3 JSON, and the error bodies of E2B's control plane
// and of envd's HTTP routes (docs/e2b.md). Translation only: nothing here runs anything.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include "api/http.h"
#include "api/stream.h"
#include "base/clock.h"
#include "base/result.h"

namespace sandstream::api::e2b {

// The Connect code for a sandstream error ("not_found", "invalid_argument", ...), and the HTTP
// status the Connect protocol gives a unary error with that code.
std::string_view ConnectCode(ErrorCode code);
http::status ConnectStatus(std::string_view connect_code);

// Answers `error` in the request's dialect (http.h's ReplyError comes here):
// - kE2b: {"code": <HTTP status>, "message"} with the status StatusFor gives;
// - kConnect: a unary call's Connect error, or for a streaming call a 200 whose stream ends at
//   once with the error (the SDKs read a stream's errors there);
// - both: kBadGateway is the answer of E2B's edge for a sandbox it has not got (502,
//   {"sandboxId", "message", "code": 502}), which the SDKs read as "not running".
boost::asio::awaitable<void> Fail(Context& ctx, const Error& error);
// kE2b's answer with a status sandstream's errors do not have (501, 507).
boost::asio::awaitable<void> Fail(Context& ctx, http::status status, std::string message);

// A Connect error whose code sandstream's errors have no equal for ("already_exists"): as
// Fail, in either form of kConnect.
boost::asio::awaitable<void> FailConnect(Context& ctx, std::string_view connect_code,
                                         std::string message);

// The error Fail answers with kBadGateway: sandbox `id` does not exist (for this caller).
Error SandboxGone(std::string_view id);

// A unary call's answer: 200, application/json, `message`.
boost::asio::awaitable<void> ReplyMessage(Context& ctx, const boost::json::object& message);

// Whether the request is a streaming call (application/connect+json).
bool IsStreamingCall(const Context& ctx);
// The request message: a unary call's body, or the one envelope of a server-streaming call's.
// Binary protobuf is kUnsupportedMediaType (the SDKs use the JSON codec only).
Result<boost::json::object> RequestMessage(const Context& ctx);

// One envelope: flags (0x02 for the end of a stream), the length big-endian, the JSON.
void AppendEnvelope(std::string& out, std::string_view json, bool end_of_stream = false);

// Proto3 JSON as the SDKs write it: fields by their JSON (lowerCamelCase) or proto name; a
// field that is absent or null is nullptr.
const boost::json::value* Field(const boost::json::object& o, std::string_view json_name,
                                std::string_view proto_name = {});
Result<std::optional<std::string>> OptString(const boost::json::object& o,
                                             std::string_view json_name,
                                             std::string_view proto_name = {});
Result<std::optional<bool>> OptBool(const boost::json::object& o, std::string_view json_name,
                                    std::string_view proto_name = {});
// An integer field (a number or, as proto3 JSON allows, a decimal string) in [min, max].
Result<std::optional<int64_t>> OptInt(const boost::json::object& o, std::string_view json_name,
                                      std::string_view proto_name, int64_t min, int64_t max);
// A bytes field: standard or URL-safe base64, padded or not.
Result<std::string> DecodeBytes(std::string_view text, std::string_view field);
// A google.protobuf.Timestamp: RFC 3339, UTC, milliseconds.
std::string Timestamp(SystemTime t);

// A server stream: HTTP 200, application/connect+json, one envelope per message, each batch
// flushed as produced, and always one end-of-stream envelope last. A sink for Pump
// (stream.h); while nothing is said for the Keepalive-Ping-Interval the client asked for, it
// sends `keepalive` (a message the SDKs skip).
class ConnectStream {
 public:
  ConnectStream(Context& ctx, std::string keepalive);

  template <class Cursor>
  void Watch(Cursor& cursor) {
    response_.Watch(cursor);
  }
  void Send(const boost::json::object& message);
  boost::asio::awaitable<bool> Flush() { return response_.Flush(); }
  // Ends the stream: `{}`, or `error`, or when the daemon stops (`end` kStopping) why.
  boost::asio::awaitable<void> End(StreamEnd end, const std::optional<Error>& error = {});

  bool stopping() const { return response_.stopping(); }
  bool gone() const { return response_.gone(); }
  uint64_t batch_bytes() const { return response_.batch_bytes(); }
  SteadyClock::duration keepalive() const { return keepalive_; }
  void Keepalive() { AppendEnvelope(response_.out(), keepalive_message_); }

 private:
  StreamResponse response_;
  SteadyClock::duration keepalive_;
  std::string keepalive_message_;
};

}  // namespace sandstream::api::e2b
