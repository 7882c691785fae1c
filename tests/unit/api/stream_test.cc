// Unit tests of Pump, the loop every stream runs (a cursor read into a sink), against a sink
// that records what it is given: it ends with the log or at once without `follow`, sends
// keepalives while nothing comes, notices a client that went or a daemon that stops without
// waiting for the next keepalive, and lets the log drop a batch only once the sink took it.
// On the test's clock, through a Beast test stream: one keepalive per 15 s of silence.
#include "api/stream.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/_experimental/test/stream.hpp>

#include "../process/test_loop.h"

namespace sandstream::api {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using unit::RunFor;
using unit::RunTask;
using unit::RunUntil;
using unit::Sh;
using namespace std::chrono_literals;

// A sink that keeps what it is given; its client and its daemon are whatever the test says.
struct RecordingSink {
  std::string out;
  int flushes = 0;
  int keepalives = 0;
  bool is_stopping = false;
  bool is_gone = false;
  bool flush_fails = false;
  std::chrono::steady_clock::duration every = std::chrono::seconds(10);

  asio::awaitable<bool> Flush() {
    ++flushes;
    co_return !flush_fails;
  }
  bool stopping() const { return is_stopping; }
  bool gone() const { return is_gone; }
  uint64_t batch_bytes() const { return 1 << 20; }
  std::chrono::steady_clock::duration keepalive() const { return every; }
  void Keepalive() {
    ++keepalives;
    out += "[keepalive]";
  }
};

class PumpTest : public ::testing::Test {
 protected:
  std::shared_ptr<Process> Bare(LogLimits limits = {}) { return unit::BareProcess(io_, limits); }

  // Renders a gap as [gap from-to bytes], output as its bytes, the exit as [exit].
  static auto Render(RecordingSink& sink) {
    return [&sink](const OutputLog::Slice& slice) {
      if (slice.gap) {
        sink.out += "[gap " + std::to_string(slice.gap->from_seq) + "-" +
                    std::to_string(slice.gap->to_seq) + " " +
                    std::to_string(slice.gap->bytes.value_or(0)) + "]";
      }
      for (const LogEntry* e : slice.entries) {
        sink.out += e->kind == EntryKind::kExit ? std::string("[exit]") : std::string(e->data);
      }
    };
  }

  // Runs `f` once `delay` has passed.
  void After(std::chrono::milliseconds delay, std::function<void()> f) {
    auto timer = std::make_shared<asio::steady_timer>(io_, delay);
    timer->async_wait([timer, f = std::move(f)](const boost::system::error_code& ec) {
      if (!ec) f();
    });
  }

