#include "http/sse.h"

#include <charconv>

namespace sandstream::sse {

void AppendEvent(std::string& out, uint64_t id, std::string_view event, std::string_view data) {
  if (id != 0) {
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, id);
    out += "id: ";
    out.append(buf, end);
    out += '\n';
  }
  out += "event: ";
  out += event;
  out += "\ndata: ";
  out += data;
  out += "\n\n";
}

void AppendComment(std::string& out, std::string_view text) {
  out += ": ";
  out += text;
  out += "\n\n";
}

}  // namespace sandstream::sse
