// Unit tests of Service on the directory runtime: the journal records a start before its exit
// even for a command that ends at once, idempotency keys (a retry during the spawn included),
// the quotas and request checks, deletion and shutdown killing what runs and refusing more; on
// the test's clock, a sandbox's TTL of an hour and the trim of a finished process's window.
#include "service/service.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "../process/test_loop.h"
#include "process/cursor.h"

namespace sandstream {
namespace {

namespace asio = boost::asio;
using unit::RunFor;
using unit::RunTask;
using unit::RunUntil;
using unit::Sh;
using namespace std::chrono_literals;

std::vector<std::string> EventNames(const EventLog& journal) {
  std::vector<std::string> names;
  for (const Event& e : journal.entries()) names.push_back(e.name);
  return names;
}

// Starts a process into `slot` (co_spawn's own handler would need a default Result).
asio::awaitable<void> StartInto(Service& service, std::string sandbox_id, CommandSpec spec,
                                std::optional<Result<Service::Started>>& slot) {
  slot.emplace(co_await service.StartProcess(std::move(sandbox_id), std::move(spec)));
}

class ServiceTest : public ::testing::Test {
 protected:
  ServiceTest() : runtime_(dir_.path() + "/sandboxes") { unit::IgnoreSigpipe(); }

  ~ServiceTest() override {
    if (!service_) return;
    try {
      RunTask(io_, service_->Shutdown(), 5s);
    } catch (const std::exception&) {
    }
    service_.reset();
  }

  void Make(ServiceOptions options = {}) {
    auto store = Store::Open(dir_.path() + "/state.db");
    ASSERT_TRUE(store) << store.error().message;
    store_ = std::move(*store);
    options.images_dir = dir_.path() + "/images";
    options.base_env = {"PATH=/usr/local/bin:/usr/bin:/bin"};
    options.kill_grace = 200ms;
    options.teardown_on_exit = true;
    service_ = std::make_unique<Service>(io_.get_executor(), runtime_, *store_, options);
  }

  Result<const SandboxEntry*> Create(SandboxRequest req = {}) {
    return RunTask(io_, service_->CreateSandbox(std::move(req)));
  }
  const SandboxEntry* NewSandbox() {
    auto sb = Create();
    if (!sb) throw std::runtime_error(sb.error().message);
    return *sb;
  }
  Result<Service::Started> Start(const std::string& sandbox_id, CommandSpec spec) {
    spec.id.clear();  // the service names it
    return RunTask(io_, service_->StartProcess(sandbox_id, std::move(spec)));
  }

