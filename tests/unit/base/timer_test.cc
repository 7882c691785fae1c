// Unit tests of the clock seam: SteadyClock moves only when a test's ManualTime advances it, a
// Timer of an hour fires once the clock passes the hour (and not before) within real
// milliseconds, and the async toolkit's timed waits (AsyncSignal, TaskGroup::Join) run on it.
#include "base/timer.h"

#include <gtest/gtest.h>

#include <optional>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include "../process/test_loop.h"
#include "base/async.h"

namespace sandstream {
namespace {

namespace asio = boost::asio;
using unit::RunFor;
using unit::RunUntil;
using namespace std::chrono_literals;

TEST(SteadyClockTest, OnlyATestMovesItAndNeverBack) {
  EXPECT_FALSE(SteadyClock::manual());
  const SteadyTime before = SteadyNow();
  {
    testing::ManualTime clock;
    EXPECT_TRUE(SteadyClock::manual());
    clock.Advance(1h);
    EXPECT_GE(SteadyNow() - before, 1h);
    const SteadyTime advanced = SteadyNow();
    clock.Advance(-2h);  // ignored: the clock is steady
    EXPECT_GE(SteadyNow(), advanced);
  }
  EXPECT_FALSE(SteadyClock::manual());
  EXPECT_GE(SteadyNow() - before, 1h) << "the clock went back when the guard went";
}

class TimerTest : public ::testing::Test {
 protected:
  testing::ManualTime clock_;  // first: before any timer is armed
  asio::io_context io_;
};

TEST_F(TimerTest, AnHourLongTimerFiresOnceTheClockPassesTheHour) {
  Timer timer(io_, 1h);
  bool fired = false;
  timer.async_wait([&](const boost::system::error_code& ec) { fired = !ec; });
  RunFor(io_, 50ms);
  EXPECT_FALSE(fired);
  clock_.Advance(59min);
  RunFor(io_, 50ms);
  EXPECT_FALSE(fired) << "fired before the clock passed its expiry";
  clock_.Advance(2min);
  EXPECT_TRUE(RunUntil(io_, [&] { return fired; }, 2s))
      << "the reactor did not look at the advanced clock";
}

// Runs `wait` into `out`.
asio::awaitable<void> Into(asio::awaitable<bool> wait, std::optional<bool>& out) {
  out = co_await std::move(wait);
}

TEST_F(TimerTest, ATimedSignalWaitEndsWithTheClock) {
  AsyncSignal signal(io_.get_executor());
  std::optional<bool> notified;
  asio::co_spawn(io_, Into(signal.Wait(10min), notified), [](std::exception_ptr) {});
  RunFor(io_, 50ms);  // it starts, and arms its timer before the clock moves
  clock_.Advance(9min);
  RunFor(io_, 50ms);
  EXPECT_FALSE(notified);
  clock_.Advance(2min);
  ASSERT_TRUE(RunUntil(io_, [&] { return notified.has_value(); }, 2s));
  EXPECT_FALSE(*notified) << "a timeout reported as a notification";
}

asio::awaitable<void> TimedThenUntimed(AsyncSignal& signal, bool& timed_out, bool& woke) {
  timed_out = !co_await signal.Wait(1min);
  co_await signal.Wait();
  woke = true;
}

TEST_F(TimerTest, AnUntimedSignalWaitAfterATimedOneWaitsForANotification) {
  AsyncSignal signal(io_.get_executor());
  bool timed_out = false;
  bool woke = false;
  asio::co_spawn(io_, TimedThenUntimed(signal, timed_out, woke), [](std::exception_ptr) {});
  RunFor(io_, 50ms);
  clock_.Advance(2min);
  ASSERT_TRUE(RunUntil(io_, [&] { return timed_out; }, 2s));
  RunFor(io_, 50ms);
  EXPECT_FALSE(woke) << "the untimed wait ended on the timed one's past expiry";
  signal.Notify();
  EXPECT_TRUE(RunUntil(io_, [&] { return woke; }, 2s));
}

asio::awaitable<void> Forever(AsyncSignal& never) { co_await never.Wait(); }

TEST_F(TimerTest, AJoinGivesUpOnceTheClockPassesItsBound) {
  AsyncSignal never(io_.get_executor());
  TaskGroup tasks(io_.get_executor());
  tasks.Spawn(Forever(never));
  std::optional<bool> joined;
  asio::co_spawn(io_, Into(tasks.Join(30s), joined), [](std::exception_ptr) {});
  RunFor(io_, 50ms);  // it starts, and arms its timer before the clock moves
  clock_.Advance(29s);
  RunFor(io_, 50ms);
  EXPECT_FALSE(joined) << "the join gave up before its bound";
  clock_.Advance(2s);
  ASSERT_TRUE(RunUntil(io_, [&] { return joined.has_value(); }, 2s));
  EXPECT_FALSE(*joined) << "a task still runs";
  never.Notify();
  ASSERT_TRUE(RunUntil(io_, [&] { return tasks.running() == 0; }, 2s));
}

}  // namespace
}  // namespace sandstream
