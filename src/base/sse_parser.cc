// Incremental Server-Sent Events parser; see sse_parser.h.
#include "base/sse_parser.h"

namespace sandstream {
namespace {

constexpr std::string_view kBom = "\xEF\xBB\xBF";

}  // namespace

std::vector<SseEvent> SseParser::Feed(std::string_view bytes) {
  std::vector<SseEvent> events;
  if (!started_) {
    // The BOM may itself arrive split; hold the bytes until it is decided.
    line_.append(bytes);
    if (line_.size() < kBom.size() && kBom.starts_with(line_)) return events;
    started_ = true;
    std::string pending = std::move(line_);
    line_.clear();
    std::string_view rest = pending;
    if (rest.starts_with(kBom)) rest.remove_prefix(kBom.size());
    return Feed(rest);
  }
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (after_cr_) {
      after_cr_ = false;
      if (bytes[pos] == '\n') {
        ++pos;
        continue;
      }
    }
    size_t end = bytes.find_first_of("\r\n", pos);
    if (end == std::string_view::npos) {
      line_.append(bytes.substr(pos));
      break;
    }
    std::string_view line = bytes.substr(pos, end - pos);
    if (!line_.empty()) {
      line_.append(line);
      ProcessLine(line_, &events);
      line_.clear();
    } else {
      ProcessLine(line, &events);
    }
    after_cr_ = bytes[end] == '\r';
    pos = end + 1;
  }
  return events;
}

void SseParser::Reset() {
  line_.clear();
  after_cr_ = false;
  started_ = false;
  event_type_.clear();
  data_.clear();
  has_data_ = false;
  id_buffer_ = last_event_id_;
}

void SseParser::ProcessLine(std::string_view line, std::vector<SseEvent>* out) {
  if (line.empty()) {
    last_event_id_ = id_buffer_;
    if (has_data_) {
      SseEvent event;
      if (!event_type_.empty()) event.type = std::move(event_type_);
      event.data = std::move(data_);
      event.id = last_event_id_;
      out->push_back(std::move(event));
    }
    event_type_.clear();
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // a comment, e.g. `: keepalive`
  std::string_view field = line;
  std::string_view value;
  if (size_t colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (value.starts_with(' ')) value.remove_prefix(1);
  }
  if (field == "event") {
    event_type_.assign(value);
  } else if (field == "data") {
    if (has_data_) data_ += '\n';
    data_.append(value);
    has_data_ = true;
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) id_buffer_.assign(value);
  }
  // `retry` and unknown fields are ignored: reconnection timing is the caller's policy.
}

}  // namespace sandstream
