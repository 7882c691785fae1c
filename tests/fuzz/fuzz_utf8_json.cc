// Output bytes on their way to a client: chunked at UTF-8 boundaries as the pipe reader does,
// escaped into JSON strings on every code path (scalar, SSE2, AVX2), base64-encoded on every
// path, framed as SSE events. Round trips: the chunks are the bytes, in order, never cutting a
// code point; Boost.JSON reads back the bytes made valid; an SSE parser reads back the event.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "api/sse.h"
#include "base/base64.h"
#include "base/json_string.h"
#include "base/sse_parser.h"
#include "base/utf8.h"
#include "check.h"

namespace sandstream {
namespace {

namespace json = boost::json;

std::string Sanitized(std::string_view bytes) {
  std::string out;
  AppendSanitizedUtf8(out, bytes);
  return out;
}

// The pipe reader's chunking (Process::ReadInto): each read goes after the bytes of a code point
// cut by the one before; what ends in an incomplete code point is carried to the next.
std::vector<std::string_view> Chunk(std::string_view bytes, FuzzedDataProvider& in) {
  std::vector<std::string_view> chunks;
  size_t start = 0;  // of the carried bytes, then the read
  size_t end = 0;
  while (end < bytes.size()) {
    end += std::min(bytes.size() - end, in.ConsumeIntegralInRange<size_t>(1, 64));
    const std::string_view got = bytes.substr(start, end - start);
    const size_t k = Utf8CompletePrefix(got);
    FUZZ_CHECK(got.size() - k <= 3);
    if (k > 0) chunks.push_back(got.substr(0, k));
    start += k;
  }
  if (start < end) chunks.push_back(bytes.substr(start));
  return chunks;
}

void CheckChunks(std::string_view text, FuzzedDataProvider& in) {
  const auto chunks = Chunk(text, in);
  const bool valid = IsValidUtf8(text);
  std::string joined;
  std::string rendered;
  for (const auto& c : chunks) {
    joined += c;
    rendered += Sanitized(c);
    if (valid) FUZZ_CHECK(IsValidUtf8(c));
  }
  FUZZ_CHECK(joined == text);
  // Rendering chunk by chunk is rendering the whole: no chunk ended inside a code point.
  FUZZ_CHECK(rendered == Sanitized(text));
}

void CheckUtf8(std::string_view text) {
  const std::string clean = Sanitized(text);
  FUZZ_CHECK(IsValidUtf8(clean));
  FUZZ_CHECK(IsValidUtf8(text) == (clean == text));
  FUZZ_CHECK(Utf8CompletePrefix(text) <= text.size());
  for (size_t i = 0; i < text.size(); ++i) FUZZ_CHECK(Utf8SequenceAt(text, i) <= text.size() - i);
}

// The JSON string literal of `text`, the same on every path, reads back as `text` made valid.
std::string CheckJsonString(std::string_view text, std::string_view prefix) {
  std::string expected;
  for (auto path : {JsonPath::kScalar, JsonPath::kSse2, JsonPath::kAvx2}) {
    std::string out(prefix);
    if (!AppendJsonStringForTesting(path, out, text)) continue;
    FUZZ_CHECK(out.starts_with(prefix));
    if (expected.empty()) expected = out;
    FUZZ_CHECK(out == expected);
  }
  std::string out(prefix);
  AppendJsonString(out, text);
  FUZZ_CHECK(out == expected);
  const std::string literal = out.substr(prefix.size());
  FUZZ_CHECK(literal.find_first_of("\r\n") == std::string::npos);
  boost::system::error_code ec;
  const json::value v = json::parse(literal, ec);
  FUZZ_CHECK(!ec && v.is_string());
  FUZZ_CHECK(std::string_view(v.as_string()) == Sanitized(text));
  return literal;
}

void CheckBase64(std::string_view bytes) {
  std::string expected;
  for (auto path : {Base64Path::kScalar, Base64Path::kSsse3, Base64Path::kAvx2}) {
    std::string out;
    if (!AppendBase64ForTesting(path, out, bytes)) continue;
    if (expected.empty() && !bytes.empty()) expected = out;
    FUZZ_CHECK(out == expected);
  }
  FUZZ_CHECK(Base64(bytes) == expected);
  const auto decoded = DecodeBase64(expected);
  FUZZ_CHECK(decoded && *decoded == bytes);
}

// One event as the daemon frames it, as a client parses it.
SseEvent ParseOne(const std::string& stream) {
  SseParser parser;
  auto events = parser.Feed(stream);
  FUZZ_CHECK(events.size() == 1);
  return events[0];
}

void CheckSse(std::string_view text, const std::string& literal, uint64_t id) {
  std::string out;
  sse::AppendEvent(out, id, "stdout", "{\"chunk\":" + literal + "}");
  const SseEvent event = ParseOne(out);
  FUZZ_CHECK(event.type == "stdout");
  FUZZ_CHECK(event.id == (id == 0 ? "" : std::to_string(id)));
  const json::value data = json::parse(event.data);
  FUZZ_CHECK(std::string_view(data.at("chunk").as_string()) == Sanitized(text));

  for (auto format : {sse::Format::kPandastack, sse::Format::kCloudflare}) {
    std::string error;
    sse::AppendError(error, format, ErrorCode::kInternal, text);
    const SseEvent e = ParseOne(error);
    FUZZ_CHECK(e.type == "error");
    const json::value v = json::parse(e.data);
    const char* key = format == sse::Format::kCloudflare ? "error" : "message";
    FUZZ_CHECK(std::string_view(v.at(key).as_string()) == Sanitized(text));
  }
}

}  // namespace
}  // namespace sandstream

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandstream;
  FuzzedDataProvider in(data, size);
  const uint64_t id = in.ConsumeIntegral<uint64_t>() >> 1;  // an output log's seq
  const std::string prefix = in.ConsumeRandomLengthString(40);
  const std::string text = in.ConsumeRandomLengthString(size);
  CheckUtf8(text);
  const std::string literal = CheckJsonString(text, prefix);
  CheckSse(text, literal, id);
  CheckBase64(text);
  CheckChunks(text, in);
  return 0;
}
