// Unit tests of Process on the real directory runtime (plain child processes): the exit entry
// comes after every byte the leader wrote, timeouts and idle timeouts kill the group and say
// why (minutes long ones on the test's clock), output of processes the leader left behind is
// drained without delaying the exit, and stdin is written, closed and refused as documented.
#include "process/process.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <string>

#include "test_loop.h"

namespace sandstream {
namespace {

using unit::Output;
using unit::RunFor;
using unit::RunTask;
using unit::RunUntil;
using unit::Sh;
using namespace std::chrono_literals;

// What the exit callback saw of the log when it ran.
struct AtExit {
  int calls = 0;
  bool log_ended = false;
  EntryKind last_kind = EntryKind::kStart;
  uint64_t stdout_bytes = 0;
};

class ProcessTest : public ::testing::Test {
 protected:
  static ProcessOptions Options() {
    ProcessOptions options;
    options.kill_grace = 200ms;
    return options;
  }

  std::shared_ptr<Process> Start(CommandSpec spec, ProcessOptions options = Options()) {
    auto on_exit = [this](Process& p) {
      ++at_exit_.calls;
      at_exit_.log_ended = p.log().ended();
      at_exit_.last_kind = p.log().entries().back().kind;
      at_exit_.stdout_bytes = p.stdout_bytes();
    };
    auto started = RunTask(io_, Process::Start(sandbox_.get(), std::move(spec), options, on_exit));
    if (!started) throw std::runtime_error("start: " + started.error().message);
    return *started;
  }

  const ExitRecord& WaitExit(Process& p) {
    RunTask(io_, p.WaitExit());
    return *p.exit();
  }

