// Time vocabulary: wall-clock timestamps for the wire, monotonic time for durations. The
// monotonic clock is the daemon's one seam for time: tests move it forward (testing::ManualTime)
// instead of sleeping. No Asio here: the timer on this clock is in timer.h.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sandstream {

namespace testing {
class ManualTime;
}

using SystemTime = std::chrono::system_clock::time_point;

// std::chrono::steady_clock plus an offset only a test's ManualTime moves: zero in the daemon.
// Its time_point is its own, so a deadline taken on std::chrono::steady_clock does not compile
// against it: nothing is measured half on one clock and half on the other.
struct SteadyClock {
  using duration = std::chrono::steady_clock::duration;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<SteadyClock>;
  static constexpr bool is_steady = true;

  static time_point now() noexcept {
    return time_point(std::chrono::steady_clock::now().time_since_epoch() +
                      duration(offset_.load(std::memory_order_relaxed)));
  }
  // Whether a test drives the clock: timers then look at it every millisecond (timer.h).
  static bool manual() noexcept { return manual_.load(std::memory_order_relaxed) > 0; }

 private:
  friend class testing::ManualTime;
  static inline std::atomic<rep> offset_{0};
  static inline std::atomic<int> manual_{0};
};

using SteadyTime = SteadyClock::time_point;

inline SystemTime SystemNow() {
  return std::chrono::system_clock::now();
}
inline SteadyTime SteadyNow() {
  return SteadyClock::now();
}

// RFC 3339 in UTC with milliseconds: 2026-12-02T14:18:01.123Z
std::string FormatRfc3339(SystemTime t);
// An RFC 3339 date-time, what FormatRfc3339 writes and what clients send:
// YYYY-MM-DDTHH:MM:SS, an optional fraction (to the millisecond; more digits are cut), then Z
// or an offset (+HH:MM, -HH:MM; a space for the '+' of a query string not escaped). nullopt for
// anything else, fields out of range included.
std::optional<SystemTime> ParseRfc3339(std::string_view text);
int64_t ToUnixMillis(SystemTime t);
// The system clock counts nanoseconds (about 292 years either side of 1970): a time beyond is
// the clock's nearest end, never an overflow.
SystemTime FromUnixMillis(int64_t ms);

namespace testing {

// Tests only. While one exists, Advance() moves SteadyClock forward at once, and with it every
// Timer and deadline of the daemon; real time still flows underneath. Create it before the
// timers it is to move (the reactor may sleep the real time of one armed before). The clock
// never goes back, not even when the guard goes: it stays monotonic for the whole process.
class ManualTime {
 public:
  ManualTime() { SteadyClock::manual_.fetch_add(1); }
  ~ManualTime() { SteadyClock::manual_.fetch_sub(1); }
  ManualTime(const ManualTime&) = delete;
  ManualTime& operator=(const ManualTime&) = delete;

  void Advance(SteadyClock::duration by) {
    if (by > SteadyClock::duration::zero()) SteadyClock::offset_.fetch_add(by.count());
  }
};

}  // namespace testing

}  // namespace sandstream