  asio::io_context io_;
  unit::TempDir dir_;
  sandbox::DirectoryRuntime runtime_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Service> service_;
};

TEST_F(ServiceTest, TheJournalRecordsAStartBeforeItsExit) {
  Make();
  const SandboxEntry* sb = NewSandbox();
  // `true` may end before StartProcess has recorded it: its exit still comes second.
  for (int i = 0; i < 3; ++i) {
    auto started = Start(sb->id, Sh("true"));
    ASSERT_TRUE(started) << started.error().message;
    EXPECT_FALSE(started->attached);
    RunTask(io_, started->process->WaitExit());
  }
  ASSERT_TRUE(RunUntil(
      io_, [&] { return sb->journal->entries().size() == 7; }, 5s))
      << sb->journal->entries().size();
  EXPECT_EQ(EventNames(*sb->journal),
            (std::vector<std::string>{"sandbox.created", "process.started", "process.exited",
                                      "process.started", "process.exited", "process.started",
                                      "process.exited"}));
  EXPECT_EQ(sb->processes.size(), 3u);
  EXPECT_EQ(sb->RunningProcesses(), 0u);
  EXPECT_EQ(service_->metrics().processes_started_total, 3u);
}

TEST_F(ServiceTest, AnIdempotencyKeyGivesBackTheProcessItStarted) {
  Make();
  const SandboxEntry* sb = NewSandbox();
  CommandSpec spec = Sh("sleep 30");
  spec.idempotency_key = "key-1";
  // Two requests at once: the second waits for the first one's spawn and attaches to it.
  std::vector<std::optional<Result<Service::Started>>> results(2);
  for (auto& slot : results) {
    asio::co_spawn(io_, StartInto(*service_, sb->id, spec, slot), [](std::exception_ptr) {});
  }
  ASSERT_TRUE(RunUntil(
      io_, [&] { return results[0] && results[1]; }, 10s));
  ASSERT_TRUE(*results[0]) << results[0]->error().message;
  ASSERT_TRUE(*results[1]) << results[1]->error().message;
  EXPECT_EQ((*results[0])->process, (*results[1])->process);
  EXPECT_NE((*results[0])->attached, (*results[1])->attached);
  EXPECT_EQ(sb->processes.size(), 1u);

  CommandSpec other = Sh("sleep 31");
  other.idempotency_key = "key-1";
  auto conflict = Start(sb->id, other);
  ASSERT_FALSE(conflict);
  EXPECT_EQ(conflict.error().code, ErrorCode::kConflict);
}

TEST_F(ServiceTest, RunningProcessesAreCountedAgainstTheQuota) {
  ServiceOptions options;
  options.max_processes_per_sandbox = 1;
  Make(options);
  const SandboxEntry* sb = NewSandbox();
  auto first = Start(sb->id, Sh("sleep 30"));
  ASSERT_TRUE(first) << first.error().message;
  auto refused = Start(sb->id, Sh("true"));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kQuotaExceeded);
  first->process->Kill(ExitReason::kKilled);
  RunTask(io_, first->process->WaitExit());
  auto after = Start(sb->id, Sh("true"));
  EXPECT_TRUE(after) << "a finished process still counted";
}

TEST_F(ServiceTest, RequestsOutsideTheLimitsAreRefused) {
  ServiceOptions options;
  options.max_sandboxes = 1;
  options.max_limits.memory_mb = 1024;
  Make(options);
  SandboxRequest unknown;
  unknown.template_name = "nope";
  auto a = Create(unknown);
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code, ErrorCode::kInvalidRequest);
  SandboxRequest too_big;
  too_big.limits["memory_mb"] = 2048;
  auto b = Create(too_big);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().code, ErrorCode::kInvalidRequest);
  SandboxRequest unknown_limit;
  unknown_limit.limits["gpus"] = 1;
  EXPECT_FALSE(Create(unknown_limit));
  ASSERT_TRUE(Create());
  auto c = Create();
  ASSERT_FALSE(c);
  // A full daemon is 503 unavailable, not the caller's quota: a gateway tries another node.
  EXPECT_EQ(c.error().code, ErrorCode::kUnavailable);
  auto missing = Start("sb_missing", Sh("true"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
}

TEST_F(ServiceTest, AProcessIdInUseIsAConflict) {
  Make();
  const SandboxEntry* sb = NewSandbox();
  CommandSpec spec = Sh("sleep 30", "proc_mine");
  auto first = RunTask(io_, service_->StartProcess(sb->id, spec));
  ASSERT_TRUE(first);
  EXPECT_EQ(first->process->id(), "proc_mine");
  auto second = RunTask(io_, service_->StartProcess(sb->id, spec));
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, ErrorCode::kConflict);
}

TEST_F(ServiceTest, DeletingASandboxKillsItsProcessesAndEndsItsJournal) {
  Make();
  const SandboxEntry* sb = NewSandbox();
  const std::string id = sb->id;
  auto journal = sb->journal;
  const std::string root = sb->runtime->RootPath();
  ASSERT_TRUE(std::filesystem::exists(root));
  auto started = Start(id, Sh("trap '' TERM; echo ready; sleep 30"));  // ends only by a KILL
  ASSERT_TRUE(started);
  auto p = started->process;
  ASSERT_TRUE(RunUntil(
      io_, [&] { return unit::Output(p->log()) == "ready\n"; }, 5s));
  auto deleted = RunTask(io_, service_->DeleteSandbox(id));
  ASSERT_TRUE(deleted) << deleted.error().message;
  ASSERT_TRUE(p->exit());
  EXPECT_EQ(p->exit()->reason, ExitReason::kKilled);
  EXPECT_EQ(p->exit()->signal, SIGKILL);
  EXPECT_EQ(service_->Find(id), nullptr);
  EXPECT_FALSE(std::filesystem::exists(root));
  EXPECT_TRUE(journal->ended());
  EXPECT_EQ(journal->entries().back().name, "sandbox.deleted");
  auto again = RunTask(io_, service_->DeleteSandbox(id));
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kNotFound);
}

