#include "process/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <cerrno>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "base/log.h"
#include "platform/fd.h"
#include "platform/pty.h"
#include "platform/signals.h"
#include "process/await_op.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace sandstream {
namespace asio = boost::asio;
using asio::use_awaitable;
using std::chrono::milliseconds;

namespace {

// One read(2) takes at most this much: large enough for few syscalls per GiB, small enough that
// the stream renders it while it is still in cache.
constexpr size_t kReadMax = 256 * 1024;
// What a terminal may still deliver after its leader exited beyond what FIONREAD counted (the
// tty layer's buffers are not all in that count).
constexpr size_t kTerminalDrainSlack = 64 * 1024;

size_t Pending(int fd) {
  int n = 0;
  if (::ioctl(fd, FIONREAD, &n) != 0 || n < 0) return 0;
  return static_cast<size_t>(n);
}

SteadyClock::duration Seconds(double s) {
  return std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(s));
}

// Closes a descriptor whose open file the sandbox's keeper holds too (every one of a process's:
// its pipes, terminal, pidfd and exit pipe). Asio's close() leaves the epoll registration to go
// with the file, but the keeper's copy keeps the file open, so the registration would outlive
// the descriptor and report the file's later events (a pipe's other end closing) to whatever
// Asio registered next in its recycled state: a spurious wake-up of an unrelated wait.
// release() takes the registration out first.
void CloseShared(asio::posix::stream_descriptor& d) {
  if (d.is_open()) ::close(d.release());
}

void CloseShared(std::unique_ptr<asio::posix::stream_descriptor>& d) {
  if (d) CloseShared(*d);
}

// A terminal's relay, kept after the log's memfd (its read end, then its write end; a terminal
// an earlier version started has none, and its output is read), taken back into `relay`; what
// a crash left in it goes into `log` first, before anything the terminal holds.
void TakeRelay(std::vector<UniqueFd>& kept, OutputLog& log, Pipe& relay) {
  if (kept.size() != 3) return;
  relay.read = std::move(kept[1]);
  relay.write = std::move(kept[2]);
  while (log.Take(EntryKind::kStdout, relay.read.get(), kReadMax) > 0) {
  }
}

}  // namespace

Process::Process(const asio::any_io_executor& ex, CommandSpec spec, ProcessOptions options)
    : ex_(ex),
      spec_(std::move(spec)),
      options_(options),
      log_(spec_.log_limits, options.persistent_log),
      timeout_timer_(ex),
      idle_timer_(ex),
      grace_timer_(ex),
      exited_signal_(ex),
      drained_signal_(ex),
      room_out_(ex),
      room_err_(ex),
      rebound_signal_(ex) {}

Process::~Process() {
  for (auto* d : {&out_, &err_, &stdin_, &pidfd_, &exit_pipe_}) CloseShared(*d);
}

void Process::Spawn(asio::awaitable<void> task) {
  sandstream::Spawn(ex_, std::move(task), "process " + spec_.id + " task");
}

asio::awaitable<Result<std::shared_ptr<Process>>> Process::Start(
    std::shared_ptr<sandbox::Sandbox> sandbox, CommandSpec spec, ProcessOptions options,
    ExitCallback on_exit) {
  const auto ex = co_await asio::this_coro::executor;
  auto p = std::make_shared<Process>(ex, std::move(spec), options);
  Result<void> launched = co_await p->Launch(std::move(sandbox), std::move(on_exit));
  if (!launched) co_return std::move(launched).error();
  co_return p;
}

std::shared_ptr<Process> Process::Restore(const asio::any_io_executor& ex, CommandSpec spec,
                                          SystemTime started_at, int pid, ExitRecord exit,
                                          std::vector<StoredEntry> tail, uint64_t stdout_bytes,
                                          uint64_t stderr_bytes) {
  ProcessOptions options;
  options.persistent_log = false;  // finished: nothing is written any more
  auto p = std::make_shared<Process>(ex, std::move(spec), options);
  p->started_at_ = started_at;
  p->pid_ = pid;
  p->stdout_bytes_ = stdout_bytes;
  p->stderr_bytes_ = stderr_bytes;
  p->log_.Restore(std::move(tail));
  p->exit_ = exit;
  return p;
}

