// One supervised process: its pipes are read as fast as the process writes and its readers
// take the output (a waiting reader holds it back, as a pipe would), every chunk goes into its
// OutputLog, timeouts kill its whole process group, and its end becomes one ExitRecord. Runs on
// the daemon's single io_context thread. Knows nothing of HTTP.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "base/async.h"
#include "base/clock.h"
#include "base/result.h"
#include "base/timer.h"
#include "platform/fd.h"
#include "process/exit.h"
#include "process/output_log.h"
#include "sandbox/runtime.h"

namespace sandstream {

// A validated request to run something; the API layer builds it, the service fills ids.
struct CommandSpec {
  std::string id;
  std::string sandbox_id;
  std::string cmd;                // as the client wrote it; empty when given as argv
  std::vector<std::string> argv;  // what actually runs (`sh -c cmd` for a cmd)
  std::vector<std::string> env;   // complete environment
  std::string cwd;
  std::optional<std::string> stdin_data;  // written then closed
  bool keep_stdin_open = false;           // background processes without stdin_data
  std::optional<double> timeout_seconds;
  std::optional<double> idle_timeout_seconds;
  bool merge_stderr = false;
  bool as_root = false;     // root of the sandbox instead of its `user`
  bool keep_awake = false;  // while it runs its sandbox is not idle (auto_pause waits for it)
  std::optional<sandbox::PtySize> pty;  // on a terminal: one stream in (stdin), one out (stdout)
  LogLimits log_limits;
  std::string idempotency_key;
};

struct ProcessOptions {
  std::chrono::milliseconds kill_grace{2000};  // TERM, then KILL after this
  // A waiting reader that takes nothing for this long while it holds the process back is
  // dropped to skipping (it sees a gap): a client that stops reading cannot hold it forever.
  std::chrono::milliseconds reader_stall{300000};
  // The output log lives in a memfd its sandbox's keeper holds, so it outlives the daemon.
  bool persistent_log = true;
};

enum class ProcessStatus { kRunning, kExited };

class Process : public std::enable_shared_from_this<Process> {
 public:
  using ExitCallback = std::function<void(Process&)>;

  // Spawns the command in `sandbox` and starts supervising it. The spawn is awaited on the
  // event loop; `sandbox` must outlive it (and the process, for its OOM count).
  static boost::asio::awaitable<Result<std::shared_ptr<Process>>> Start(
      std::shared_ptr<sandbox::Sandbox> sandbox, CommandSpec spec, ProcessOptions options,
      ExitCallback on_exit);
  // A process an earlier daemon started that its sandbox kept running (or that ended since,
  // with `adopted.status`): supervised again, its output log and clocks picking up where they
  // were.
  static Result<std::shared_ptr<Process>> Adopt(const boost::asio::any_io_executor& ex,
                                                const std::shared_ptr<sandbox::Sandbox>& sandbox,
                                                CommandSpec spec, SystemTime started_at,
                                                sandbox::AdoptedProcess adopted,
                                                ProcessOptions options, ExitCallback on_exit);
  // A finished process brought back from the store: its exit record and retained tail.
  static std::shared_ptr<Process> Restore(const boost::asio::any_io_executor& ex, CommandSpec spec,
                                          SystemTime started_at, int pid, ExitRecord exit,
                                          std::vector<StoredEntry> tail, uint64_t stdout_bytes,
                                          uint64_t stderr_bytes);

  Process(const boost::asio::any_io_executor& ex, CommandSpec spec, ProcessOptions options);
  ~Process();

  const CommandSpec& spec() const { return spec_; }
  const std::string& id() const { return spec_.id; }
  int pid() const { return pid_; }
  SystemTime started_at() const { return started_at_; }
  ProcessStatus status() const { return exit_ ? ProcessStatus::kExited : ProcessStatus::kRunning; }
  const std::optional<ExitRecord>& exit() const { return exit_; }
  uint64_t stdout_bytes() const { return stdout_bytes_; }
  uint64_t stderr_bytes() const { return stderr_bytes_; }
  OutputLog& log() { return log_; }
  const OutputLog& log() const { return log_; }
  bool stdin_open() const { return stdin_ && stdin_->is_open(); }

