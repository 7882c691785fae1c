// Where a reader starts: Last-Event-ID, ?since= and ?tail= against an output log and an event
// log whose entries (and evictions) the input shapes. A number is accepted exactly when it is
// a decimal sequence number, and no start point lies past the end of its log.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "api/stream.h"
#include "api_context.h"
#include "check.h"
#include "process/event_log.h"
#include "process/output_log.h"

namespace sandstream::fuzz {
namespace {

// What a sequence number in a header or the query means: only decimal digits, below 2^64.
std::optional<uint64_t> Expected(std::string_view text) {
  if (text.empty()) return std::nullopt;
  uint64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (UINT64_MAX - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

template <class Log>
void CheckStart(const api::Context& ctx, const Log& log, uint64_t fallback) {
  auto start = api::StartPoint(ctx, log, fallback);
  if (start) FUZZ_CHECK(*start <= log.last_seq());
}

}  // namespace
}  // namespace sandstream::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandstream;
  using namespace sandstream::fuzz;
  namespace http = boost::beast::http;  // Beast's, not sandstream::http
  ApiWorld& world = World();
  FuzzedDataProvider in(data, size);

  http::request<http::string_body> req{http::verb::get, "/v1/sandboxes/sb_fuzz/events", 11};
  std::map<std::string, std::string, std::less<>> query;
  if (in.ConsumeBool()) req.set("Last-Event-ID", in.ConsumeRandomLengthString(32));
  if (in.ConsumeBool()) query["since"] = in.ConsumeRandomLengthString(32);
  if (in.ConsumeBool()) query["tail"] = in.ConsumeRandomLengthString(32);
  const uint64_t fallback = in.ConsumeIntegral<uint64_t>();

  LogLimits limits;
  limits.max_bytes = in.ConsumeIntegralInRange<uint64_t>(1, 256);
  limits.max_entries = in.ConsumeIntegralInRange<uint64_t>(1, 16);
  OutputLog output(limits);
  EventLog events(limits);
  for (int n = in.ConsumeIntegralInRange(0, 40); n > 0 && in.remaining_bytes() > 0; --n) {
    const auto kind = static_cast<EntryKind>(in.ConsumeIntegralInRange(0, 3));
    const std::string bytes = in.ConsumeRandomLengthString(64);
    if (kind != EntryKind::kStart || output.last_seq() == 0) output.Append(kind, bytes);
    events.Append("stdout", bytes);
  }

  api::Context ctx = world.MakeContext(req, std::move(query));
  // The header wins over ?since=; either, when given, must be a number (an empty one too).
  const bool has_header = req.find("Last-Event-ID") != req.end();
  const auto from_header = Expected(ctx.Header("Last-Event-ID"));
  const auto since = ctx.Query("since");
  const auto from_since = since ? Expected(*since) : std::nullopt;
  const bool valid = (!has_header || from_header) && (!since || from_since);
  auto resume = api::ResumePoint(ctx, fallback);
  FUZZ_CHECK(resume.ok() == valid);
  if (valid) FUZZ_CHECK(*resume == (from_header ? *from_header : from_since.value_or(fallback)));
  auto tail = api::TailQuery(ctx);
  if (auto t = ctx.Query("tail")) {
    const auto expected = Expected(*t);
    FUZZ_CHECK(tail.ok() == expected.has_value());
    if (expected) FUZZ_CHECK(**tail == *expected);
  } else {
    FUZZ_CHECK(tail && !tail->has_value());
  }
  CheckStart(ctx, output, fallback);
  CheckStart(ctx, events, fallback);
  return 0;
}