asio::awaitable<Result<void>> Process::Launch(std::shared_ptr<sandbox::Sandbox> sandbox,
                                              ExitCallback on_exit) {
  sandbox::ProcessSpec ps;
  ps.argv = spec_.argv;
  ps.env = spec_.env;
  ps.cwd = spec_.cwd;
  ps.merge_stderr = spec_.merge_stderr;
  ps.as_root = spec_.as_root;
  ps.open_stdin = spec_.stdin_data.has_value() || spec_.keep_stdin_open;
  ps.pty = spec_.pty;
  sandbox_ = sandbox;
  oom_at_start_ = sandbox->OomKills();
  // The clock starts before the spawn: by the time Spawn returns, the command is running.
  started_at_ = SystemNow();
  started_steady_ = SteadyNow();
  if (const int ring = log_.ring_fd(); ring >= 0) {
    ps.keep_fds.push_back(ring);
    if (spec_.pty) {
      // A terminal cannot be spliced into the log's memfd: its output passes through a pipe
      // kept with the memfd, so that what a crash leaves between the two is found again.
      auto relay = MakePipe(true);
      if (!relay) co_return std::move(relay).error();
      if (auto r = SetNonBlocking(relay->write.get(), true); !r) co_return std::move(r).error();
      ps.keep_fds.push_back(relay->read.get());
      ps.keep_fds.push_back(relay->write.get());
      relay_ = std::move(*relay);
    }
  }
  Result<sandbox::SpawnedProcess> spawned = co_await Await(sandbox->Spawn(std::move(ps)));
  if (!spawned) co_return std::move(spawned).error();

  on_exit_ = std::move(on_exit);
  Supervise(std::move(*spawned));
  log_.Append(EntryKind::kStart, {}, started_at_);
  StartLoops();
  if (spec_.stdin_data) Spawn(FeedStdin(*spec_.stdin_data));
  co_return Ok{};
}

Result<std::shared_ptr<Process>> Process::Adopt(const asio::any_io_executor& ex,
                                                const std::shared_ptr<sandbox::Sandbox>& sandbox,
                                                CommandSpec spec, SystemTime started_at,
                                                sandbox::AdoptedProcess adopted,
                                                ProcessOptions options, ExitCallback on_exit) {
  options.persistent_log = false;  // the adopted ring is the log
  auto p = std::make_shared<Process>(ex, std::move(spec), options);
  std::vector<UniqueFd>& kept = adopted.kept;
  if (!kept.empty()) {
    auto log = OutputLog::Adopt(p->spec_.log_limits, std::move(kept[0]));
    if (!log) return std::move(log).error();
    p->log_.TakeFrom(std::move(**log));
  }
  TakeRelay(kept, p->log_, p->relay_);
  // The ring counts bytes, not streams: stderr is what its retained entries hold, and bytes
  // evicted before the restart count as stdout.
  for (const auto& e : p->log_.entries()) {
    if (e.kind == EntryKind::kStderr) p->stderr_bytes_ += e.data.size();
  }
  p->stdout_bytes_ = p->log_.total_bytes() - std::min(p->log_.total_bytes(), p->stderr_bytes_);
  p->sandbox_ = sandbox;
  p->oom_at_start_ = sandbox->OomKills();
  p->started_at_ = started_at;
  // Its clocks count the time it ran under the daemon before, so timeouts resume, not restart.
  p->started_steady_ = SteadyNow() - std::chrono::duration_cast<SteadyClock::duration>(std::max(
                                         SystemNow() - started_at, SystemTime::duration::zero()));
  p->on_exit_ = std::move(on_exit);
  if (adopted.status) p->exit_status_ = *adopted.status;
  p->Supervise(std::move(adopted.process));
  p->StartLoops();
  return p;
}