TEST_F(ServiceTest, ShutdownKillsWhatRunsAndRefusesMore) {
  Make();
  const SandboxEntry* sb = NewSandbox();
  const std::string id = sb->id;
  auto started = Start(id, Sh("sleep 30"));
  ASSERT_TRUE(started);
  RunTask(io_, service_->Shutdown(), 10s);
  EXPECT_TRUE(service_->shutting_down());
  ASSERT_TRUE(started->process->exit());
  EXPECT_EQ(started->process->exit()->reason, ExitReason::kKilled);
  auto create = Create();
  ASSERT_FALSE(create);
  EXPECT_EQ(create.error().code, ErrorCode::kShuttingDown);
  auto start = Start(id, Sh("true"));
  ASSERT_FALSE(start);
  EXPECT_EQ(start.error().code, ErrorCode::kShuttingDown);
}

TEST_F(ServiceTest, WhatASandboxTakesIsCountedUntilItIsDeleted) {
  Make();
  SandboxRequest req;
  req.tenant = "acme";
  req.limits["memory_mb"] = 128;
  auto made = Create(req);
  ASSERT_TRUE(made) << made.error().message;
  const std::string id = (*made)->id;
  EXPECT_EQ(service_->Usage("acme").sandboxes, 1);
  EXPECT_EQ(service_->quotas().Committed().at("acme").memory_mb, 128);
  ASSERT_TRUE(RunTask(io_, service_->DeleteSandbox(id), 10s));
  EXPECT_EQ(service_->Usage("acme").sandboxes, 0);
  EXPECT_TRUE(service_->quotas().Committed().empty());
  EXPECT_EQ(service_->quotas().creating(), 0u);
}

TEST_F(ServiceTest, ARestartDropsAnUnreadableRecordAndTakesBackTheRest) {
  Make();
  const std::string id = NewSandbox()->id;
  RunTask(io_, service_->Shutdown(), 10s);
  service_.reset();
  // A record that parses but lacks what a sandbox needs, and one that does not parse.
  ASSERT_TRUE(store_->PutSandbox("sb_partial", R"({"status":"running","env":[]})"));
  ASSERT_TRUE(store_->PutSandbox("sb_garbled", "{not json"));
  Make();  // the same state database, opened again
  service_->Restore();
  ASSERT_EQ(service_->sandbox_count(), 1u);
  EXPECT_NE(service_->Find(id), nullptr);
  auto rows = store_->Sandboxes();
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 1u) << "the unreadable records are dropped from the store";
  EXPECT_EQ(rows->front().id, id);
}

// The service's timers on the test's clock: an hour passes at once.
class ServiceClockTest : public ServiceTest {
 protected:
  testing::ManualTime clock_;
};

TEST_F(ServiceClockTest, ASandboxIsDeletedOnceTheClockPassesItsTtl) {
  Make();
  SandboxRequest req;
  req.ttl_seconds = 3600;
  auto created = Create(req);
  ASSERT_TRUE(created) << created.error().message;
  const std::string id = (*created)->id;
  auto journal = (*created)->journal;
  auto started = Start(id, Sh("sleep 3600"));
  ASSERT_TRUE(started) << started.error().message;
  auto p = started->process;
  clock_.Advance(3590s);
  RunFor(io_, 200ms);
  EXPECT_NE(service_->Find(id), nullptr) << "deleted before its TTL";
  EXPECT_EQ(p->status(), ProcessStatus::kRunning);
  clock_.Advance(20s);
  ASSERT_TRUE(RunUntil(
      io_, [&] { return service_->Find(id) == nullptr; }, 10s))
      << "still there once the clock passed its TTL";
  ASSERT_TRUE(p->exit());
  EXPECT_EQ(p->exit()->reason, ExitReason::kKilled);
  EXPECT_TRUE(journal->ended());
  EXPECT_EQ(journal->entries().back().name, "sandbox.deleted");
}

