// Time vocabulary: wall-clock timestamps for the wire, monotonic time for durations.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sandstream {

using SystemTime = std::chrono::system_clock::time_point;
using SteadyTime = std::chrono::steady_clock::time_point;

inline SystemTime SystemNow() { return std::chrono::system_clock::now(); }
inline SteadyTime SteadyNow() { return std::chrono::steady_clock::now(); }

// RFC 3339 in UTC with milliseconds: 2026-12-02T14:18:01.123Z
std::string FormatRfc3339(SystemTime t);
// The inverse of FormatRfc3339; nullopt for anything it did not write.
std::optional<SystemTime> ParseRfc3339(std::string_view text);
int64_t ToUnixMillis(SystemTime t);
SystemTime FromUnixMillis(int64_t ms);

}  // namespace sandstream
