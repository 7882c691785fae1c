// The E2B adapter's upload bodies (api/e2b/multipart.h, api/e2b/inflate.h), as a tenant sends
// them. The first byte picks a piece size; the rest is a multipart body with the boundary "b",
// read whole and in pieces of that size: both reads must agree (parts, bytes, success), and
// every data event must be non-empty. The same bytes are inflated as a gzip body, whose pieces
// must never exceed the size asked.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "api/e2b/inflate.h"
#include "api/e2b/multipart.h"
#include "check.h"

namespace sandstream::api::e2b {
namespace {

struct Read {
  std::string parts;  // every event, in order, with the part's name and filename
  bool ok = true;
};

Read ReadBody(std::string_view body, size_t piece_size) {
  MultipartReader reader("b");
  Read out;
  size_t at = 0;
  do {
    const std::string piece(body.substr(at, piece_size));  // a copy, so stale views show
    at += piece_size;
    if (!reader.Feed(piece)) {
      out.ok = false;
      return out;
    }
    for (;;) {
      auto event = reader.Next();
      if (!event) {
        out.ok = false;
        return out;
      }
      if (!*event) break;
      switch ((*event)->kind) {
        case MultipartEvent::Kind::kBegin:
          out.parts += "<" + reader.part().name + "|" + reader.part().filename + ">";
          break;
        case MultipartEvent::Kind::kData:
          FUZZ_CHECK(!(*event)->data.empty());
          out.parts += (*event)->data;
          break;
        case MultipartEvent::Kind::kEnd:
          out.parts += "</>";
          break;
      }
    }
  } while (at < body.size());
  out.ok = static_cast<bool>(reader.Finish());
  return out;
}

}  // namespace
}  // namespace sandstream::api::e2b

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandstream::api::e2b;
  if (size < 1) return 0;
  const size_t piece = 1 + data[0] % 16;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const Read whole = ReadBody(body, body.empty() ? 1 : body.size());
  const Read pieces = ReadBody(body, piece);
  FUZZ_CHECK(whole.ok == pieces.ok);
  FUZZ_CHECK(!whole.ok || whole.parts == pieces.parts);

  GzipInflater inflater;
  if (inflater.Feed(body)) {
    for (;;) {
      auto out = inflater.Next(piece);
      if (!out || !*out) break;
      FUZZ_CHECK((*out)->size() <= piece);
    }
    (void)inflater.Finish();
  }
  return 0;
}