void Process::Supervise(sandbox::SpawnedProcess spawned) {
  pid_ = spawned.pid;
  last_output_ = SteadyNow();
  using Desc = asio::posix::stream_descriptor;
  out_ = std::make_unique<Desc>(ex_, spawned.stdout_fd.release());
  if (spawned.stderr_fd) err_ = std::make_unique<Desc>(ex_, spawned.stderr_fd.release());
  if (spawned.stdin_fd) stdin_ = std::make_unique<Desc>(ex_, spawned.stdin_fd.release());
  if (spec_.pty) {
    // The master is both ends: input is written through a second descriptor of it, so a
    // write and the reader never share one Asio object.
    const int input = ::fcntl(out_->native_handle(), F_DUPFD_CLOEXEC, 3);
    if (input >= 0) stdin_ = std::make_unique<Desc>(ex_, input);
  }
  pidfd_ = std::make_unique<Desc>(ex_, spawned.pidfd.release());
  if (spawned.exit_fd) exit_pipe_ = std::make_unique<Desc>(ex_, spawned.exit_fd.release());
  // The readers read(2) themselves once the reactor says a pipe is readable.
  boost::system::error_code ignored;
  out_->non_blocking(true, ignored);
  if (err_) err_->non_blocking(true, ignored);
  if (exit_pipe_) exit_pipe_->non_blocking(true, ignored);
  log_.set_on_space([this] {
    room_out_.Notify();
    room_err_.Notify();
  });
}

void Process::StartIoLoops() {
  Spawn(ReadLoop(*out_, EntryKind::kStdout));
  if (err_) Spawn(ReadLoop(*err_, EntryKind::kStderr));
  Spawn(WaitLoop());
}

void Process::StartLoops() {
  StartIoLoops();
  // A command that ended before its spawn was answered (a short one, on a busy machine) has
  // its exit record by now: the readers saw end of file, the exit status was waiting, and
  // WaitLoop finished it without suspending. Its clocks would only keep it alive.
  if (exit_) return;
  if (spec_.timeout_seconds) Spawn(TimeoutLoop());
  if (spec_.idle_timeout_seconds) Spawn(IdleLoop());
}

ssize_t Process::ReadInto(int fd, EntryKind kind, size_t want) {
  const ssize_t n = relay_.read ? Relay(fd, want) : log_.Take(kind, fd, want, !spec_.pty);
  if (n <= 0) return n;
  last_output_ = SteadyNow();
  (kind == EntryKind::kStdout ? stdout_bytes_ : stderr_bytes_) += static_cast<uint64_t>(n);
  return n;
}

ssize_t Process::Relay(int terminal, size_t want) {
  const ssize_t n =
      ::splice(terminal, nullptr, relay_.write.get(), nullptr, want, SPLICE_F_NONBLOCK);
  for (ssize_t left = n; left > 0;) {
    const ssize_t moved =
        log_.Take(EntryKind::kStdout, relay_.read.get(), static_cast<size_t>(left));
    if (moved <= 0) return moved;
    left -= moved;
  }
  return n;
}

asio::awaitable<void> Process::WaitForRoom(AsyncSignal& room) {
  ++held_readers_;
  while (log_.Full() && !leader_exited_) {
    const bool notified = co_await room.Wait(options_.reader_stall);
    if (!notified) DropStalledReaders();
  }
  --held_readers_;
  last_output_ = SteadyNow();  // held back is not idle: the idle clock starts again now
}

void Process::DropStalledReaders() {
  // No reader took anything for the whole stall limit: the ones holding the oldest output
  // become skipping readers (they see a gap) and the process runs on.
  if (!log_.Full() || leader_exited_) return;
  stalled_readers_ += log_.DropBlockingHolds();
  log::Info("stalled reader dropped to skipping", {{"process", spec_.id}});
}

