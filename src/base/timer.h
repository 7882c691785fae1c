// The daemon's timer: an Asio timer on SteadyClock, so every timeout it measures moves with the
// clock a test advances. Whatever the daemon times uses Timer, never asio::steady_timer.
#pragma once

#include <algorithm>
#include <chrono>

#include <boost/asio/basic_waitable_timer.hpp>

#include "base/clock.h"

namespace sandstream {

// How long the reactor may sleep before it looks at the clock again: the whole wait in the
// daemon; at most kManualPoll while a test drives the clock, so that a clock moved on by an
// hour fires its timers at once (the approach of Asio's time_t_timer example).
struct SteadyWaitTraits {
  static constexpr std::chrono::milliseconds kManualPoll{1};

  static SteadyClock::duration to_wait_duration(const SteadyClock::duration& d) {
    if (!SteadyClock::manual()) return d;
    return std::min<SteadyClock::duration>(d, kManualPoll);
  }
  static SteadyClock::duration to_wait_duration(const SteadyClock::time_point& t) {
    // A time already passed waits not at all; `t - now` for one far in the past would overflow.
    const SteadyTime now = SteadyClock::now();
    if (t <= now) return SteadyClock::duration::zero();
    return to_wait_duration(t - now);
  }
};

using Timer = boost::asio::basic_waitable_timer<SteadyClock, SteadyWaitTraits>;

}  // namespace sandstream