  boost::asio::io_context io_;
  unit::DirectorySandbox sandbox_;
  AtExit at_exit_;
};

TEST_F(ProcessTest, TheExitEntryComesAfterEveryByteTheLeaderWrote) {
  // The leader's last 600000 bytes are still in the pipe (1 MiB) when it exits: they are read
  // first.
  for (int round = 0; round < 3; ++round) {
    at_exit_ = {};
    auto p = Start(Sh("head -c 600000 /dev/zero | tr '\\0' x; printf END; printf ERR >&2; exit 3",
                      "proc_" + std::to_string(round)));
    const ExitRecord& exit = WaitExit(*p);
    EXPECT_EQ(exit.exit_code, 3);
    EXPECT_EQ(exit.reason, ExitReason::kExited);
    EXPECT_FALSE(exit.signal);
    const auto& entries = p->log().entries();
    ASSERT_GE(entries.size(), 3u);
    EXPECT_EQ(entries.front().kind, EntryKind::kStart);
    EXPECT_EQ(entries.back().kind, EntryKind::kExit);
    for (size_t i = 1; i + 1 < entries.size(); ++i) {
      EXPECT_TRUE(entries[i].kind == EntryKind::kStdout || entries[i].kind == EntryKind::kStderr)
          << "entry " << entries[i].seq << " between start and exit";
    }
    EXPECT_EQ(Output(p->log()), std::string(600000, 'x') + "END");
    EXPECT_EQ(Output(p->log(), EntryKind::kStderr), "ERR");
    EXPECT_EQ(p->stdout_bytes(), 600003u);
    EXPECT_EQ(p->stderr_bytes(), 3u);
    // The callback runs once, with the exit already in the log.
    EXPECT_EQ(at_exit_.calls, 1);
    EXPECT_TRUE(at_exit_.log_ended);
    EXPECT_EQ(at_exit_.last_kind, EntryKind::kExit);
    EXPECT_EQ(at_exit_.stdout_bytes, 600003u);
  }
}

TEST_F(ProcessTest, ADeathBySignalIsReportedAsOne) {
  auto p = Start(Sh("printf before; kill -KILL $$"));
  const ExitRecord& exit = WaitExit(*p);
  EXPECT_EQ(exit.reason, ExitReason::kSignaled);
  EXPECT_EQ(exit.signal, SIGKILL);
  EXPECT_EQ(exit.exit_code, 128 + SIGKILL);
  EXPECT_EQ(Output(p->log()), "before");
}

TEST_F(ProcessTest, ATimeoutTermsTheWholeGroup) {
  CommandSpec spec = Sh("sleep 30 & sleep 30; echo never");
  spec.timeout_seconds = 0.2;
  auto p = Start(std::move(spec));
  const ExitRecord& exit = WaitExit(*p);
  EXPECT_EQ(exit.reason, ExitReason::kTimeout);
  EXPECT_EQ(exit.signal, SIGTERM);
  EXPECT_GE(exit.duration_ms, 190);
  EXPECT_LT(exit.duration_ms, 10000);
  EXPECT_EQ(Output(p->log()), "");
  // The background sleep got the TERM too: nothing of the group is left.
  EXPECT_TRUE(RunUntil(
      io_, [&] { return !unit::GroupAlive(p->pid()); }, 5s));
}

TEST_F(ProcessTest, ATimeoutIgnoredByTheCommandEndsWithKillAfterTheGrace) {
  CommandSpec spec = Sh("trap '' TERM; sleep 30; echo never");
  spec.timeout_seconds = 0.5;  // long after the shell has set its trap
  auto p = Start(std::move(spec));
  const ExitRecord& exit = WaitExit(*p);
  EXPECT_EQ(exit.reason, ExitReason::kTimeout);
  EXPECT_EQ(exit.signal, SIGKILL);
  EXPECT_EQ(exit.exit_code, 128 + SIGKILL);
  // The timeout, then the whole kill grace (200 ms).
  EXPECT_GE(exit.duration_ms, 690);
}

TEST_F(ProcessTest, TheIdleTimeoutCountsFromTheLastOutput) {
  CommandSpec spec = Sh("for i in 1 2 3 4 5 6; do echo $i; sleep 0.15; done; sleep 30");
  spec.idle_timeout_seconds = 0.5;
  auto p = Start(std::move(spec));
  const ExitRecord& exit = WaitExit(*p);
  EXPECT_EQ(exit.reason, ExitReason::kIdleTimeout);
  EXPECT_EQ(exit.signal, SIGTERM);
  // Each line restarted the clock: all six came (the last after 0.75 s), then 0.5 s of silence.
  EXPECT_EQ(Output(p->log()), "1\n2\n3\n4\n5\n6\n");
  EXPECT_GE(exit.duration_ms, 1240);
}

TEST_F(ProcessTest, TheExitDoesNotWaitForWhatTheLeaderLeftRunning) {
  auto p = Start(Sh("(sleep 5; echo late) & echo early"));
  const ExitRecord& exit = WaitExit(*p);
  EXPECT_EQ(exit.reason, ExitReason::kExited);
  EXPECT_EQ(exit.exit_code, 0);
  EXPECT_LT(exit.duration_ms, 4000) << "the exit waited for the background writer";
  EXPECT_EQ(Output(p->log()), "early\n");
  const Result<void> late = p->Signal(SIGKILL, true);
  ASSERT_FALSE(late) << "a signal after the exit was accepted";
  EXPECT_EQ(late.error().code, ErrorCode::kConflict);
}

TEST_F(ProcessTest, OutputAfterTheExitIsReadAndDropped) {
  // After the exit the background writer sends far more than the pipe holds (1 MiB): it
  // finishes only if the daemon keeps reading (and dropping) its output.
  auto p = Start(Sh("(sleep 0.3; head -c 3000000 /dev/zero; touch drained) & printf early"));
  WaitExit(*p);
  const uint64_t last_seq = p->log().last_seq();
  const std::string drained = sandbox_.workspace() + "/drained";
  EXPECT_TRUE(RunUntil(
      io_, [&] { return std::filesystem::exists(drained); }, 10s))
      << "the background writer blocked on a full pipe";
  EXPECT_EQ(p->log().last_seq(), last_seq) << "output was appended after the exit";
  EXPECT_EQ(p->log().entries().back().kind, EntryKind::kExit);
  EXPECT_EQ(Output(p->log()), "early");
}

// The descriptors this test process has open.
int OpenFds() {
  int n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++n;
  }
  return n;
}

TEST_F(ProcessTest, AFinishedProcessKeepsNoDescriptor) {
  // Its pidfd, its pipes (stdin, stdout, stderr) and its log's memfd go with its exit; what it
  // wrote stays readable. (A first process sets up the event loop's own descriptors.)
  WaitExit(*Start(Sh("true", "proc_warm")));
  RunFor(io_, 300ms);
  const int before = OpenFds();
  CommandSpec spec = Sh("echo out; echo err >&2");
  spec.keep_stdin_open = true;
  auto p = Start(spec);
  EXPECT_GT(OpenFds(), before);
  EXPECT_GE(p->log().ring_fd(), 0);
  WaitExit(*p);
  EXPECT_TRUE(RunUntil(
      io_, [&] { return OpenFds() == before; }, 5s))
      << OpenFds() - before << " descriptors more than before the start";
  EXPECT_EQ(p->log().ring_fd(), -1);
  EXPECT_EQ(Output(p->log()), "out\n");
  EXPECT_EQ(Output(p->log(), EntryKind::kStderr), "err\n");
  EXPECT_EQ(p->log().entries().back().kind, EntryKind::kExit);
}

TEST_F(ProcessTest, APipeALeftRunningWriterHoldsClosesAtItsEndOfFile) {
  WaitExit(*Start(Sh("true", "proc_warm")));
  RunFor(io_, 300ms);
  const int before = OpenFds();
  auto p = Start(Sh("(sleep 0.5; echo late) & echo early"));
  WaitExit(*p);
  EXPECT_GT(OpenFds(), before) << "the pipe closed while a writer still had it";
  EXPECT_TRUE(RunUntil(
      io_, [&] { return OpenFds() == before; }, 10s))
      << OpenFds() - before << " descriptors more than before the start";
  EXPECT_EQ(Output(p->log()), "early\n");
}

TEST_F(ProcessTest, StdinDataIsWrittenThenClosed) {
  CommandSpec spec = Sh("cat; echo done");
  spec.stdin_data = "hello\nworld";
  spec.timeout_seconds = 10;  // cat without EOF would run until this
  auto p = Start(std::move(spec));
  const ExitRecord& exit = WaitExit(*p);
  EXPECT_EQ(exit.reason, ExitReason::kExited);
  EXPECT_EQ(Output(p->log()), "hello\nworlddone\n");
  EXPECT_FALSE(p->stdin_open());
}

TEST_F(ProcessTest, StdinKeptOpenTakesWritesUntilClosed) {
  CommandSpec spec = Sh("cat");
  spec.keep_stdin_open = true;
  spec.timeout_seconds = 10;
  auto p = Start(std::move(spec));
  ASSERT_TRUE(p->stdin_open());
  auto wrote = RunTask(io_, p->WriteStdin("abc"));
  ASSERT_TRUE(wrote) << wrote.error().message;
  EXPECT_EQ(*wrote, 3u);
  // cat echoes it while still running: stdin stays open between writes.
  EXPECT_TRUE(RunUntil(
      io_, [&] { return Output(p->log()) == "abc"; }, 5s));
  EXPECT_EQ(p->status(), ProcessStatus::kRunning);
  ASSERT_TRUE(RunTask(io_, p->WriteStdin("def")));
  ASSERT_TRUE(p->CloseStdin());
  EXPECT_FALSE(p->stdin_open());
  const auto again = RunTask(io_, p->WriteStdin("late"));
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kConflict);
  EXPECT_EQ(p->CloseStdin().error().code, ErrorCode::kConflict);
  const ExitRecord& exit = WaitExit(*p);
  EXPECT_EQ(exit.reason, ExitReason::kExited) << "cat did not see EOF";
  EXPECT_EQ(Output(p->log()), "abcdef");
  const auto after_exit = RunTask(io_, p->WriteStdin("x"));
  ASSERT_FALSE(after_exit);
  EXPECT_EQ(after_exit.error().code, ErrorCode::kConflict);
}

