#include "process/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>

#include "base/log.h"
#include "platform/pty.h"
#include "process/utf8.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace sandstream {
namespace asio = boost::asio;
using asio::use_awaitable;
using std::chrono::milliseconds;

namespace {

constexpr size_t kReadBuffer = 128 * 1024;

auto Tuple() { return asio::as_tuple(use_awaitable); }

std::chrono::steady_clock::duration Seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

}  // namespace

Process::Process(const asio::any_io_executor& ex, CommandSpec spec, ProcessOptions options)
    : ex_(ex),
      spec_(std::move(spec)),
      options_(options),
      log_(spec_.log_limits),
      timeout_timer_(ex),
      idle_timer_(ex),
      grace_timer_(ex),
      exited_signal_(ex),
      drained_signal_(ex) {}

Process::~Process() = default;

void Process::Spawn(asio::awaitable<void> task) {
  asio::co_spawn(ex_, std::move(task), [id = spec_.id](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      log::Error("process task failed", {{"process", id}, {"error", ex.what()}});
    }
  });
}

Result<std::shared_ptr<Process>> Process::Start(const asio::any_io_executor& ex,
                                                sandbox::Sandbox& sandbox, CommandSpec spec,
                                                ProcessOptions options, ExitCallback on_exit) {
  auto p = std::make_shared<Process>(ex, std::move(spec), options);
  auto oom = [&sandbox]() { return sandbox.OomKills(); };
  if (auto r = p->Launch(sandbox, std::move(on_exit), oom); !r) return std::move(r).error();
  return p;
}

std::shared_ptr<Process> Process::Restore(const asio::any_io_executor& ex, CommandSpec spec,
                                          SystemTime started_at, int pid, ExitRecord exit,
                                          std::vector<LogEntry> tail, uint64_t stdout_bytes,
                                          uint64_t stderr_bytes) {
  auto p = std::make_shared<Process>(ex, std::move(spec), ProcessOptions{});
  p->started_at_ = started_at;
  p->pid_ = pid;
  p->stdout_bytes_ = stdout_bytes;
  p->stderr_bytes_ = stderr_bytes;
  p->log_.Restore(std::move(tail));
  p->exit_ = exit;
  return p;
}

Result<void> Process::Launch(sandbox::Sandbox& sandbox, ExitCallback on_exit,
                             std::function<uint64_t()> oom_counter) {
  sandbox::ProcessSpec ps;
  ps.argv = spec_.argv;
  ps.env = spec_.env;
  ps.cwd = spec_.cwd;
  ps.merge_stderr = spec_.merge_stderr;
  ps.as_root = spec_.as_root;
  ps.open_stdin = spec_.stdin_data.has_value() || spec_.keep_stdin_open;
  ps.pty = spec_.pty;
  oom_counter_ = std::move(oom_counter);
  oom_at_start_ = oom_counter_();
  // The clock starts before the spawn: by the time Spawn returns, the command is running.
  started_at_ = SystemNow();
  started_steady_ = SteadyNow();
  auto spawned = sandbox.Spawn(ps);
  if (!spawned) return std::move(spawned).error();

  pid_ = spawned->pid;
  last_output_ = SteadyNow();
  on_exit_ = std::move(on_exit);
  using Desc = asio::posix::stream_descriptor;
  out_ = std::make_unique<Desc>(ex_, spawned->stdout_fd.release());
  if (spawned->stderr_fd) err_ = std::make_unique<Desc>(ex_, spawned->stderr_fd.release());
  if (spawned->stdin_fd) stdin_ = std::make_unique<Desc>(ex_, spawned->stdin_fd.release());
  if (spec_.pty) {
    // The master is both ends: input is written through a second descriptor of it, so a
    // write and the reader never share one Asio object.
    const int input = ::fcntl(out_->native_handle(), F_DUPFD_CLOEXEC, 3);
    if (input >= 0) stdin_ = std::make_unique<Desc>(ex_, input);
  }
  pidfd_ = std::make_unique<Desc>(ex_, spawned->pidfd.release());
  log_.Append(EntryKind::kStart, {}, started_at_);

  auto self = shared_from_this();
  Spawn(ReadLoop(*out_, EntryKind::kStdout));
  if (err_) Spawn(ReadLoop(*err_, EntryKind::kStderr));
  Spawn(WaitLoop());
  if (spec_.timeout_seconds) Spawn(TimeoutLoop());
  if (spec_.idle_timeout_seconds) Spawn(IdleLoop());
  if (spec_.stdin_data) Spawn(FeedStdin(*spec_.stdin_data));
  return Ok{};
}