asio::awaitable<void> Process::ReadLoop(asio::posix::stream_descriptor& pipe, EntryKind kind) {
  auto self = shared_from_this();
  const bool is_out = kind == EntryKind::kStdout;
  bool& drained = is_out ? out_drained_ : err_drained_;
  std::optional<size_t>& budget = is_out ? out_budget_ : err_budget_;
  AsyncSignal& room = is_out ? room_out_ : room_err_;
  const int fd = pipe.native_handle();
  const uint64_t generation = generation_;
  bool readable = true;  // the pipe may hold output already: read before waiting
  for (;;) {
    if (log_.Full() && !leader_exited_) co_await WaitForRoom(room);
    if (generation != generation_) co_return;  // detached: the pipe is not this loop's now
    if (drained) {
      // After the exit record, output of processes the command left running is read and
      // dropped (closing the pipe would kill them with SIGPIPE, leaving it full would hang them).
      static thread_local char sink[64 * 1024];
      if (!readable) {
        auto [ec] = co_await pipe.async_wait(asio::posix::stream_descriptor::wait_read, Tuple());
        if (generation != generation_) co_return;
        if (ec) break;
      }
      const ssize_t n = ::read(fd, sink, sizeof sink);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
      readable = n > 0;
      co_await asio::post(ex_, use_awaitable);
      if (generation != generation_) co_return;
      continue;
    }
    if (!readable) {
      if (leader_exited_) {
        // The reader saw EAGAIN after the leader exited: everything it wrote has been taken.
        log_.FlushCarry(kind);
        drained = true;
        drained_signal_.Notify();
        continue;
      }
      // Cancelled when the leader exits: then the reader takes what the pipe holds.
      co_await pipe.async_wait(asio::posix::stream_descriptor::wait_read, Tuple());
      if (generation != generation_) co_return;
      readable = true;
      continue;
    }
    size_t want = kReadMax;
    if (budget) {
      if (*budget == 0) {
        readable = false;
        continue;
      }
      want = std::min(want, *budget);
    }
    const ssize_t n = ReadInto(fd, kind, want);
    if (n > 0) {
      if (budget) *budget -= static_cast<size_t>(n);
      // One read per turn: whatever the process writes, the rest of the daemon gets its turn.
      co_await asio::post(ex_, use_awaitable);
      if (generation != generation_) co_return;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      readable = errno == EINTR;
      continue;
    }
    break;  // end of file, or EIO from a terminal whose last writer is gone
  }
  if (!drained) {
    log_.FlushCarry(kind);
    drained = true;
    drained_signal_.Notify();
  }
  // Of no more use: closed now, not when the process record goes (finished ones are retained).
  // Until the exit, WaitLoop finds it empty (closed) and has nothing to cancel.
  CloseShared(pipe);
}

asio::awaitable<void> Process::WaitLoop() {
  auto self = shared_from_this();
  const uint64_t generation = generation_;
  int code = 0;
  int status = 0;
  if (exit_pipe_) {
    const std::optional<int> wait_status = co_await ReadExitStatus();
    if (generation != generation_) co_return;
    if (wait_status && WIFEXITED(*wait_status)) {
      code = CLD_EXITED;
      status = WEXITSTATUS(*wait_status);
    } else if (wait_status && WIFSIGNALED(*wait_status)) {
      code = WCOREDUMP(*wait_status) ? CLD_DUMPED : CLD_KILLED;
      status = WTERMSIG(*wait_status);
    } else {
      // The keeper that was its parent is gone, and its children died with it.
      log::Warn("exit status lost with the keeper", {{"process", spec_.id}});
      if (!kill_reason_) kill_reason_ = ExitReason::kKilled;
      code = CLD_KILLED;
      status = SIGKILL;
    }
  } else {
    siginfo_t info{};
    for (;;) {
      auto [ec] = co_await pidfd_->async_wait(asio::posix::stream_descriptor::wait_read, Tuple());
      if (generation != generation_) co_return;
      info = siginfo_t{};
      int rc = ::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd_->native_handle()),
                        &info, WEXITED | WNOHANG);
      if (rc == 0 && info.si_pid != 0) break;
      if (rc != 0 && errno != EINTR && errno != EAGAIN) {
        log::Error("waitid failed", {{"process", spec_.id}, {"errno", ErrnoName(errno)}});
        info.si_code = CLD_KILLED;
        info.si_status = SIGKILL;
        break;
      }
      if (ec && ec != asio::error::operation_aborted) {
        log::Error("pidfd wait failed", {{"process", spec_.id}, {"error", ec.message()}});
      }
    }
    code = info.si_code;
    status = info.si_status;
  }
  leader_exited_ = true;
  // What the leader wrote is in its pipes now: each reader takes that much (no more, so a
  // writer it left running cannot delay the exit record), even past the window, and reports.
  const size_t slack = spec_.pty ? kTerminalDrainSlack : 0;
  out_budget_ = Pending(out_->native_handle()) + slack;
  if (err_) err_budget_ = Pending(err_->native_handle());
  boost::system::error_code ignored;
  if (!out_drained_) out_->cancel(ignored);
  if (err_ && !err_drained_) err_->cancel(ignored);
  room_out_.Notify();
  room_err_.Notify();
  while (!out_drained_ || (err_ && !err_drained_)) {
    co_await drained_signal_.Wait();
    if (generation != generation_) co_return;
  }
  Finish(code, status);
}

