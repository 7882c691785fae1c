// Unit tests of the cursors: resuming after a sequence number (a Last-Event-ID), gaps with exact
// byte counts, the wake-up when the log grows, a parked reader's place kept for its grace, and
// flow control against a real process: a waiting cursor holds it back and loses nothing, a
// skipping one never holds it and is told what it missed, a stalled one is dropped to skipping
// (after the five minutes of reader_stall on the test's clock, too).
#include "process/cursor.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_loop.h"

namespace sandstream {
namespace {

namespace asio = boost::asio;
using unit::RunTask;
using unit::RunFor;
using unit::RunUntil;
using unit::Sh;
using namespace std::chrono_literals;

struct Drained {
  std::string data;
  std::vector<Gap> gaps;
};

// Reads `cursor` to the end of its log the way a stream does: take, then wait for more.
asio::awaitable<Drained> Drain(OutputCursor& cursor) {
  Drained d;
  for (;;) {
    auto slice = cursor.Next(64 * 1024);
    if (slice.gap) d.gaps.push_back(*slice.gap);
    for (const LogEntry* e : slice.entries) d.data += e->data;
    cursor.Taken();
    if (cursor.AtEnd()) break;
    if (!slice.gap && slice.entries.empty()) {
      const bool woken = co_await cursor.Wait(std::chrono::seconds(5));
      (void)woken;
    }
  }
  co_return d;
}

std::vector<uint64_t> Seqs(const OutputLog::Slice& slice) {
  std::vector<uint64_t> seqs;
  for (const LogEntry* e : slice.entries) seqs.push_back(e->seq);
  return seqs;
}

// Cursors over a log the test writes itself: a process that was never started.
class CursorTest : public ::testing::Test {
 protected:
  std::shared_ptr<Process> Bare(LogLimits limits) { return unit::BareProcess(io_, limits); }