TEST_F(ProcessTest, WithoutStdinAWriteIsAConflict) {
  auto p = Start(Sh("sleep 30"));
  EXPECT_FALSE(p->stdin_open());
  const auto wrote = RunTask(io_, p->WriteStdin("x"));
  ASSERT_FALSE(wrote);
  EXPECT_EQ(wrote.error().code, ErrorCode::kConflict);
  p->Kill(ExitReason::kKilled);
  const ExitRecord& exit = WaitExit(*p);
  EXPECT_EQ(exit.reason, ExitReason::kKilled) << "Kill's reason is what the exit reports";
  EXPECT_EQ(exit.signal, SIGTERM);
}

TEST_F(ProcessTest, ASignalReachesTheGroupOrTheLeaderAlone) {
  // USR1 to the leader alone: the background child lives on and keeps writing.
  auto p = Start(Sh("(while :; do sleep 0.05; printf c; done) & sleep 30"));
  ASSERT_TRUE(RunUntil(
      io_, [&] { return !Output(p->log()).empty(); }, 5s));  // it runs
  ASSERT_TRUE(p->Signal(SIGUSR1, false));
  const ExitRecord& exit = WaitExit(*p);
  EXPECT_EQ(exit.reason, ExitReason::kSignaled);
  EXPECT_EQ(exit.signal, SIGUSR1);
  EXPECT_TRUE(unit::GroupAlive(p->pid())) << "the group went with the leader";
  ::kill(-p->pid(), SIGKILL);

  auto q = Start(Sh("sleep 30 & sleep 30", "proc_group"));
  ASSERT_TRUE(q->Signal(SIGUSR2, true));
  EXPECT_EQ(WaitExit(*q).signal, SIGUSR2);
  EXPECT_TRUE(RunUntil(
      io_, [&] { return !unit::GroupAlive(q->pid()); }, 5s));
}

// Timeouts as long as real ones, on a clock the test moves: what happens at minute ten and
// what must not happen a little before.
class ProcessClockTest : public ProcessTest {
 protected:
  testing::ManualTime clock_;
};

