#include "base/clock.h"

#include <cstdio>
#include <ctime>

namespace sandstream {

std::string FormatRfc3339(SystemTime t) {
  const int64_t ms = ToUnixMillis(t);
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  return buf;
}

std::optional<SystemTime> ParseRfc3339(std::string_view text) {
  const std::string s(text);  // sscanf needs a terminator
  std::tm tm{};
  int ms = 0;
  if (std::sscanf(s.c_str(), "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) != 7) {
    return std::nullopt;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return FromUnixMillis(static_cast<int64_t>(timegm(&tm)) * 1000 + ms);
}

int64_t ToUnixMillis(SystemTime t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

SystemTime FromUnixMillis(int64_t ms) { return SystemTime(std::chrono::milliseconds(ms)); }

}  // namespace sandstream