  asio::io_context io_;
};

TEST(FlowTest, NamesRoundTrip) {
  EXPECT_EQ(ParseFlow("wait"), Flow::kWait);
  EXPECT_EQ(ParseFlow("skip"), Flow::kSkip);
  EXPECT_FALSE(ParseFlow("Wait"));
  EXPECT_FALSE(ParseFlow(""));
  EXPECT_EQ(FlowName(Flow::kWait), "wait");
  EXPECT_EQ(FlowName(Flow::kSkip), "skip");
}

TEST_F(CursorTest, AResumeAfterASeqGetsOnlyWhatFollows) {
  auto p = Bare({});
  for (const char* chunk : {"a", "b", "c", "d", "e"}) p->log().Append(EntryKind::kStdout, chunk);
  OutputCursor cursor(p, io_.get_executor(), 3, Flow::kSkip);  // Last-Event-ID: 3
  auto slice = cursor.Next(1 << 20);
  EXPECT_FALSE(slice.gap);
  EXPECT_EQ(Seqs(slice), (std::vector<uint64_t>{4, 5, 6}));
  EXPECT_EQ(cursor.after_seq(), 6u);
  EXPECT_FALSE(cursor.AtEnd()) << "no exit yet";
  EXPECT_TRUE(cursor.Next(1 << 20).entries.empty());
  p->log().Append(EntryKind::kExit, {});
  EXPECT_EQ(Seqs(cursor.Next(1 << 20)), (std::vector<uint64_t>{7}));
  EXPECT_TRUE(cursor.AtEnd());
}

TEST_F(CursorTest, NextStopsAtTheBatchSizeButAlwaysGivesOneEntry) {
  auto p = Bare({});
  p->log().Append(EntryKind::kStdout, std::string(100, 'a'));
  p->log().Append(EntryKind::kStdout, std::string(100, 'b'));
  OutputCursor cursor(p, io_.get_executor(), 1, Flow::kSkip);
  EXPECT_EQ(Seqs(cursor.Next(10)), (std::vector<uint64_t>{2}));
  EXPECT_EQ(Seqs(cursor.Next(10)), (std::vector<uint64_t>{3}));
}

TEST_F(CursorTest, ASkippingCursorLearnsExactlyWhatItMissed) {
  auto p = Bare({8, 1000});
  p->log().Append(EntryKind::kStdout, "aaaa");  // 2
  p->log().Append(EntryKind::kStdout, "bbbb");  // 3
  OutputCursor cursor(p, io_.get_executor(), 0, Flow::kSkip);
  EXPECT_EQ(Seqs(cursor.Next(1 << 20)), (std::vector<uint64_t>{1, 2, 3}));
  for (const char* chunk : {"cccc", "dddd", "eeee"}) p->log().Append(EntryKind::kStdout, chunk);
  // The window keeps 8 bytes: dddd and eeee. cccc went by unseen.
  auto slice = cursor.Next(1 << 20);
  ASSERT_TRUE(slice.gap);
  EXPECT_EQ(slice.gap->from_seq, 4u);
  EXPECT_EQ(slice.gap->to_seq, 4u);
  EXPECT_EQ(slice.gap->bytes, 4u);
  EXPECT_EQ(Seqs(slice), (std::vector<uint64_t>{5, 6}));
}

TEST_F(CursorTest, ACursorKnowsItsOffsetWhenTheLogHasForgottenIt) {
  auto p = Bare({8, 1000});
  p->log().Append(EntryKind::kStdout, "aaaa");
  p->log().Append(EntryKind::kStdout, "bbbb");
  OutputCursor reader(p, io_.get_executor(), 0, Flow::kSkip);
  (void)reader.Next(1 << 20);  // up to seq 3, offset 8
  // Far more evictions than the log's index of recent ones remembers.
  for (int i = 0; i < 3000; ++i) p->log().Append(EntryKind::kStdout, "x");
  const uint64_t first_kept_offset = p->log().entries().front().offset;
  auto slice = reader.Next(1 << 20);
  ASSERT_TRUE(slice.gap);
  EXPECT_EQ(slice.gap->from_seq, 4u);
  EXPECT_EQ(slice.gap->bytes, first_kept_offset - 8) << "the reader's own offset makes it exact";
  // A client resuming by sequence number alone, with nothing remembered for it: the gap is
  // told, its size is not guessed.
  OutputCursor resumed(p, io_.get_executor(), 3, Flow::kSkip);
  auto resumed_slice = resumed.Next(1 << 20);
  ASSERT_TRUE(resumed_slice.gap);
  EXPECT_EQ(resumed_slice.gap->from_seq, 4u);
  EXPECT_FALSE(resumed_slice.gap->bytes);
}

TEST_F(CursorTest, WaitWakesOnAppendAndTimesOutOtherwise) {
  auto p = Bare({});
  OutputCursor cursor(p, io_.get_executor(), 1, Flow::kSkip);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(RunTask(io_, cursor.Wait(std::chrono::milliseconds(50))));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 50ms);
  asio::steady_timer later(io_, 30ms);
  later.async_wait([&](const boost::system::error_code&) {
    p->log().Append(EntryKind::kStdout, "x");
  });
  EXPECT_TRUE(RunTask(io_, cursor.Wait(std::chrono::seconds(10)), 5s));
  EXPECT_EQ(Seqs(cursor.Next(1 << 20)), (std::vector<uint64_t>{2}));
  // Wake() (a client gone, the daemon stopping) ends a wait without output.
  asio::steady_timer wake(io_, 30ms);
  wake.async_wait([&](const boost::system::error_code&) { cursor.Wake(); });
  EXPECT_TRUE(RunTask(io_, cursor.Wait(std::chrono::seconds(10)), 5s));
}

TEST_F(CursorTest, AParkedReaderKeepsItsPlaceForTheGrace) {
  auto p = Bare({8, 1000});
  p->log().Append(EntryKind::kStdout, "aaaa");  // 2
  p->log().Append(EntryKind::kStdout, "bbbb");  // 3
  {
    OutputCursor cursor(p, io_.get_executor(), 0, Flow::kWait);
    (void)cursor.Next(1 << 20);
    cursor.Taken();
    cursor.Park(std::chrono::milliseconds(200));  // its client went away having taken seq 3
  }
  EXPECT_EQ(p->log().hold_count(), 1u) << "the parked place outlives the cursor";
  for (const char* chunk : {"cccc", "dddd", "eeee"}) p->log().Append(EntryKind::kStdout, chunk);
  {
    // The client comes back with Last-Event-ID 3: nothing was dropped meanwhile.
    OutputCursor resumed(p, io_.get_executor(), 3, Flow::kSkip);
    auto slice = resumed.Next(1 << 20);
    EXPECT_FALSE(slice.gap);
    EXPECT_EQ(Seqs(slice), (std::vector<uint64_t>{4, 5, 6}));
  }
  // After the grace the place is given up and the window shrinks back to its limit.
  RunFor(io_, 300ms);
  EXPECT_EQ(p->log().hold_count(), 0u);
  p->log().Append(EntryKind::kStdout, "ffff");
  EXPECT_LE(p->log().retained_bytes(), 8u);
  OutputCursor late(p, io_.get_executor(), 3, Flow::kSkip);
  auto slice = late.Next(1 << 20);
  ASSERT_TRUE(slice.gap);
  EXPECT_EQ(slice.gap->bytes, 8u) << "the gap after a released place is exact";
}

TEST_F(CursorTest, AWaitingCursorOfAnEndedLogHoldsNothing) {
  auto p = Bare({8, 1000});
  p->log().Append(EntryKind::kExit, {});
  OutputCursor cursor(p, io_.get_executor(), 0, Flow::kWait);
  EXPECT_EQ(p->log().hold_count(), 0u);
  EXPECT_EQ(cursor.flow(), Flow::kSkip);
}

TEST_F(CursorTest, AnEventCursorIsToldWhichEventsItMissed) {
  auto log = std::make_shared<EventLog>(LogLimits{1u << 20, 3});
  for (int i = 1; i <= 5; ++i) log->Append("tick", "{\"n\":" + std::to_string(i) + "}");
  EventCursor cursor(log, io_.get_executor(), 0);
  auto slice = cursor.Next(1 << 20);
  ASSERT_TRUE(slice.gap);
  EXPECT_EQ(slice.gap->from_seq, 1u);
  EXPECT_EQ(slice.gap->to_seq, 2u);
  ASSERT_EQ(slice.entries.size(), 3u);
  EXPECT_EQ(slice.entries.front()->data, "{\"n\":3}");
  EXPECT_FALSE(cursor.AtEnd());
  log->End();
  EXPECT_TRUE(cursor.AtEnd());
}

// Flow control against a real process writing more than its log's window.
class CursorFlowTest : public ::testing::Test {
 protected:
  // Far more than the stdout pipe holds (1 MiB): the writer blocks when the daemon stops reading.
  static constexpr size_t kBytes = 4000000;

