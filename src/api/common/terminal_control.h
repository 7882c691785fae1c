// The control messages of a terminal's WebSocket (GET exec/pty), apart from the route so that
// tests and fuzzers reach them: they read the message and touch only the terminal given.
#pragma once

#include <string>
#include <string_view>

#include "base/result.h"

namespace sandstream {
class Terminal;
}

namespace sandstream::api {

// A terminal has 1 to this many rows, and as many columns.
inline constexpr int kMaxCells = 1000;

// {"type":"resize","rows","cols"} resizes `terminal` (none: only checks it); {"type":"input",
// "data"} returns the input to write. Anything else is the error to send back.
Result<std::string> ApplyControl(Terminal* terminal, std::string_view text);

// A binary frame starting with 0x01 is a control message when the rest is a JSON object;
// otherwise (a lone Ctrl-A, say) it is input like any other.
bool IsBinaryControl(std::string_view data);

}  // namespace sandstream::api
