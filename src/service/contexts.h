// Code interpreter contexts: a persistent interpreter (python, javascript) running as a
// background process of the sandbox, or a shell session (bash), that runs cells one at a time.
// Each cell run is a log of events (start, stdout, stderr, result, then exit or error) that the
// API streams as SSE. A cell past its timeout is interrupted (SIGINT); an interpreter that does
// not stop is killed and started again, and a crashed one is reported and can be restarted.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "base/async.h"
#include "base/clock.h"
#include "base/result.h"
#include "process/event_log.h"
#include "process/output_log.h"
#include "process/process.h"
#include "service/sessions.h"

namespace sandstream {

class Service;
struct SandboxEntry;
struct ServiceOptions;

// TypeScript runs in the JavaScript driver, each cell's types stripped first by the
// TypeScript compiler the sandbox has (`typescript`, or Debian's node-typescript).
enum class Language { kPython, kJavascript, kTypescript, kBash };
std::string_view LanguageName(Language language);
std::optional<Language> ParseLanguage(std::string_view name);
// What ParseLanguage takes, for the error of a name it does not.
inline constexpr std::string_view kLanguageChoices =
    "language must be \"python\", \"javascript\", \"typescript\" or \"bash\"";

// One cell's events; the last one, which ends its log, is `exit` or `error`.
class CellRun {
 public:
  CellRun(const boost::asio::any_io_executor& ex, uint64_t number, std::string code,
          double timeout_seconds, std::string idempotency_key,
          std::map<std::string, std::string> env);

  uint64_t number() const { return number_; }
  const std::string& idempotency_key() const { return idempotency_key_; }
  const std::shared_ptr<EventLog>& log() const { return log_; }
  void Emit(std::string_view event, const boost::json::object& data);
  void End(std::string_view event, const boost::json::object& data);
  bool ended() const { return log_->ended(); }

 private:
  friend class CodeContext;
  uint64_t number_;
  std::string code_;
  double timeout_seconds_;
  std::string idempotency_key_;
  std::map<std::string, std::string> env_;  // for this cell only
  std::shared_ptr<EventLog> log_;
  AsyncSignal wake_;
  SteadyTime started_;
  boost::json::value error_;
  bool done_seen_ = false;  // the driver said the cell ended
  bool sync_seen_ = false;  // and its stderr is drained up to that point
  bool cancelled_ = false;  // Cancel(): interrupted if running, never started if queued
};

struct ContextRequest;

class CodeContext : public std::enable_shared_from_this<CodeContext>, private OutputLog::Listener {
 public:
  CodeContext(const boost::asio::any_io_executor& ex, std::string id, std::string sandbox_id,
              Language language, std::string cwd, std::map<std::string, std::string> env);
  ~CodeContext() override;

  // A new context of sandbox `sandbox_id`, its interpreter started, listed and stored.
  static boost::asio::awaitable<Result<std::shared_ptr<CodeContext>>> Create(Service& service,
                                                                             std::string sandbox_id,
                                                                             ContextRequest req);
  // Ends context `id` of sandbox `sandbox_id`: its interpreter is killed, queued cells fail.
  static Result<void> Delete(Service& service, std::string_view sandbox_id, std::string_view id);

  const std::string& id() const { return id_; }
  Language language() const { return language_; }
  // The directory its cells start in; empty: the sandbox's.
  const std::string& cwd() const { return cwd_; }
  // "idle", "busy" or "dead" (the interpreter exited; restart it).
  std::string_view status() const;
  boost::json::object Json() const;
  // The interpreter's process (null for a bash context, which runs cells in a session).
  const std::shared_ptr<Process>& driver() const { return driver_; }