  // Writes kBytes (and a newline) once its stdin closes, so the cursor is in place first.
  std::shared_ptr<Process> Start(ProcessOptions options = {},
                                 std::optional<double> timeout_seconds = 15) {
    CommandSpec spec = Sh("read go; head -c 4000000 /dev/zero | tr '\\0' y; echo");
    spec.keep_stdin_open = true;
    spec.timeout_seconds = timeout_seconds;
    spec.log_limits = {16384, 1u << 16};
    auto started = RunTask(io_, Process::Start(sandbox_.get(), spec, options, nullptr));
    if (!started) throw std::runtime_error("start: " + started.error().message);
    return *started;
  }

  static std::string Everything() { return std::string(kBytes, 'y') + "\n"; }

  asio::io_context io_;
  unit::DirectorySandbox sandbox_;
};

TEST_F(CursorFlowTest, AWaitingCursorHoldsTheProcessBackAndLosesNothing) {
  auto p = Start();
  OutputCursor cursor(p, io_.get_executor(), 0, Flow::kWait);
  ASSERT_TRUE(p->CloseStdin());
  EXPECT_TRUE(RunUntil(io_, [&] { return p->held(); }, 10s));
  RunFor(io_, 300ms);
  EXPECT_EQ(p->status(), ProcessStatus::kRunning) << "it ran on past its reader";
  EXPECT_TRUE(p->held());
  EXPECT_EQ(p->log().evicted_entries(), 0u);
  EXPECT_LT(p->log().total_bytes(), kBytes);
  const Drained d = RunTask(io_, Drain(cursor));
  EXPECT_TRUE(d.gaps.empty());
  EXPECT_EQ(d.data, Everything());
  ASSERT_TRUE(p->exit());
  EXPECT_EQ(p->exit()->reason, ExitReason::kExited);
  EXPECT_EQ(p->stalled_readers(), 0u);
}

TEST_F(CursorFlowTest, ASkippingCursorNeverHoldsTheProcessAndSeesAnExactGap) {
  auto p = Start();
  OutputCursor cursor(p, io_.get_executor(), 0, Flow::kSkip);
  ASSERT_TRUE(p->CloseStdin());
  RunTask(io_, p->WaitExit());
  EXPECT_EQ(p->exit()->reason, ExitReason::kExited);
  const Drained d = RunTask(io_, Drain(cursor));
  ASSERT_EQ(d.gaps.size(), 1u);
  EXPECT_EQ(d.gaps[0].from_seq, 1u);
  ASSERT_TRUE(d.gaps[0].bytes);
  EXPECT_EQ(*d.gaps[0].bytes, p->log().evicted_bytes());
  EXPECT_EQ(*d.gaps[0].bytes + d.data.size(), kBytes + 1);
  EXPECT_TRUE(Everything().ends_with(d.data));
  EXPECT_LE(d.data.size(), 16384u + 256u * 1024u);  // the window, or one read
}

TEST_F(CursorFlowTest, AStalledWaitingCursorIsDroppedToSkipping) {
  ProcessOptions options;
  options.reader_stall = std::chrono::milliseconds(200);
  auto p = Start(options);
  OutputCursor cursor(p, io_.get_executor(), 0, Flow::kWait);
  EXPECT_EQ(cursor.flow(), Flow::kWait);
  ASSERT_TRUE(p->CloseStdin());
  RunTask(io_, p->WaitExit());  // without a single read by the cursor
  EXPECT_EQ(p->exit()->reason, ExitReason::kExited);
  EXPECT_GE(p->stalled_readers(), 1u);
  EXPECT_EQ(cursor.flow(), Flow::kSkip);
  const Drained d = RunTask(io_, Drain(cursor));
  ASSERT_EQ(d.gaps.size(), 1u);
  ASSERT_TRUE(d.gaps[0].bytes);
  EXPECT_EQ(*d.gaps[0].bytes + d.data.size(), kBytes + 1);
}

// The same on the test's clock, with the daemon's five minutes of reader_stall.
class CursorClockTest : public CursorFlowTest {
 protected:
  testing::ManualTime clock_;
};

TEST_F(CursorClockTest, AWaitingCursorThatStallsFiveMinutesIsDroppedAndTheProcessRunsOn) {
  ProcessOptions options;
  ASSERT_EQ(options.reader_stall, std::chrono::minutes(5));
  auto p = Start(options, std::nullopt);  // no timeout: the clock passes any
  OutputCursor cursor(p, io_.get_executor(), 0, Flow::kWait);
  ASSERT_TRUE(p->CloseStdin());
  ASSERT_TRUE(RunUntil(io_, [&] { return p->held(); }, 10s));
  clock_.Advance(290s);
  RunFor(io_, 200ms);
  EXPECT_TRUE(p->held()) << "dropped before reader_stall";
  EXPECT_EQ(cursor.flow(), Flow::kWait);
  EXPECT_EQ(p->stalled_readers(), 0u);
  EXPECT_EQ(p->log().evicted_entries(), 0u);
  clock_.Advance(20s);
  RunTask(io_, p->WaitExit());  // without a single read by the cursor
  EXPECT_EQ(p->exit()->reason, ExitReason::kExited);
  EXPECT_EQ(p->stalled_readers(), 1u);
  EXPECT_EQ(cursor.flow(), Flow::kSkip);
  const Drained d = RunTask(io_, Drain(cursor));
  ASSERT_EQ(d.gaps.size(), 1u);
  ASSERT_TRUE(d.gaps[0].bytes);
  EXPECT_EQ(*d.gaps[0].bytes + d.data.size(), kBytes + 1);
}

}  // namespace
}  // namespace sandstream
