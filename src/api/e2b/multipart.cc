#include "api/e2b/multipart.h"

#include <algorithm>
#include <vector>

namespace sandstream::api::e2b {

namespace {

using Kind = MultipartEvent::Kind;

constexpr size_t kMaxBoundary = 70;  // RFC 2046's limit

Error Invalid(std::string message) {
  return Error{ErrorCode::kInvalidRequest, std::move(message)};
}

std::optional<MultipartEvent> Event(Kind kind, std::string_view data = {}) {
  return MultipartEvent{kind, data};
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t';
}

bool IsControl(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u < 0x20 && c != '\t') || u == 0x7f;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && Lower(a) == Lower(b);
}

// Tenant text in a message, cut short so that a message stays a line.
std::string Shown(std::string_view s) {
  constexpr size_t kMax = 100;
  if (s.size() <= kMax) return std::string(s);
  return std::string(s.substr(0, kMax)) + "...";
}

struct Parameter {
  std::string name;  // lowercased
  std::string value;
};

// The `; name=value` parameters that follow a header value's first token (RFC 9110's: a value
// is a token or a quoted string with backslash escapes). Errors name the problem only.
Result<std::vector<Parameter>> Parameters(std::string_view s) {
  std::vector<Parameter> out;
  size_t pos = 0;
  auto skip_space = [&] {
    while (pos < s.size() && IsSpace(s[pos])) ++pos;
  };
  while (pos < s.size()) {
    ++pos;  // the ';' that ends the token or the last parameter
    skip_space();
    if (pos == s.size()) break;
    if (s[pos] == ';') continue;
    const size_t eq = s.find_first_of("=;", pos);
    const std::string name = Lower(Trim(s.substr(pos, eq - pos)));
    if (eq == std::string_view::npos || s[eq] == ';') {
      return Invalid("parameter \"" + Shown(name) + "\" has no value");
    }
    if (name.empty()) return Invalid("a parameter has no name");
    pos = eq + 1;
    skip_space();
    std::string value;
    if (pos < s.size() && s[pos] == '"') {
      for (++pos;; ++pos) {
        if (pos >= s.size())
          return Invalid("parameter " + Shown(name) + "'s quotes are not closed");
        if (s[pos] == '"') break;
        if (s[pos] == '\\' && pos + 1 < s.size()) ++pos;
        value += s[pos];
      }
      ++pos;
      skip_space();
      if (pos < s.size() && s[pos] != ';') {
        return Invalid("bytes follow parameter " + Shown(name) + "'s closing quote");
      }
    } else {
      const size_t end = std::min(s.find(';', pos), s.size());
      value = Trim(s.substr(pos, end - pos));
      pos = end;
    }
    out.push_back({name, std::move(value)});
  }
  return out;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// An RFC 8187 ext-value (`UTF-8'en'a%20b.txt`), percent-decoded.
Result<std::string> ExtValue(std::string_view v) {
  const size_t charset_end = v.find('\'');
  const size_t language_end =
      charset_end == std::string_view::npos ? charset_end : v.find('\'', charset_end + 1);
  if (language_end == std::string_view::npos) {
    return Invalid("filename* is not of the form charset'language'value");
  }
  const std::string_view charset = v.substr(0, charset_end);
  if (!EqualsIgnoringCase(charset, "utf-8")) {
    return Invalid("filename*'s charset " + Shown(charset) + " is not served (UTF-8 is)");
  }
  std::string out;
  for (size_t i = language_end + 1; i < v.size(); ++i) {
    if (v[i] != '%') {
      out += v[i];
      continue;
    }
    const int hi = i + 2 < v.size() ? HexDigit(v[i + 1]) : -1;
    const int lo = hi < 0 ? -1 : HexDigit(v[i + 2]);
    if (lo < 0) return Invalid("filename* has a % not followed by two hex digits");
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

Result<void> ReadDisposition(std::string_view value, MultipartPart& part) {
  const size_t semi = std::min(value.find(';'), value.size());
  const std::string_view type = Trim(value.substr(0, semi));
  if (!EqualsIgnoringCase(type, "form-data")) {
    return Invalid("its Content-Disposition is " + Shown(type) + ", not form-data");
  }
  auto params = Parameters(value.substr(semi));
  if (!params) return Invalid("its Content-Disposition: " + params.error().message);
  std::optional<std::string> name, filename, ext_filename;
  for (Parameter& p : *params) {
    std::optional<std::string>* slot = p.name == "name"        ? &name
                                       : p.name == "filename"  ? &filename
                                       : p.name == "filename*" ? &ext_filename
                                                               : nullptr;
    if (!slot) continue;
    // Two answers to one question: a proxy may have read the other one.
    if (*slot) return Invalid("its Content-Disposition has two " + p.name + " parameters");
    *slot = std::move(p.value);
  }
  if (ext_filename) {
    auto decoded = ExtValue(*ext_filename);
    if (!decoded) return decoded.error();
    filename = std::move(*decoded);
  }
  part.name = name.value_or("");
  part.filename = filename.value_or("");
  if (part.name.find('\0') != std::string::npos || part.filename.find('\0') != std::string::npos) {
    return Invalid("its Content-Disposition holds a NUL byte");
  }
  return Ok{};
}

// A part's header lines, each ending in LF (or CRLF); obsolete line folding is read as a space.
Result<MultipartPart> ReadHeaders(std::string_view lines) {
  std::optional<std::string> disposition, content_type;
  std::string name, value;
  auto flush = [&]() -> Result<void> {
    std::optional<std::string>* slot = EqualsIgnoringCase(name, "content-disposition")
                                           ? &disposition
                                       : EqualsIgnoringCase(name, "content-type") ? &content_type
                                                                                  : nullptr;
    if (!slot) return Ok{};
    if (*slot) return Invalid("it has two " + name + " headers");
    *slot = std::move(value);
    return Ok{};
  };
  size_t pos = 0;
  while (pos < lines.size()) {
    const size_t end = std::min(lines.find('\n', pos), lines.size());
    std::string_view line = lines.substr(pos, end - pos);
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (std::any_of(line.begin(), line.end(), IsControl)) {
      return Invalid("its headers hold a control character");
    }
    if (!line.empty() && IsSpace(line.front())) {
      if (name.empty()) return Invalid("its headers start with a continuation line");
      value += ' ';
      value += Trim(line);
      continue;
    }
    if (!name.empty()) {
      if (auto flushed = flush(); !flushed) return flushed.error();
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0 ||
        std::any_of(line.begin(), line.begin() + colon, IsSpace)) {
      return Invalid("its header line \"" + Shown(line) + "\" is not name: value");
    }
    name = line.substr(0, colon);
    value = Trim(line.substr(colon + 1));
  }
  if (!name.empty()) {
    if (auto flushed = flush(); !flushed) return flushed.error();
  }
  if (!disposition) return Invalid("it has no Content-Disposition");
  MultipartPart part;
  if (auto read = ReadDisposition(*disposition, part); !read) return read.error();
  part.content_type = content_type.value_or("");
  return part;
}

bool IsBoundaryChar(char c) {
  // RFC 2046's bchars.
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         std::string_view("'()+_,-./:=? ").find(c) != std::string_view::npos;
}

}  // namespace

Result<std::string> MultipartBoundary(std::string_view content_type) {
  const size_t semi = std::min(content_type.find(';'), content_type.size());
  const std::string type = Lower(Trim(content_type.substr(0, semi)));
  if (type != "multipart/form-data") {
    return Error{ErrorCode::kUnsupportedMediaType,
                 "Content-Type " + Shown(type) + " is not multipart/form-data"};
  }
  auto params = Parameters(content_type.substr(semi));
  if (!params) return Invalid("the multipart/form-data Content-Type: " + params.error().message);
  std::optional<std::string> boundary;
  for (Parameter& p : *params) {
    if (p.name != "boundary") continue;
    if (boundary) return Invalid("the multipart/form-data Content-Type has two boundaries");
    boundary = std::move(p.value);
  }
  if (!boundary) return Invalid("the multipart/form-data Content-Type has no boundary");
  if (boundary->empty() || boundary->size() > kMaxBoundary) {
    return Invalid("the multipart boundary is " + std::to_string(boundary->size()) +
                   " characters long (RFC 2046 allows 1 to 70)");
  }
  if (!std::all_of(boundary->begin(), boundary->end(), IsBoundaryChar) || boundary->back() == ' ') {
    return Invalid("the multipart boundary \"" + Shown(*boundary) +
                   "\" holds a character RFC 2046 does not allow");
  }
  return std::move(*boundary);
}

// The body starts as if after a line break, so that a delimiter at its very start is found as
// any other is.
MultipartReader::MultipartReader(std::string boundary)
    : delimiter_("\n--" + boundary), carry_("\r\n"), kept_(2), in_carry_(true) {}

Result<void> MultipartReader::Feed(std::string_view piece) {
  if (failed_) return *failed_;
  if (!drained_) {
    return Error{ErrorCode::kInternal, "multipart: a piece was fed before the last was read"};
  }
  if (state_ == State::kEpilogue) return Ok{};
  drained_ = false;
  if (in_carry_) {
    carry_.erase(0, carry_pos_);
  } else {
    carry_.swap(left_);
  }
  left_.clear();
  carry_pos_ = 0;
  kept_ = carry_.size();
  in_carry_ = kept_ > 0;
  piece_ = piece;
  piece_pos_ = 0;
  if (in_carry_) {
    // What was kept is at most an undecided delimiter: this much more decides it, so reading
    // moves on into piece_ itself (see Consume).
    piece_pos_ = std::min(piece.size(), delimiter_.size() + 4);
    carry_.append(piece.substr(0, piece_pos_));
  }
  return Ok{};
}

std::string_view MultipartReader::Window() const {
  if (in_carry_) return std::string_view(carry_).substr(carry_pos_);
  return piece_.substr(piece_pos_);
}

void MultipartReader::Consume(size_t n) {
  if (!in_carry_) {
    piece_pos_ += n;
    return;
  }
  carry_pos_ += n;
  // Past what earlier pieces left, carry_ is a copy of piece_: read on in piece_.
  if (carry_pos_ >= kept_) {
    piece_pos_ = carry_pos_ - kept_;
    in_carry_ = false;
  }
}

MultipartReader::Scan MultipartReader::FindDelimiter(std::string_view w) const {
  size_t from = 0;
  for (;;) {
    const size_t i = w.find(delimiter_, from);
    if (i == std::string_view::npos) break;
    const size_t start = i > 0 && w[i - 1] == '\r' ? i - 1 : i;
    // As Go's mime/multipart (envd's) reads it: "--boundaryX" is a part's bytes.
    const std::string_view after = w.substr(i + delimiter_.size());
    if (after.empty()) return {start, Match::kNone};
    if (IsSpace(after[0]) || after[0] == '\r' || after[0] == '\n') return {start, Match::kBoundary};
    if (after[0] == '-') {
      if (after.size() == 1) return {start, Match::kNone};
      if (after[1] == '-') return {start, Match::kClose};
    }
    from = i + 1;
  }
  // The boundary has no LF, so only an LF in the last delimiter's length may begin one.
  size_t hold = w.size();
  for (size_t j = w.size() >= delimiter_.size() ? w.size() - delimiter_.size() + 1 : 0;
       j < w.size(); ++j) {
    if (w[j] == '\n' && delimiter_.starts_with(w.substr(j))) {
      hold = j;
      break;
    }
  }
  if (hold > 0 && w[hold - 1] == '\r') --hold;
  return {hold, Match::kNone};
}

Result<std::optional<MultipartEvent>> MultipartReader::Fail(std::string message) {
  failed_ = Invalid("the multipart body is malformed: " + std::move(message));
  return *failed_;
}

Result<std::optional<MultipartEvent>> MultipartReader::Drained() {
  drained_ = true;
  // The caller's piece may be gone by the next Feed.
  if (!in_carry_) left_.assign(piece_.substr(piece_pos_));
  return std::optional<MultipartEvent>();
}

Result<std::optional<MultipartEvent>> MultipartReader::Next() {
  if (failed_) return *failed_;
  if (drained_) return std::optional<MultipartEvent>();
  for (;;) {
    const std::string_view w = Window();
    if (w.empty()) return Drained();
    switch (state_) {
      case State::kPreamble:
      case State::kBody: {
        const Scan scan = FindDelimiter(w);
        if (scan.data > 0) {
          Consume(scan.data);
          if (state_ == State::kBody) return Event(Kind::kData, w.substr(0, scan.data));
          break;
        }
        if (scan.match == Match::kNone) {
          if (in_carry_ && piece_pos_ < piece_.size()) {
            failed_ = Error{ErrorCode::kInternal, "multipart: a delimiter spans the carry"};
            return *failed_;
          }
          return Drained();
        }
        const bool closed = scan.match == Match::kClose;
        Consume((w[0] == '\r' ? 1 : 0) + delimiter_.size() + (closed ? 2 : 0));
        const bool ended = state_ == State::kBody;
        state_ = closed ? State::kEpilogue : State::kBoundaryLine;
        padding_ = 0;
        line_cr_ = false;
        if (ended) return Event(Kind::kEnd);
        break;
      }
      case State::kBoundaryLine: {
        size_t i = 0;
        for (; i < w.size() && w[i] != '\n'; ++i) {
          if (line_cr_) return Fail("a boundary's line has a CR without an LF");
          if (w[i] == '\r') {
            line_cr_ = true;
          } else if (!IsSpace(w[i]) || ++padding_ > kMaxHeaderBytes) {
            return Fail("bytes follow a boundary on its line");
          }
        }
        if (i == w.size()) {
          Consume(i);
          break;
        }
        Consume(i + 1);
        state_ = State::kHeaders;
        header_.assign("\n");
        break;
      }
      case State::kHeaders: {
        const size_t old = header_.size();
        // One byte over the limit tells a block that is too long from one that is complete.
        header_.append(w.substr(0, std::min(w.size(), 1 + kMaxHeaderBytes + 1 - old)));
        size_t last = std::string::npos;  // the LF that ends the last header line
        size_t end = 0;                   // just past the blank line
        for (size_t p = header_.find('\n', old >= 2 ? old - 2 : 0); p != std::string::npos;
             p = header_.find('\n', p + 1)) {
          if (p + 1 < header_.size() && header_[p + 1] == '\n') {
            last = p, end = p + 2;
            break;
          }
          if (p + 2 < header_.size() && header_[p + 1] == '\r' && header_[p + 2] == '\n') {
            last = p, end = p + 3;
            break;
          }
        }
        const size_t part = parts_ + 1;
        if (last == std::string::npos ? header_.size() - 1 > kMaxHeaderBytes
                                      : end - 1 > kMaxHeaderBytes) {
          return Fail("part " + std::to_string(part) + "'s headers are over 16 KiB");
        }
        if (last == std::string::npos) {
          Consume(header_.size() - old);
          break;
        }
        Consume(end - old);
        auto read = ReadHeaders(std::string_view(header_).substr(1, last));
        if (!read) return Fail("part " + std::to_string(part) + ": " + read.error().message);
        part_ = std::move(*read);
        parts_ = part;
        header_.clear();
        state_ = State::kBody;
        return Event(Kind::kBegin);
      }
      case State::kEpilogue:
        Consume(w.size());
        break;
    }
  }
}

Result<void> MultipartReader::Finish() const {
  if (failed_) return *failed_;
  if (state_ != State::kEpilogue) {
    return Invalid("the multipart body is malformed: it ends before its closing boundary");
  }
  return Ok{};
}

}  // namespace sandstream::api::e2b
