// Signal names and numbers, as the API spells them ("TERM", "SIGTERM", "15").
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sandstream {

// Accepts "TERM", "SIGTERM", "sigterm" or a number 1..64; nullopt for anything else.
std::optional<int> ParseSignal(std::string_view text);
// "SIGTERM" for 15; "SIG<n>" for a number without a name.
std::string SignalName(int sig);

}  // namespace sandstream