void Process::OnOutput(EntryKind kind, std::string_view data) {
  last_output_ = SteadyNow();
  std::string& carry = kind == EntryKind::kStdout ? carry_out_ : carry_err_;
  (kind == EntryKind::kStdout ? stdout_bytes_ : stderr_bytes_) += data.size();
  if (!carry.empty()) {
    carry.append(data);
    const size_t k = Utf8CompletePrefix(carry);
    if (k == 0) return;
    log_.Append(kind, std::string_view(carry).substr(0, k));
    carry.erase(0, k);
    return;
  }
  const size_t k = Utf8CompletePrefix(data);
  if (k > 0) log_.Append(kind, data.substr(0, k));
  carry.assign(data.substr(k));
}

void Process::FlushCarry(EntryKind kind) {
  std::string& carry = kind == EntryKind::kStdout ? carry_out_ : carry_err_;
  if (carry.empty()) return;
  log_.Append(kind, carry);
  carry.clear();
}

asio::awaitable<void> Process::ReadLoop(asio::posix::stream_descriptor& pipe, EntryKind kind) {
  auto self = shared_from_this();
  std::unique_ptr<char[]> buf(new char[kReadBuffer]);
  bool& drained = kind == EntryKind::kStdout ? out_drained_ : err_drained_;
  for (;;) {
    auto [ec, n] = co_await pipe.async_read_some(asio::buffer(buf.get(), kReadBuffer), Tuple());
    // After the exit record, output of processes the command left running is discarded:
    // the log has ended, and closing the pipe would kill them with SIGPIPE.
    if (n > 0 && !exit_) OnOutput(kind, std::string_view(buf.get(), n));
    const bool eof = ec && ec != asio::error::operation_aborted;
    if (leader_exited_ && !drained) {
      // The leader is gone: what it wrote is in the pipe already. Take it, in order, after
      // the read that may just have completed, then let WaitLoop write the exit record.
      if (!eof) DrainNow(pipe, kind);
      FlushCarry(kind);
      drained = true;
      drained_signal_.Notify();
    }
    if (eof) break;
  }
  if (!drained) {
    FlushCarry(kind);
    drained = true;
    drained_signal_.Notify();
  }
}

