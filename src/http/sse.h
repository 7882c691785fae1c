// SSE framing: an event or a comment appended to a string. Pure. What the events say is the
// caller's (api/sse.h encodes sandstream's).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sandstream::sse {

// `id: N\nevent: NAME\ndata: DATA\n\n`; `id` 0 omits the id line. `data` must be one line.
void AppendEvent(std::string& out, uint64_t id, std::string_view event, std::string_view data);
void AppendComment(std::string& out, std::string_view text);

}  // namespace sandstream::sse
