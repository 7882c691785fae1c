// Unit tests of the RFC 3339 timestamps: what the daemon writes reads back, what clients send
// (fractions, offsets) reads as the same instant, and everything else is refused.
#include "base/clock.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sandstream {
namespace {

std::optional<int64_t> Millis(std::string_view text) {
  auto t = ParseRfc3339(text);
  if (!t) return std::nullopt;
  return ToUnixMillis(*t);
}

TEST(Rfc3339, ReadsWhatItWrites) {
  for (int64_t ms :
       {int64_t{0}, int64_t{1}, int64_t{999}, int64_t{1796736781123}, int64_t{9000000000000}}) {
    const std::string text = FormatRfc3339(FromUnixMillis(ms));
    EXPECT_EQ(Millis(text), ms) << text;
  }
  EXPECT_EQ(FormatRfc3339(FromUnixMillis(1796736781123)), "2026-12-08T13:33:01.123Z");
}

TEST(Rfc3339, ReadsFractionsAndOffsets) {
  EXPECT_EQ(Millis("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(Millis("1970-01-01t00:00:01z"), 1000);
  EXPECT_EQ(Millis("1970-01-01T00:00:00.5Z"), 500);
  EXPECT_EQ(Millis("1970-01-01T00:00:00.123456789Z"), 123);  // cut to the millisecond
  EXPECT_EQ(Millis("1970-01-01T01:00:00+01:00"), 0);
  EXPECT_EQ(Millis("1970-01-01T01:00:00 01:00"), 0);  // a '+' a query string made a space
  EXPECT_EQ(Millis("1969-12-31T23:30:00-00:30"), 0);
  EXPECT_EQ(Millis("2024-02-29T00:00:00Z"), 1709164800000);
  EXPECT_EQ(Millis("2016-12-31T23:59:60Z"), Millis("2016-12-31T23:59:59Z"));  // leap second
}

TEST(Rfc3339, TimesPastTheClockAreItsEnd) {
  const int64_t latest = ToUnixMillis(SystemTime::max());
  EXPECT_EQ(Millis("9999-12-31T23:59:59.999Z"), latest);
  EXPECT_EQ(ToUnixMillis(FromUnixMillis(INT64_MAX)), latest);
  EXPECT_EQ(ToUnixMillis(FromUnixMillis(INT64_MIN)), ToUnixMillis(SystemTime::min()));
}

TEST(Rfc3339, RefusesWhatIsNotOne) {
  for (std::string_view text :
       {"", "2026", "2026-12-08", "2026-12-08T14:13:01", "2026-12-08 14:13:01Z",
        "2026-13-08T14:13:01Z", "2026-00-08T14:13:01Z", "2026-02-30T00:00:00Z",
        "2023-02-29T00:00:00Z", "2026-12-08T24:00:00Z", "2026-12-08T14:60:00Z",
        "2026-12-08T14:13:61Z", "2026-12-08T14:13:01.Z", "2026-12-08T14:13:01+1:00",
        "2026-12-08T14:13:01+24:00", "2026-12-08T14:13:01Zjunk", "2026-12-08T14:13:01+01:00x",
        "yesterday", "+026-12-08T14:13:01Z"}) {
    EXPECT_EQ(ParseRfc3339(text), std::nullopt) << text;
  }
}

}  // namespace
}  // namespace sandstream
