// The CLI's reading of a daemon's event stream: the SSE parser, fed whole and fed in pieces
// (the same events and last id whatever the split), then the process-stream decoder on top.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "check.h"
#include "cli/process_stream.h"
#include "base/sse_parser.h"

namespace sandstream {
namespace {

void CheckEvent(const SseEvent& e) {
  FUZZ_CHECK(!e.type.empty());
  FUZZ_CHECK(e.type.find_first_of("\r\n") == std::string::npos);
  FUZZ_CHECK(e.id.find_first_of(std::string_view("\r\n\0", 3)) == std::string::npos);
}

}  // namespace
}  // namespace sandstream

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandstream;
  using namespace sandstream::cli;
  FuzzedDataProvider in(data, size);
  std::vector<size_t> cuts;
  for (int n = in.ConsumeIntegralInRange(0, 8); n > 0; --n)
    cuts.push_back(in.ConsumeIntegral<uint16_t>());
  const std::string stream = in.ConsumeRemainingBytesAsString();

  SseParser whole;
  const std::vector<SseEvent> expected = whole.Feed(stream);
  for (const auto& e : expected) CheckEvent(e);

  SseParser pieces;
  std::vector<SseEvent> got;
  std::string_view rest(stream);
  for (size_t cut : cuts) {
    const size_t n = cut % (rest.size() + 1);
    for (auto& e : pieces.Feed(rest.substr(0, n))) got.push_back(std::move(e));
    rest.remove_prefix(n);
  }
  for (auto& e : pieces.Feed(rest)) got.push_back(std::move(e));
  FUZZ_CHECK(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    FUZZ_CHECK(got[i].type == expected[i].type);
    FUZZ_CHECK(got[i].data == expected[i].data);
    FUZZ_CHECK(got[i].id == expected[i].id);
  }
  FUZZ_CHECK(pieces.last_event_id() == whole.last_event_id());

  ProcessStream process({.on_output = [](Channel, std::string_view) { return true; },
                         .on_gap = [](int64_t, int64_t, int64_t) {}});
  process.Feed(stream);
  if (process.exit()) FUZZ_CHECK(process.done());
  return 0;
}