TEST_F(ServiceClockTest, AFinishedProcessKeepsItsWindowForTheGraceAfterItsLastReaderLeft) {
  Make();
  ASSERT_EQ(service_->options().finished_window_grace, 60s);
  const uint64_t tail = service_->options().retained_tail_bytes;
  const SandboxEntry* sb = NewSandbox();
  auto started = Start(sb->id, Sh("head -c 300000 /dev/zero | tr '\\0' x"));
  ASSERT_TRUE(started) << started.error().message;
  auto p = started->process;
  auto reader = std::make_unique<OutputCursor>(p, io_.get_executor(), 0, Flow::kSkip);
  RunTask(io_, p->WaitExit());
  RunFor(io_, 100ms);  // the service arms its trim once the exit is recorded
  ASSERT_EQ(unit::Output(p->log()).size(), 300000u);
  ASSERT_GT(p->log().retained_bytes(), tail);
  // Time passes as it does, in steps of 5 s, so that the trim's checks see it go by.
  const auto pass = [&](std::chrono::seconds total) {
    for (auto done = 0s; done < total; done += 5s) {
      clock_.Advance(5s);
      RunFor(io_, 20ms);
    }
  };
  pass(65s);
  EXPECT_GT(p->log().retained_bytes(), tail) << "trimmed under a reader";
  // The grace counts from when the last reader left, not from the exit or the trim's checks.
  reader.reset();
  pass(55s);
  EXPECT_GT(p->log().retained_bytes(), tail) << "trimmed within the grace after the reader left";
  pass(40s);  // the grace, and the quarter-grace step of each side
  EXPECT_TRUE(RunUntil(
      io_, [&] { return p->log().retained_bytes() <= tail; }, 5s))
      << p->log().retained_bytes() << " bytes kept";
  EXPECT_EQ(p->log().entries().back().kind, EntryKind::kExit) << "the tail lost the exit";
}

TEST_F(ServiceClockTest, OneSweepTrimsEachFinishedProcessOfASandboxAfterItsOwnGrace) {
  Make();
  const uint64_t tail = service_->options().retained_tail_bytes;
  const SandboxEntry* sb = NewSandbox();
  const auto pass = [&](std::chrono::seconds total) {
    for (auto done = 0s; done < total; done += 5s) {
      clock_.Advance(5s);
      RunFor(io_, 20ms);
    }
  };
  const auto finish = [&] {
    auto started = Start(sb->id, Sh("head -c 200000 /dev/zero | tr '\\0' x"));
    EXPECT_TRUE(started) << started.error().message;
    RunTask(io_, started->process->WaitExit());
    RunFor(io_, 100ms);
    EXPECT_GT(started->process->log().retained_bytes(), tail);
    return started->process;
  };
  auto first = finish();
  pass(30s);
  auto second = finish();  // 30 s later: its grace ends 30 s after the first's
  pass(45s);
  EXPECT_TRUE(RunUntil(
      io_, [&] { return first->log().retained_bytes() <= tail; }, 5s))
      << "the first kept its window 75 s after its end";
  EXPECT_GT(second->log().retained_bytes(), tail) << "the second trimmed 45 s after its end";
  pass(30s);
  EXPECT_TRUE(RunUntil(
      io_, [&] { return second->log().retained_bytes() <= tail; }, 5s));
  EXPECT_TRUE(service_->Find(sb->id)->held_windows.empty());
}

}  // namespace
}  // namespace sandstream