void Process::DrainNow(asio::posix::stream_descriptor& pipe, EntryKind kind) {
  std::unique_ptr<char[]> buf(new char[kReadBuffer]);
  for (;;) {
    ssize_t n = ::read(pipe.native_handle(), buf.get(), kReadBuffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    OnOutput(kind, std::string_view(buf.get(), static_cast<size_t>(n)));
  }
}

asio::awaitable<void> Process::WaitLoop() {
  auto self = shared_from_this();
  siginfo_t info{};
  for (;;) {
    auto [ec] = co_await pidfd_->async_wait(asio::posix::stream_descriptor::wait_read, Tuple());
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
  leader_exited_ = true;
  // Wake the readers; each drains its pipe and reports. A read that already completed is
  // delivered first, so the output keeps its order.
  boost::system::error_code ignored;
  if (!out_drained_) out_->cancel(ignored);
  if (err_ && !err_drained_) err_->cancel(ignored);
  while (!out_drained_ || (err_ && !err_drained_)) co_await drained_signal_.Wait();
  Finish(info.si_code, info.si_status);
}

void Process::Finish(int code, int status) {
  ExitRecord rec;
  rec.ended_at = SystemNow();
  rec.duration_ms =
      std::chrono::duration_cast<milliseconds>(SteadyNow() - started_steady_).count();
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
  } else if (sigkilled && oom_counter_ && oom_counter_() > oom_at_start_) {
    rec.reason = ExitReason::kOom;
  } else {
    rec.reason = by_signal ? ExitReason::kSignaled : ExitReason::kExited;
  }
  exit_ = rec;
  timeout_timer_.cancel();
  idle_timer_.cancel();
  if (stdin_) {
    boost::system::error_code ignored;
    stdin_->close(ignored);
  }
  log_.Append(EntryKind::kExit, {}, rec.ended_at);
  exited_signal_.Notify();
  if (on_exit_) on_exit_(*this);
}

asio::awaitable<void> Process::TimeoutLoop() {
  auto self = shared_from_this();
  timeout_timer_.expires_after(Seconds(*spec_.timeout_seconds));
  auto [ec] = co_await timeout_timer_.async_wait(Tuple());
  if (!ec && !exit_) Kill(ExitReason::kTimeout);
}

asio::awaitable<void> Process::IdleLoop() {
  auto self = shared_from_this();
  const auto idle = Seconds(*spec_.idle_timeout_seconds);
  // Re-arms from the last output instead of resetting a timer per chunk.
  while (!exit_) {
    idle_timer_.expires_at(last_output_ + idle);
    auto [ec] = co_await idle_timer_.async_wait(Tuple());
    if (ec || exit_) co_return;
    if (SteadyNow() - last_output_ >= idle) {
      Kill(ExitReason::kIdleTimeout);
      co_return;
    }
  }
}

asio::awaitable<void> Process::FeedStdin(std::string data) {
  auto self = shared_from_this();
  stdin_busy_ = true;
  auto [ec, n] = co_await asio::async_write(*stdin_, asio::buffer(data), Tuple());
  stdin_busy_ = false;
  (void)n;
  if (ec && ec != asio::error::broken_pipe) {
    log::Debug("stdin write failed", {{"process", spec_.id}, {"error", ec.message()}});
  }
  (void)CloseStdin();
}

asio::awaitable<Result<size_t>> Process::WriteStdin(std::string data) {
  auto self = shared_from_this();
  if (exit_) co_return Error{ErrorCode::kConflict, "process " + spec_.id + " has exited"};
  if (!stdin_open()) co_return Error{ErrorCode::kConflict, "stdin of " + spec_.id + " is closed"};
  if (stdin_busy_) co_return Error{ErrorCode::kConflict, "another stdin write is in progress"};
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
  boost::system::error_code ec;
  stdin_->close(ec);
  return Ok{};
}

Result<void> Process::Resize(sandbox::PtySize size) {
  if (!spec_.pty) return Error{ErrorCode::kConflict, "process " + spec_.id + " has no terminal"};
  if (exit_) return Error{ErrorCode::kConflict, "process " + spec_.id + " has exited"};
  return ResizePty(out_->native_handle(), size.rows, size.cols);
}

Result<void> Process::Signal(int sig, bool group) {
  if (exit_) return Error{ErrorCode::kConflict, "process " + spec_.id + " has exited"};
  if (::kill(group ? -pid_ : pid_, sig) != 0 && errno != ESRCH) {
    return SysError(ErrorCode::kInternal, "kill", errno);
  }
  return Ok{};
}

void Process::Kill(ExitReason reason) {
  if (exit_ || pid_ <= 0) return;
  if (!kill_reason_) kill_reason_ = reason;
  ::kill(-pid_, SIGTERM);
  ::kill(-pid_, SIGCONT);  // a stopped group cannot act on TERM
  grace_timer_.expires_after(options_.kill_grace);
  // KILL after the grace period even if the leader is gone: its group may linger.
  grace_timer_.async_wait([pid = pid_](const boost::system::error_code& ec) {
    if (!ec) ::kill(-pid, SIGKILL);
  });
}

void Process::KillNow(ExitReason reason) {
  if (exit_ || pid_ <= 0) return;
  if (!kill_reason_) kill_reason_ = reason;
  ::kill(-pid_, SIGKILL);
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