TEST_F(ProcessClockTest, ATenMinuteTimeoutTermsOnceTheClockPassesItThenKillsAfterTheGrace) {
  ProcessOptions options = Options();
  options.kill_grace = 60s;  // far beyond the real time the test takes
  // The trap reports the TERM and carries on: only the KILL ends it. Its sleeps are real time,
  // far longer than the test takes, and bound what a failed test leaves running.
  CommandSpec spec = Sh("trap 'echo term' TERM; echo ready; sleep 30; sleep 30");
  spec.timeout_seconds = 600;
  auto p = Start(std::move(spec), options);
  ASSERT_TRUE(RunUntil(
      io_, [&] { return Output(p->log()) == "ready\n"; }, 10s));
  clock_.Advance(590s);
  RunFor(io_, 200ms);
  EXPECT_EQ(Output(p->log()), "ready\n") << "TERMed before the timeout";
  clock_.Advance(20s);
  const auto termed = [&] { return Output(p->log()) == "ready\nterm\n" || p->exit(); };
  ASSERT_TRUE(RunUntil(io_, termed, 10s)) << "no TERM once the clock passed the timeout";
  RunFor(io_, 200ms);
  EXPECT_EQ(p->status(), ProcessStatus::kRunning) << "KILLed before the grace";
  EXPECT_EQ(Output(p->log()), "ready\nterm\n");
  clock_.Advance(61s);
  const ExitRecord& exit = WaitExit(*p);
  EXPECT_EQ(exit.reason, ExitReason::kTimeout);
  EXPECT_EQ(exit.signal, SIGKILL);
  // Its duration is the clock's: 590 + 20 + 61 s, and the real moments between.
  EXPECT_GE(exit.duration_ms, 671000);
  EXPECT_LT(exit.duration_ms, 671000 + 30000);
}

TEST_F(ProcessClockTest, AFiveMinuteIdleTimeoutCountsFromTheLastOutput) {
  CommandSpec spec = Sh("cat");
  spec.keep_stdin_open = true;
  spec.idle_timeout_seconds = 300;
  auto p = Start(std::move(spec));
  clock_.Advance(200s);
  RunFor(io_, 100ms);
  ASSERT_EQ(p->status(), ProcessStatus::kRunning);
  ASSERT_TRUE(RunTask(io_, p->WriteStdin("x\n")));
  ASSERT_TRUE(RunUntil(
      io_, [&] { return Output(p->log()) == "x\n"; }, 10s));
  // 400 s after the start, 200 s after the output.
  clock_.Advance(200s);
  RunFor(io_, 200ms);
  EXPECT_EQ(p->status(), ProcessStatus::kRunning) << "the idle clock ran from the start";
  clock_.Advance(150s);
  const ExitRecord& exit = WaitExit(*p);
  EXPECT_EQ(exit.reason, ExitReason::kIdleTimeout);
  EXPECT_EQ(exit.signal, SIGTERM);
}

TEST_F(ProcessClockTest, PausedTimeIsNotCountedByTheTimeout) {
  CommandSpec spec = Sh("echo ready; sleep 30");
  spec.timeout_seconds = 600;
  auto p = Start(std::move(spec));
  ASSERT_TRUE(RunUntil(
      io_, [&] { return Output(p->log()) == "ready\n"; }, 10s));
  clock_.Advance(300s);
  p->Pause();
  clock_.Advance(3600s);  // an hour paused, far past the timeout
  RunFor(io_, 200ms);
  EXPECT_EQ(p->status(), ProcessStatus::kRunning) << "killed while paused";
  p->Resume();
  clock_.Advance(290s);  // 590 s of running time
  RunFor(io_, 200ms);
  EXPECT_EQ(p->status(), ProcessStatus::kRunning) << "the paused hour counted";
  clock_.Advance(20s);
  EXPECT_EQ(WaitExit(*p).reason, ExitReason::kTimeout);
}

TEST_F(ProcessClockTest, PausedTimeIsNotIdle) {
  CommandSpec spec = Sh("cat");
  spec.keep_stdin_open = true;
  spec.idle_timeout_seconds = 300;
  auto p = Start(std::move(spec));
  clock_.Advance(200s);
  p->Pause();
  p->Pause();  // a second pause changes nothing
  clock_.Advance(1000s);
  RunFor(io_, 200ms);
  ASSERT_EQ(p->status(), ProcessStatus::kRunning) << "idle while paused";
  p->Resume();
  p->Resume();
  clock_.Advance(90s);  // 290 s idle, not counting the pause
  RunFor(io_, 200ms);
  EXPECT_EQ(p->status(), ProcessStatus::kRunning) << "the paused time counted as idle";
  clock_.Advance(20s);
  const ExitRecord& exit = WaitExit(*p);
  EXPECT_EQ(exit.reason, ExitReason::kIdleTimeout);
}

}  // namespace
}  // namespace sandstream
