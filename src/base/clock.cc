#include "base/clock.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

namespace sandstream {

namespace {

// Exactly `n` digits at `text[at]` as a number, or -1.
int Digits(std::string_view text, size_t at, size_t n) {
  if (at + n > text.size()) return -1;
  int value = 0;
  for (size_t i = at; i < at + n; ++i) {
    if (text[i] < '0' || text[i] > '9') return -1;
    value = value * 10 + (text[i] - '0');
  }
  return value;
}

}  // namespace

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

std::optional<SystemTime> ParseRfc3339(std::string_view t) {
  const int year = Digits(t, 0, 4);
  const int month = Digits(t, 5, 2);
  const int day = Digits(t, 8, 2);
  const int hour = Digits(t, 11, 2);
  const int minute = Digits(t, 14, 2);
  const int second = Digits(t, 17, 2);
  if (year < 0 || month < 1 || month > 12 || day < 1 || day > 31 || hour < 0 || hour > 23 ||
      minute < 0 || minute > 59 || second < 0 || second > 60 || t.size() < 20 || t[4] != '-' ||
      t[7] != '-' || (t[10] != 'T' && t[10] != 't') || t[13] != ':' || t[16] != ':') {
    return std::nullopt;
  }
  static constexpr int kDays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  if (day > kDays[month - 1] || (month == 2 && day == 29 && !leap)) return std::nullopt;
  size_t at = 19;
  int64_t millis = 0;
  if (t[at] == '.') {
    size_t digits = 0;
    for (++at; at < t.size() && t[at] >= '0' && t[at] <= '9'; ++at, ++digits) {
      if (digits < 3) millis = millis * 10 + (t[at] - '0');
    }
    if (digits == 0) return std::nullopt;
    for (; digits < 3; ++digits) millis *= 10;
  }
  // Z, or an offset (a '+' in a query string that was not escaped arrives as a space).
  const bool utc = at + 1 == t.size() && (t[at] == 'Z' || t[at] == 'z');
  const bool offset =
      at + 6 == t.size() && (t[at] == '+' || t[at] == '-' || t[at] == ' ') && t[at + 3] == ':';
  if (!utc && !offset) return std::nullopt;
  int64_t offset_minutes = 0;
  if (offset) {
    const int oh = Digits(t, at + 1, 2);
    const int om = Digits(t, at + 4, 2);
    if (oh < 0 || oh > 23 || om < 0 || om > 59) return std::nullopt;
    offset_minutes = (t[at] == '-' ? -1 : 1) * (oh * 60 + om);
  }
  // Days from the civil date (the proleptic Gregorian calendar), as std::chrono counts them.
  const std::chrono::sys_days days = std::chrono::year_month_day{
      std::chrono::year{year}, std::chrono::month{static_cast<unsigned>(month)},
      std::chrono::day{static_cast<unsigned>(day)}};
  const int64_t seconds = days.time_since_epoch().count() * 86400 + hour * 3600 + minute * 60 +
                          std::min(second, 59) - offset_minutes * 60;
  return FromUnixMillis(seconds * 1000 + millis);
}

int64_t ToUnixMillis(SystemTime t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

SystemTime FromUnixMillis(int64_t ms) {
  using std::chrono::milliseconds;
  constexpr int64_t kLatest =
      std::chrono::duration_cast<milliseconds>(SystemTime::max().time_since_epoch()).count();
  constexpr int64_t kEarliest =
      std::chrono::duration_cast<milliseconds>(SystemTime::min().time_since_epoch()).count();
  return SystemTime(std::chrono::duration_cast<SystemTime::duration>(
      milliseconds(std::clamp(ms, kEarliest, kLatest))));
}

}  // namespace sandstream
