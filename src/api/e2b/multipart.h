// multipart/form-data (RFC 7578) as E2B's SDKs upload files: an incremental reader that hands
// out a part's bytes as they arrive. Synchronous and Asio-free; it parses tenant input, so it
// never holds a whole part and every call does work bounded by the bytes it was fed.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"

namespace sandstream::api::e2b {

// The boundary of a `multipart/form-data; boundary=...` Content-Type (quoted or not), as RFC 2046
// allows it: 1 to 70 of its characters. Another type is kUnsupportedMediaType.
Result<std::string> MultipartBoundary(std::string_view content_type);

// A part's Content-Disposition and Content-Type. `filename` is `filename*`'s (RFC 8187,
// UTF-8) when the part has both.
struct MultipartPart {
  std::string name;
  std::string filename;
  std::string content_type;
};

struct MultipartEvent {
  // kBegin: a part starts (MultipartReader::part() names it); kData: the next bytes of that
  // part, never empty; kEnd: the part is complete.
  enum class Kind { kBegin, kData, kEnd };
  Kind kind;
  std::string_view data;
};

// Parts of a multipart/form-data body as its pieces arrive. The preamble and the epilogue are
// read past; lines may end in CRLF or a bare LF. Between pieces it keeps at most a delimiter
// and two bytes of a part's bytes, or the part's headers (at most kMaxHeaderBytes).
class MultipartReader {
 public:
  static constexpr size_t kMaxHeaderBytes = 16 * 1024;

  // `boundary` as MultipartBoundary gives it.
  explicit MultipartReader(std::string boundary);

  // The next piece of the body, once Next has returned nullopt for the last one. The piece
  // must stay valid until then. kData views point into the piece or into the reader: valid
  // while the piece is, and until the next Feed.
  Result<void> Feed(std::string_view piece);
  // The next event of the pieces fed so far, or nullopt when they are used up. A malformed
  // body is kInvalidRequest, and stays the answer.
  Result<std::optional<MultipartEvent>> Next();
  // The part of the last kBegin.
  const MultipartPart& part() const { return part_; }
  // After the last piece: whether the body was complete (its close delimiter was read).
  Result<void> Finish() const;

 private:
  enum class State { kPreamble, kBoundaryLine, kHeaders, kBody, kEpilogue };
  enum class Match { kNone, kBoundary, kClose };
  struct Scan {
    size_t data;  // bytes before the delimiter (or all that cannot begin one)
    Match match;
  };

  std::string_view Window() const;
  void Consume(size_t n);
  Scan FindDelimiter(std::string_view w) const;
  Result<std::optional<MultipartEvent>> Fail(std::string message);
  Result<std::optional<MultipartEvent>> Drained();

  std::string delimiter_;  // "\n--" boundary: a CR before it belongs to it too
  State state_ = State::kPreamble;
  std::optional<Error> failed_;
  bool drained_ = true;  // Next has returned nullopt since the last Feed
  MultipartPart part_;
  size_t parts_ = 0;
  // The bytes not yet used are the rest of carry_ (while in_carry_), then piece_'s from
  // piece_pos_. carry_ holds what earlier pieces left (its first kept_ bytes), then a copy of
  // the start of piece_: enough to decide any delimiter that began in an earlier piece.
  std::string_view piece_;
  size_t piece_pos_ = 0;
  std::string carry_;
  size_t carry_pos_ = 0;
  size_t kept_ = 0;
  bool in_carry_ = false;
  std::string left_;      // what the last piece left when it was drained outside carry_
  std::string header_;    // the headers read so far, after a "\n" that ends the boundary line
  size_t padding_ = 0;    // spaces after a boundary, before the end of its line
  bool line_cr_ = false;  // the boundary line's CR was read
};

}  // namespace sandstream::api::e2b