asio::awaitable<std::optional<int>> Process::ReadExitStatus() {
  if (exit_status_) co_return exit_status_;
  int status = 0;
  size_t got = 0;
  for (;;) {
    const ssize_t n = ::read(exit_pipe_->native_handle(), reinterpret_cast<char*>(&status) + got,
                             sizeof status - got);
    if (n > 0) {
      got += static_cast<size_t>(n);
      if (got == sizeof status) co_return status;
      continue;
    }
    if (n == 0) co_return std::nullopt;
    if (errno == EINTR) continue;
    if (errno != EAGAIN) co_return std::nullopt;
    const uint64_t generation = generation_;
    auto [ec] = co_await exit_pipe_->async_wait(asio::posix::stream_descriptor::wait_read, Tuple());
    if (generation != generation_) co_return std::nullopt;
    (void)ec;
  }
}

void Process::Finish(int code, int status) {
  ExitRecord rec;
  rec.ended_at = SystemNow();
  rec.duration_ms = std::chrono::duration_cast<milliseconds>(SteadyNow() - started_steady_).count();
  const bool by_signal = code == CLD_KILLED || code == CLD_DUMPED;
  if (by_signal) {
    rec.signal = status;
    rec.exit_code = 128 + status;
  } else {
    rec.exit_code = status;
  }
  const bool sigkilled = (by_signal && status == SIGKILL) || (!by_signal && status == 137);
  if (kill_reason_) {
    rec.reason = *kill_reason_;
  } else if (auto sb = sandbox_.lock(); sigkilled && sb && sb->Ended()) {
    rec.reason = ExitReason::kKilled;  // its sandbox ended under it, the kernel killed it
  } else if (sigkilled && sb && sb->OomKills() > oom_at_start_) {
    rec.reason = ExitReason::kOom;
  } else {
    rec.reason = by_signal ? ExitReason::kSignaled : ExitReason::kExited;
  }
  exit_ = rec;
  timeout_timer_.cancel();
  idle_timer_.cancel();
  CloseShared(stdin_);
  log_.Append(EntryKind::kExit, {}, rec.ended_at);
  // An exited process keeps no descriptor: its exit is known, its log moves out of its memfd
  // into memory of its size, and its output pipes close as their readers reach end of file (by
  // now, unless a process the command left running still writes). Thousands of finished
  // processes are retained; their descriptors are not.
  log_.Detach();
  CloseShared(pidfd_);
  CloseShared(exit_pipe_);
  relay_ = Pipe{};
  exited_signal_.Notify();
  if (on_exit_) on_exit_(*this);
}

asio::awaitable<void> Process::TimeoutLoop() {
  auto self = shared_from_this();
  // Finish() cancels the timer only if it is armed: armed after the exit, it would hold the
  // process (and its descriptors) for the whole timeout, past its sandbox's deletion.
  if (exit_) co_return;
  const SteadyTime deadline = SteadyNow() + Seconds(*spec_.timeout_seconds);
  // Pause and Resume cancel the wait: it is armed again, later by the time paused.
  while (!exit_) {
    timeout_timer_.expires_at(paused_since_ ? SteadyTime::max() : deadline + paused_for_);
    (void)co_await timeout_timer_.async_wait(Tuple());
    if (exit_) co_return;
    if (!paused_since_ && SteadyNow() >= deadline + paused_for_) {
      Kill(ExitReason::kTimeout);
      co_return;
    }
  }
}