  // Starts the interpreter (again); the namespace starts empty.
  boost::asio::awaitable<Result<void>> Start(Service& service);
  // Kills the interpreter, waits for it, starts a new one.
  boost::asio::awaitable<Result<void>> Restart(Service& service);
  // Queues a cell and returns its run at once; it executes when the cells before it are done.
  // A key that a remembered run was submitted with returns that run (the same code, timeout
  // and env) or kConflict (other ones): a client retrying after a cut never runs a cell twice.
  // `env` is set for this cell only (a bash cell with env runs in a subshell).
  Result<std::shared_ptr<CellRun>> Submit(Service& service, std::string code,
                                          double timeout_seconds, std::string idempotency_key,
                                          std::map<std::string, std::string> env = {});
  // Stops `run` for a caller that no longer waits for it: a queued cell never starts, a
  // running one is interrupted as at its timeout (SIGINT, then the interpreter restarted if
  // it does not stop; a bash cell's command is killed). Its log ends with an error.
  void Cancel(const std::shared_ptr<CellRun>& run);
  // A remembered run by its number (execution_count), or null: the context keeps the last
  // kRememberedRuns ended runs, fewer when their events pass kRememberedBytes, and every run
  // still queued or running (at most kRememberedRuns: more is kQuotaExceeded).
  std::shared_ptr<CellRun> FindRun(uint64_t number) const;
  static constexpr size_t kRememberedRuns = 32;
  static constexpr uint64_t kRememberedBytes = 64u << 20;
  // Deleted: the interpreter is killed; queued cells end with an error.
  void Close();

  // What a daemon started again needs to take the context back: Json() and the token its
  // driver's messages carry (so it is kept only in the store, beside the API key).
  boost::json::object Stored() const;
  // A context an earlier daemon ran (or a checkpoint held), bound again to its interpreter if
  // `sb` has that process running again (its record's process_id; else it reads "dead" until
  // restarted), its namespace intact; nullptr if the record is unreadable. A cell that was
  // running across the restart is not resumed.
  static std::shared_ptr<CodeContext> FromStored(const boost::asio::any_io_executor& ex,
                                                 const boost::json::object& o,
                                                 const SandboxEntry& sb);

 private:
  boost::asio::awaitable<void> Execute(Service& service, std::shared_ptr<CellRun> run);
  // Drops the oldest ended runs beyond kRememberedRuns / kRememberedBytes.
  void Forget();
  boost::asio::awaitable<void> ExecuteInterpreter(Service& service, std::shared_ptr<CellRun> cell);
  boost::asio::awaitable<void> ExecuteShell(Service& service, CellRun& run);
  void OnAppend() override;
  void OnOutput(EntryKind kind, std::string_view data);
  void OnMessage(EntryKind kind, std::string_view message);
  void Detach();

  boost::asio::any_io_executor ex_;
  std::string id_;
  std::string sandbox_id_;
  Language language_;
  std::string cwd_;
  std::map<std::string, std::string> env_;
  SystemTime created_at_;
  std::string token_;
  std::shared_ptr<Process> driver_;
  uint64_t after_seq_ = 0;
  std::string pending_out_;  // undecided bytes that may start a driver message
  std::string pending_err_;
  std::string stderr_tail_;  // the interpreter's last words, for a crash report
  std::shared_ptr<CellRun> current_;
  std::deque<std::shared_ptr<CellRun>> runs_;  // remembered, oldest first
  std::shared_ptr<Session> shell_;             // bash contexts
  std::weak_ptr<Process> shell_command_;       // the bash cell running now
  TurnQueue turns_;
  uint64_t executions_ = 0;
  uint64_t restarts_ = 0;
  bool closed_ = false;
};

struct ContextRequest {
  std::string id;  // empty: a new one ("ctx_..."); else the caller's, which must be free
  Language language = Language::kPython;
  std::string cwd;  // empty: the sandbox's
  std::map<std::string, std::string> env;
};

// The code-interpreter template promises a `python` command; when the root has none, a link
// to python3 goes to /opt/sandstream/bin, which the sandbox's PATH then starts with.
void PrepareTemplate(const ServiceOptions& options, SandboxEntry& sb);
// That PATH: /opt/sandstream/bin, then the daemon's base PATH. A snapshot of a
// code-interpreter sandbox, whose layer holds the link, keeps it in its template's env.
std::string CodeInterpreterPath(const ServiceOptions& options);

}  // namespace sandstream
