#include "api/common/metrics.h"

#include <charconv>
#include <chrono>

namespace sandstream::api {

Result<std::optional<SystemTime>> TimeQuery(const Context& ctx, std::string_view name) {
  const std::optional<std::string_view> text = ctx.Query(name);
  if (!text) return std::optional<SystemTime>();
  int64_t seconds = 0;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), seconds);
  // Up to the year 9999, so that its milliseconds fit.
  constexpr int64_t kLatest = 253402300799;
  if (ec == std::errc() && end == text->data() + text->size() && seconds >= 0 &&
      seconds <= kLatest) {
    return std::optional<SystemTime>(FromUnixMillis(seconds * 1000));
  }
  if (auto at = ParseRfc3339(*text)) return std::optional<SystemTime>(*at);
  return Invalid(std::string(name) +
                 " must be a time: Unix seconds, or RFC 3339 such as 2026-01-02T03:04:05.000Z");
}

std::vector<const ResourceSample*> SamplesIn(const ResourceSeries& series,
                                             std::optional<SystemTime> start,
                                             std::optional<SystemTime> end) {
  std::vector<const ResourceSample*> out;
  for (const ResourceSample& s : series.samples) {
    if (start && s.at < *start) continue;
    if (end && s.at > *end) break;
    out.push_back(&s);
  }
  return out;
}

}  // namespace sandstream::api