asio::awaitable<void> Process::IdleLoop() {
  auto self = shared_from_this();
  const auto idle = Seconds(*spec_.idle_timeout_seconds);
  // Re-arms from the last output instead of resetting a timer per chunk. While a waiting
  // reader holds the process back it is not idle: the clock starts when reading resumes. While
  // its sandbox is paused it waits for Resume, which moves the last output on by the pause.
  while (!exit_) {
    idle_timer_.expires_at(paused_since_ ? SteadyTime::max()
                                         : (held() ? SteadyNow() : last_output_) + idle);
    (void)co_await idle_timer_.async_wait(Tuple());
    if (exit_) co_return;
    if (!paused_since_ && !held() && SteadyNow() - last_output_ >= idle) {
      Kill(ExitReason::kIdleTimeout);
      co_return;
    }
  }
}

void Process::Detach() {
  if (exit_) return;
  ++generation_;
  detached_ = true;
  boost::system::error_code ignored;
  for (auto* d : {out_.get(), err_.get(), pidfd_.get(), exit_pipe_.get()}) {
    if (d) d->cancel(ignored);
  }
  room_out_.Notify();
  room_err_.Notify();
  drained_signal_.Notify();
}

void Process::Rebind(std::optional<sandbox::AdoptedProcess> restored) {
  if (exit_) return;
  if (restored) {
    // The descriptors of the tree that was written to disk go; what was read of them is in the
    // log, what they held is in the new pipes.
    out_.reset();
    err_.reset();
    stdin_.reset();
    pidfd_.reset();
    exit_pipe_.reset();
    std::vector<UniqueFd>& kept = restored->kept;
    // The log's restored memfd is dropped (the daemon's own log went on); a terminal's relay
    // comes back as new pipes.
    TakeRelay(kept, log_, relay_);
    if (restored->status) exit_status_ = *restored->status;
    Supervise(std::move(restored->process));
  }
  detached_ = false;
  rebound_signal_.Notify();
  StartIoLoops();
}

void Process::EndUnrestored() {
  if (exit_) return;
  ++generation_;
  if (!kill_reason_) kill_reason_ = ExitReason::kKilled;
  log_.FlushCarry(EntryKind::kStdout);
  log_.FlushCarry(EntryKind::kStderr);
  out_drained_ = err_drained_ = leader_exited_ = true;
  detached_ = false;
  Finish(CLD_KILLED, SIGKILL);
  rebound_signal_.Notify();
}

void Process::Pause() {
  if (paused_since_ || exit_) return;
  paused_since_ = SteadyNow();
  timeout_timer_.cancel();
  idle_timer_.cancel();
}

void Process::Resume() {
  if (!paused_since_) return;
  const SteadyClock::duration paused = SteadyNow() - *paused_since_;
  paused_since_.reset();
  paused_for_ += paused;
  last_output_ += paused;
  timeout_timer_.cancel();
  idle_timer_.cancel();
}

asio::awaitable<void> Process::FeedStdin(std::string data) {
  auto self = shared_from_this();
  size_t done = 0;
  for (;;) {
    stdin_busy_ = true;
    auto [ec, n] = co_await asio::async_write(
        *stdin_, asio::buffer(data.data() + done, data.size() - done), Tuple());
    stdin_busy_ = false;
    done += n;
    if (detached_) {
      // Checkpointed meanwhile: what was written is in the pipe the restore brings back; the
      // rest, and the end of input, go to the restored process's stdin.
      co_await AwaitRebound();
      if (exit_ || !stdin_open()) co_return;
      if (done < data.size()) continue;
    } else if (ec && ec != asio::error::broken_pipe) {
      log::Debug("stdin write failed", {{"process", spec_.id}, {"error", ec.message()}});
    }
    break;
  }
  (void)CloseStdin();
}

asio::awaitable<void> Process::AwaitRebound() {
  while (detached_ && !exit_) co_await rebound_signal_.Wait();
}