  // Writes to stdin; fails with kConflict when stdin is closed or the process ended.
  boost::asio::awaitable<Result<size_t>> WriteStdin(std::string data);
  Result<void> CloseStdin();
  // Sets the terminal's size (the foreground group gets SIGWINCH); kConflict without a pty.
  Result<void> Resize(sandbox::PtySize size);
  // Sends `sig` to the process group (or only the leader).
  Result<void> Signal(int sig, bool group);
  // The process's sandbox ended under it: its exit reports `killed`.
  void SandboxLost();
  // TERM to the group, KILL after the grace period; `reason` is what the exit will report.
  void Kill(ExitReason reason);
  // SIGKILL now, for a sandbox being torn down.
  void KillNow(ExitReason reason);
  // Resolves once the exit record exists.
  boost::asio::awaitable<void> WaitExit();
  // Keeps the output after `keep_after` for `grace`, holding the process back as its reader
  // did (it had taken up to `taken_after`): the place of a waiting reader whose client went
  // away, for the client to resume from. The next waiting reader takes over from it.
  void Park(uint64_t keep_after, uint64_t taken_after, SteadyClock::duration grace);
  // Its sandbox is paused: the timeout and idle timeout stop counting until Resume, which moves
  // them on by the time paused (paused time is not the process's time).
  void Pause();
  void Resume();
  // Its sandbox is being checkpointed: the daemon stops reading its pipes and waiting for its
  // exit (what the pipes hold goes into the checkpoint), keeping its fds, its log and readers.
  void Detach();
  // After the checkpoint: supervised again on the restored process's new fds (its output log
  // stays the daemon's; the keeper is given it again by the caller), or on its own fds when
  // the checkpoint failed and the process runs on (nullopt).
  void Rebind(std::optional<sandbox::AdoptedProcess> restored);
  // After the checkpoint: the restore did not bring it back; it ends as killed.
  void EndUnrestored();
  // Whether the daemon is holding the process back now (a waiting reader is behind).
  bool held() const { return held_readers_ > 0; }
  // How often a stalled reader was dropped to skipping.
  uint64_t stalled_readers() const { return stalled_readers_; }

 private:
  boost::asio::awaitable<Result<void>> Launch(std::shared_ptr<sandbox::Sandbox> sandbox,
                                              ExitCallback on_exit);
  // `sig` to the process group: by its number while the leader is unreaped (the number is
  // then still the group's), through the sandbox after (never a number that may be reused).
  void SignalGroup(int sig);
  // Takes the process's fds and gets ready to read them; StartLoops() then starts reading.
  void Supervise(sandbox::SpawnedProcess spawned);
  void StartLoops();
  // The readers and the exit's wait (StartLoops without the clocks).
  void StartIoLoops();
  // The wait status from the exit pipe; nullopt when it closed without one.
  boost::asio::awaitable<std::optional<int>> ReadExitStatus();
  boost::asio::awaitable<void> ReadLoop(boost::asio::posix::stream_descriptor& pipe,
                                        EntryKind kind);
  // One read straight into the log. Returns what read() returned (-1 with errno set).
  ssize_t ReadInto(int fd, EntryKind kind, size_t want);
  // One read of the terminal, into the relay and on into the log.
  ssize_t Relay(int terminal, size_t want);
  // Until a waiting reader makes room in the log (or the leader exits).
  boost::asio::awaitable<void> WaitForRoom(AsyncSignal& room);
  void DropStalledReaders();
  boost::asio::awaitable<void> WaitLoop();
  boost::asio::awaitable<void> TimeoutLoop();
  boost::asio::awaitable<void> IdleLoop();
  boost::asio::awaitable<void> FeedStdin(std::string data);
  // Until Rebind or EndUnrestored, while detached.
  boost::asio::awaitable<void> AwaitRebound();
  void Finish(int code, int status);
  void Spawn(boost::asio::awaitable<void> task);

  boost::asio::any_io_executor ex_;
  CommandSpec spec_;
  ProcessOptions options_;
  OutputLog log_;
  int pid_ = -1;
  SystemTime started_at_;
  SteadyTime started_steady_;
  SteadyTime last_output_;
  std::optional<SteadyTime> paused_since_;  // while its sandbox is paused
  SteadyClock::duration paused_for_{};      // what earlier pauses took
  std::optional<ExitRecord> exit_;
  std::optional<ExitReason> kill_reason_;
  uint64_t stdout_bytes_ = 0;
  uint64_t stderr_bytes_ = 0;
  uint64_t oom_at_start_ = 0;
  std::weak_ptr<sandbox::Sandbox> sandbox_;
  ExitCallback on_exit_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> out_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> err_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> stdin_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> pidfd_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> exit_pipe_;  // from the keeper, if any
  // A terminal's output on its way to a persistent log (kept by the keeper too), if any.
  Pipe relay_;
  std::optional<int> exit_status_;  // known at adoption: it ended while no daemon ran
  Timer timeout_timer_;
  Timer idle_timer_;
  Timer grace_timer_;
  AsyncSignal exited_signal_;
  AsyncSignal drained_signal_;  // a reader drained its pipe after the leader exited
  AsyncSignal room_out_;        // the log has room again (one signal per reader)
  AsyncSignal room_err_;
  // Bytes each pipe held when the leader exited: what it wrote, taken before the exit record.
  std::optional<size_t> out_budget_;
  std::optional<size_t> err_budget_;
  int held_readers_ = 0;
  uint64_t stalled_readers_ = 0;
  bool leader_exited_ = false;
  bool out_drained_ = false;
  bool err_drained_ = false;
  bool stdin_busy_ = false;
  // Bumped by Detach: a read or wait loop of an earlier generation ends at its next turn.
  uint64_t generation_ = 0;
  // From Detach to Rebind (or EndUnrestored): stdin writes wait for the restored stdin.
  bool detached_ = false;
  AsyncSignal rebound_signal_;
};

}  // namespace sandstream