  asio::io_context io_;
};

TEST_F(PumpTest, WithoutFollowItEndsWithWhatTheLogHoldsNow) {
  auto p = Bare();
  p->log().Append(EntryKind::kStdout, "ab");
  p->log().Append(EntryKind::kStderr, "cd");
  OutputCursor cursor(p, io_.get_executor(), 0, Flow::kSkip);
  RecordingSink sink;
  EXPECT_EQ(RunTask(io_, Pump(cursor, sink, Render(sink), false), 5s), StreamEnd::kEnded);
  EXPECT_EQ(sink.out, "abcd");
  EXPECT_EQ(sink.keepalives, 0);
}

TEST_F(PumpTest, AGapIsRenderedBeforeTheEntriesAfterIt) {
  auto p = Bare({4, 1000});
  for (const char* chunk : {"aaaa", "bbbb", "cccc"}) p->log().Append(EntryKind::kStdout, chunk);
  p->log().Append(EntryKind::kExit, {});
  OutputCursor cursor(p, io_.get_executor(), 0, Flow::kSkip);
  RecordingSink sink;
  EXPECT_EQ(RunTask(io_, Pump(cursor, sink, Render(sink), true), 5s), StreamEnd::kEnded);
  EXPECT_EQ(sink.out, "[gap 1-3 8]cccc[exit]");
}

TEST_F(PumpTest, FollowingItSendsKeepalivesUntilTheExit) {
  auto p = Bare();
  OutputCursor cursor(p, io_.get_executor(), 1, Flow::kSkip);
  RecordingSink sink;
  sink.every = 30ms;
  After(250ms, [&] {
    p->log().Append(EntryKind::kStdout, "late");
    p->log().Append(EntryKind::kExit, {});
  });
  EXPECT_EQ(RunTask(io_, Pump(cursor, sink, Render(sink), true), 5s), StreamEnd::kEnded);
  EXPECT_GE(sink.keepalives, 2);
  EXPECT_TRUE(sink.out.starts_with("[keepalive]")) << sink.out;
  EXPECT_TRUE(sink.out.ends_with("late[exit]")) << sink.out;
}

TEST_F(PumpTest, AClientThatGoesIsNoticedWithoutWaitingForAKeepalive) {
  auto p = Bare();
  OutputCursor cursor(p, io_.get_executor(), 1, Flow::kSkip);
  RecordingSink sink;  // a keepalive every 10 s: far beyond the bound below
  After(50ms, [&] {
    sink.is_gone = true;
    cursor.Wake();
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(RunTask(io_, Pump(cursor, sink, Render(sink), true), 5s), StreamEnd::kGone);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(sink.keepalives, 0);
}

TEST_F(PumpTest, TheDaemonStoppingEndsAFollower) {
  auto p = Bare();
  OutputCursor cursor(p, io_.get_executor(), 1, Flow::kSkip);
  RecordingSink sink;
  After(50ms, [&] {
    sink.is_stopping = true;
    cursor.Wake();
  });
  EXPECT_EQ(RunTask(io_, Pump(cursor, sink, Render(sink), true), 5s), StreamEnd::kStopping);
}

TEST_F(PumpTest, ABatchTheSinkCouldNotTakeIsNotLetGo) {
  auto p = Bare({8, 1000});
  p->log().Append(EntryKind::kStdout, "aaaa");
  p->log().Append(EntryKind::kStdout, "bbbb");
  OutputCursor cursor(p, io_.get_executor(), 0, Flow::kWait);
  RecordingSink sink;
  sink.flush_fails = true;
  EXPECT_EQ(RunTask(io_, Pump(cursor, sink, Render(sink), true), 5s), StreamEnd::kGone);
  // The waiting cursor never said it took the batch: the log keeps all of it for a resume.
  for (const char* chunk : {"cccc", "dddd"}) p->log().Append(EntryKind::kStdout, chunk);
  EXPECT_EQ(p->log().evicted_entries(), 0u);
  EXPECT_EQ(p->log().first_retained_seq(), 1u);
}

TEST_F(PumpTest, ABatchTheSinkTookIsLetGo) {
  auto p = Bare({8, 1000});
  p->log().Append(EntryKind::kStdout, "aaaa");
  p->log().Append(EntryKind::kStdout, "bbbb");
  OutputCursor cursor(p, io_.get_executor(), 0, Flow::kWait);
  RecordingSink sink;
  EXPECT_EQ(RunTask(io_, Pump(cursor, sink, Render(sink), false), 5s), StreamEnd::kEnded);
  for (const char* chunk : {"cccc", "dddd"}) p->log().Append(EntryKind::kStdout, chunk);
  EXPECT_GT(p->log().evicted_entries(), 0u);
}

// An SSE response without a socket: what Pump renders goes out through one end of a Beast test
// stream, and the test reads the other end as the client would.
class TestStreamSink {
 public:
  TestStreamSink(beast::test::stream& stream, SteadyClock::duration keepalive)
      : stream_(stream), keepalive_(keepalive) {}

  std::string& out() { return out_; }
  asio::awaitable<bool> Flush() {
    if (out_.empty()) co_return true;
    auto [ec, n] = co_await asio::async_write(stream_, asio::buffer(out_), Tuple());
    (void)n;
    out_.clear();
    co_return !ec;
  }
  bool stopping() const { return false; }
  bool gone() const { return false; }
  uint64_t batch_bytes() const { return 1 << 20; }
  SteadyClock::duration keepalive() const { return keepalive_; }
  void Keepalive() { sse::AppendComment(out_, "keepalive"); }

 private:
  beast::test::stream& stream_;
  SteadyClock::duration keepalive_;
  std::string out_;
};

class PumpClockTest : public PumpTest {
 protected:
  PumpClockTest() { daemon_.connect(client_); }

  testing::ManualTime clock_;
  beast::test::stream daemon_{io_};
  beast::test::stream client_{io_};
};

TEST_F(PumpClockTest, AFollowerGetsAKeepaliveForEveryFifteenSecondsOfSilence) {
  auto p = Bare();
  OutputCursor cursor(p, io_.get_executor(), 1, Flow::kSkip);
  TestStreamSink sink(daemon_, 15s);  // the server's default keepalive
  const auto render = [&](const OutputLog::Slice& slice) {
    for (const LogEntry* e : slice.entries) {
      if (e->kind != EntryKind::kStdout) continue;
      sse::AppendEntry(sink.out(), sse::Format::kPandastack, sse::Kind::kExec, sse::Encoding::kUtf8,
                       *p, *e);
    }
  };
  std::optional<StreamEnd> end;
  asio::co_spawn(io_, Pump(cursor, sink, render, true),
                 [&](std::exception_ptr, StreamEnd e) { end = e; });
  RunFor(io_, 50ms);  // it starts, and arms its keepalive before the clock moves
  const std::string keepalive = ": keepalive\n\n";
  clock_.Advance(14s);
  RunFor(io_, 100ms);
  EXPECT_EQ(client_.str(), "") << "a keepalive before 15 s of silence";
  clock_.Advance(2s);
  ASSERT_TRUE(RunUntil(io_, [&] { return client_.str() == keepalive; }, 2s)) << client_.str();
  RunFor(io_, 50ms);  // its write completes, and the next wait is armed
  // The next one is 15 s after this one: one per silence, not one per look at the clock.
  clock_.Advance(14s);
  RunFor(io_, 100ms);
  EXPECT_EQ(client_.str(), keepalive);
  clock_.Advance(2s);
  ASSERT_TRUE(RunUntil(io_, [&] { return client_.str() == keepalive + keepalive; }, 2s))
      << client_.str();
  // Output appended while that keepalive is still being written (before Pump waits again) is
  // sent at once, not with the next keepalive 15 s later.
  p->log().Append(EntryKind::kStdout, "hi\n");
  p->log().Append(EntryKind::kExit, {});
  ASSERT_TRUE(RunUntil(io_, [&] { return end.has_value(); }, 2s));
  EXPECT_EQ(*end, StreamEnd::kEnded);
  EXPECT_EQ(client_.str(),
            keepalive + keepalive + "id: 2\nevent: stdout\ndata: {\"chunk\":\"hi\\n\"}\n\n");
}

}  // namespace
}  // namespace sandstream::api