asio::awaitable<Result<size_t>> Process::WriteStdin(std::string data) {
  auto self = shared_from_this();
  if (exit_) co_return Error{ErrorCode::kConflict, "process " + spec_.id + " has exited"};
  if (!stdin_open()) co_return Error{ErrorCode::kConflict, "stdin of " + spec_.id + " is closed"};
  if (stdin_busy_) co_return Error{ErrorCode::kConflict, "another stdin write is in progress"};
  // While its sandbox is being checkpointed, the write waits for the restored stdin.
  co_await AwaitRebound();
  if (exit_ || !stdin_open()) {
    co_return Error{ErrorCode::kConflict, "process " + spec_.id + " did not come back"};
  }
  stdin_busy_ = true;
  auto [ec, n] = co_await asio::async_write(*stdin_, asio::buffer(data), Tuple());
  stdin_busy_ = false;
  if (ec) {
    co_return Error{ErrorCode::kConflict, "stdin of " + spec_.id + ": " + ec.message()};
  }
  co_return n;
}

Result<void> Process::CloseStdin() {
  if (!stdin_open()) return Error{ErrorCode::kConflict, "stdin of " + spec_.id + " is closed"};
  CloseShared(stdin_);
  // The copy its sandbox keeps for a later daemon goes too, or the process never reads EOF.
  if (auto sb = sandbox_.lock()) sb->CloseStdin(pid_);
  return Ok{};
}

Result<void> Process::Resize(sandbox::PtySize size) {
  if (!spec_.pty) return Error{ErrorCode::kConflict, "process " + spec_.id + " has no terminal"};
  if (exit_) return Error{ErrorCode::kConflict, "process " + spec_.id + " has exited"};
  return ResizePty(out_->native_handle(), size.rows, size.cols);
}

Result<void> Process::Signal(int sig, bool group) {
  if (exit_) return Error{ErrorCode::kConflict, "process " + spec_.id + " has exited"};
  if (group) {
    SignalGroup(sig);
    return Ok{};
  }
  // The leader alone: its pidfd names it and nothing else, reaped or not.
  if (const int err = SignalPidfd(pidfd_->native_handle(), sig); err != 0 && err != ESRCH) {
    return SysError(ErrorCode::kInternal, "pidfd_send_signal", err);
  }
  return Ok{};
}

void Process::SignalGroup(int sig) {
  if (pid_ <= 0) return;
  if (!leader_exited_) {
    // While the leader lives its pidfd gives the group's number as this daemon sees it (the
    // pid the sandbox gives it is another, in the sandbox's pid namespace).
    const pid_t leader = pidfd_ ? PidOfPidfd(pidfd_->native_handle()) : -1;
    if (leader > 0) {
      ::kill(-leader, sig);
      return;
    }
  }
  if (auto sb = sandbox_.lock()) sb->SignalGroup(pid_, sig);
}

void Process::Kill(ExitReason reason) {
  if (exit_ || pid_ <= 0) return;
  if (!kill_reason_) kill_reason_ = reason;
  SignalGroup(SIGTERM);
  SignalGroup(SIGCONT);  // a stopped group cannot act on TERM
  grace_timer_.expires_after(options_.kill_grace);
  // KILL after the grace period even if the leader is gone: its group may linger. Through
  // SignalGroup: by then the leader may have been reaped and its number reused.
  grace_timer_.async_wait([self = weak_from_this()](const boost::system::error_code& ec) {
    if (auto p = self.lock(); p && !ec) p->SignalGroup(SIGKILL);
  });
}

void Process::KillNow(ExitReason reason) {
  if (exit_ || pid_ <= 0) return;
  if (!kill_reason_) kill_reason_ = reason;
  SignalGroup(SIGKILL);
}

void Process::SandboxLost() {
  if (!exit_ && !kill_reason_) kill_reason_ = ExitReason::kKilled;
}

void Process::Park(uint64_t keep_after, uint64_t taken_after, SteadyClock::duration grace) {
  const OutputLog::HoldId hold = log_.AddHold(keep_after, taken_after, true);
  auto timer = std::make_shared<Timer>(ex_, grace);
  timer->async_wait([self = shared_from_this(), hold, timer](const boost::system::error_code&) {
    self->log_.ReleaseHold(hold);
  });
}

asio::awaitable<void> Process::WaitExit() {
  auto self = shared_from_this();
  while (!exit_) {
    co_await exited_signal_.Wait();
    // Raced against a timer (`||`): a cancelled wait must end, not wait again.
    auto state = co_await asio::this_coro::cancellation_state;
    if (state.cancelled() != asio::cancellation_type::none) co_return;
  }
}

}  // namespace sandstream
