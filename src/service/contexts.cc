#include "service/contexts.h"

#include <signal.h>

#include <algorithm>

#include <boost/asio/co_spawn.hpp>
#include <boost/json.hpp>

#include "base/ids.h"
#include "base/log.h"
#include "base/utf8.h"
#include "platform/fd.h"
#include "platform/signals.h"
#include "sandbox/files.h"
#include "service/codec.h"
#include "service/context_drivers.h"
#include "service/service.h"

namespace sandstream {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

constexpr size_t kStderrTail = 4096;
// A driver message (a result bundle: an image, a table) is at most this long.
constexpr size_t kMaxMessageBytes = 64u << 20;
constexpr uint64_t kDriverLogBytes = 1u << 20;

std::string Sanitized(std::string_view bytes) {
  std::string out;
  AppendSanitizedUtf8(out, bytes);
  return out;
}

SteadyClock::duration Seconds(double s) {
  return std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(s));
}

int64_t MillisSince(SteadyTime t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(SteadyNow() - t).count();
}

}  // namespace

std::string_view LanguageName(Language language) {
  switch (language) {
    case Language::kPython:
      return "python";
    case Language::kJavascript:
      return "javascript";
    case Language::kTypescript:
      return "typescript";
    case Language::kBash:
      return "bash";
  }
  return "python";
}

std::optional<Language> ParseLanguage(std::string_view name) {
  if (name == "python" || name == "python3") return Language::kPython;
  if (name == "javascript" || name == "js" || name == "node") return Language::kJavascript;
  if (name == "typescript" || name == "ts") return Language::kTypescript;
  if (name == "bash" || name == "sh" || name == "shell") return Language::kBash;
  return std::nullopt;
}

CellRun::CellRun(const asio::any_io_executor& ex, uint64_t number, std::string code,
                 double timeout_seconds, std::string idempotency_key,
                 std::map<std::string, std::string> env)
    : number_(number),
      code_(std::move(code)),
      timeout_seconds_(timeout_seconds),
      idempotency_key_(std::move(idempotency_key)),
      env_(std::move(env)),
      log_(std::make_shared<EventLog>(LogLimits{64u << 20, 1u << 16})),
      wake_(ex),
      started_(SteadyNow()) {}

void CellRun::Emit(std::string_view event, const json::object& data) {
  log_->Append(std::string(event), json::serialize(data));
}

void CellRun::End(std::string_view event, const json::object& data) {
  log_->Append(std::string(event), json::serialize(data), {}, true);
}

CodeContext::CodeContext(const asio::any_io_executor& ex, std::string id, std::string sandbox_id,
                         Language language, std::string cwd, std::map<std::string, std::string> env)
    : ex_(ex),
      id_(std::move(id)),
      sandbox_id_(std::move(sandbox_id)),
      language_(language),
      cwd_(std::move(cwd)),
      env_(std::move(env)),
      created_at_(SystemNow()),
      turns_(ex) {}

CodeContext::~CodeContext() {
  Detach();
}

void CodeContext::Detach() {
  if (driver_) driver_->log().RemoveListener(this);
}

std::string_view CodeContext::status() const {
  if (language_ == Language::kBash) return turns_.busy() ? "busy" : "idle";
  if (!driver_ || driver_->status() != ProcessStatus::kRunning) return "dead";
  return turns_.busy() ? "busy" : "idle";
}

json::object CodeContext::Json() const {
  json::object o;
  o["id"] = id_;
  o["sandbox_id"] = sandbox_id_;
  o["language"] = LanguageName(language_);
  o["cwd"] = cwd_;
  o["status"] = status();
  o["created_at"] = FormatRfc3339(created_at_);
  o["execution_count"] = executions_;
  o["restarts"] = restarts_;
  o["process_id"] = driver_ ? json::value(driver_->id()) : json::value(nullptr);
  return o;
}

asio::awaitable<Result<void>> CodeContext::Start(Service& service) {
  auto self = shared_from_this();
  if (!service.Find(sandbox_id_)) {
    co_return Error{ErrorCode::kNotFound, "no sandbox '" + sandbox_id_ + "'"};
  }
  if (language_ == Language::kBash) {
    if (!shell_) {
      SessionRequest shell;
      shell.id = "ctx-" + id_;
      shell.env = env_;
      shell.cwd = cwd_;
      auto session = co_await Session::Create(service, sandbox_id_, std::move(shell));
      if (!session) co_return std::move(session).error();
      // Owned by the context, not listed among the sandbox's sessions (nor stored as one).
      if (!service.TakeSession(sandbox_id_, (*session)->id())) {
        co_return Error{ErrorCode::kNotFound, "no sandbox '" + sandbox_id_ + "'"};
      }
      shell_ = *session;
    }
    co_return Ok{};
  }
  Detach();
  token_ = NewId("");
  auto env = env_;
  CommandSpec spec;
  if (language_ == Language::kPython) {
    env["PYTHONUNBUFFERED"] = "1";
    if (!env.contains("MPLBACKEND")) env["MPLBACKEND"] = "Agg";
    spec.argv = {"python3", "-u", "-c", std::string(kPythonCharts) + std::string(kPythonDriver)};
  } else {
    // --expose-internals: the REPL's top-level-await rewrite (see the driver).
    spec.argv = {"node", "--expose-internals", "-e", std::string(kNodeDriver)};
    if (language_ == Language::kTypescript) spec.argv.emplace_back("typescript");
  }
  spec.env = service.ComposeEnv(*service.Find(sandbox_id_), env);  // checked above, no wait since
  spec.cwd = cwd_;
  spec.keep_stdin_open = true;
  spec.log_limits = LogLimits{kDriverLogBytes, 4096};
  Result<Service::Started> started = co_await service.StartProcess(sandbox_id_, std::move(spec));
  if (!started) co_return std::move(started).error();
  driver_ = started->process;
  after_seq_ = 0;
  pending_out_.clear();
  pending_err_.clear();
  stderr_tail_.clear();
  driver_->log().AddListener(this);
  OnAppend();
  // The driver's first line: the token its messages carry, where no other process can read
  // it (an environment variable would show in /proc/<pid>/environ).
  Result<size_t> told = co_await driver_->WriteStdin(token_ + "\n");
  if (!told) co_return std::move(told).error();
  log::Info("code context started",
            {{"sandbox", sandbox_id_}, {"context", id_}, {"process", driver_->id()}});
  co_return Ok{};
}

json::object CodeContext::Stored() const {
  json::object o = Json();
  json::object env;
  for (const auto& [k, v] : env_) env[k] = v;
  o["env"] = std::move(env);
  o["token"] = token_;
  return o;
}

std::shared_ptr<CodeContext> CodeContext::FromStored(const asio::any_io_executor& ex,
                                                     const json::object& o,
                                                     const SandboxEntry& sb) {
  std::shared_ptr<Process> driver;
  if (const json::value* pid = o.if_contains("process_id"); pid && pid->is_string()) {
    driver = sb.FindProcess(pid->as_string());
  }
  try {
    auto language = ParseLanguage(o.at("language").as_string());
    if (!language) return nullptr;
    std::map<std::string, std::string> env;
    for (const auto& [k, v] : o.at("env").as_object()) {
      if (v.is_string()) env[std::string(k)] = std::string(v.as_string());
    }
    auto c =
        std::make_shared<CodeContext>(ex, json::value_to<std::string>(o.at("id")),
                                      json::value_to<std::string>(o.at("sandbox_id")), *language,
                                      json::value_to<std::string>(o.at("cwd")), std::move(env));
    c->created_at_ = ParseRfc3339(o.at("created_at").as_string()).value_or(SystemNow());
    c->executions_ = o.at("execution_count").to_number<uint64_t>();
    c->restarts_ = o.at("restarts").to_number<uint64_t>();
    c->token_ = json::value_to<std::string>(o.at("token"));
    if (*language == Language::kBash) {
      // The shell's state is in the sandbox, under the session's id.
      c->shell_ = std::make_shared<Session>(ex, "ctx-" + c->id_, c->sandbox_id_, c->env_, c->cwd_);
    } else if (driver && driver->status() == ProcessStatus::kRunning) {
      // Only what it writes from now on is read: a message cut by the restart is dropped.
      c->driver_ = std::move(driver);
      c->after_seq_ = c->driver_->log().next_seq() - 1;
      c->driver_->log().AddListener(c.get());
    }
    return c;
  } catch (const std::exception&) {
    return nullptr;
  }
}

void CodeContext::OnAppend() {
  if (!driver_) return;
  auto slice = driver_->log().Read(after_seq_, UINT64_MAX);
  for (const LogEntry* e : slice.entries) {
    after_seq_ = e->seq;
    if (e->kind == EntryKind::kStdout || e->kind == EntryKind::kStderr) {
      OnOutput(e->kind, e->data);
    } else if (e->kind == EntryKind::kExit && current_) {
      current_->wake_.Notify();
    }
  }
}

// Splits a pipe's bytes into the cell's own output and driver messages. A tail that could be
// the start of a message waits for the next read; it starts with \x1e, so holding it back
// never splits a UTF-8 sequence.
void CodeContext::OnOutput(EntryKind kind, std::string_view data) {
  std::string& pending = kind == EntryKind::kStdout ? pending_out_ : pending_err_;
  pending.append(data);
  if (kind == EntryKind::kStderr) {
    stderr_tail_.append(data);
    if (stderr_tail_.size() > kStderrTail) stderr_tail_.erase(0, stderr_tail_.size() - kStderrTail);
  }
  const std::string marker = "\x1e" + token_ + ":";
  const std::string_view stream = kind == EntryKind::kStdout ? "stdout" : "stderr";
  auto emit = [&](std::string_view text) {
    if (text.empty() || !current_) return;
    json::object chunk;
    chunk["chunk"] = Sanitized(text);
    current_->Emit(stream, chunk);
  };
  size_t pos = 0;
  for (;;) {
    const size_t at = pending.find(marker, pos);
    if (at == std::string::npos) {
      // Keep the longest tail that is a prefix of the marker.
      size_t keep = 0;
      for (size_t k = std::min(marker.size() - 1, pending.size() - pos); k > 0; --k) {
        if (std::string_view(pending).substr(pending.size() - k) ==
            std::string_view(marker).substr(0, k)) {
          keep = k;
          break;
        }
      }
      emit(std::string_view(pending).substr(pos, pending.size() - pos - keep));
      pending.erase(0, pending.size() - keep);
      return;
    }
    emit(std::string_view(pending).substr(pos, at - pos));
    const size_t nl = pending.find('\n', at);
    if (nl == std::string::npos) {
      pending.erase(0, at);
      // A message that never ends is not one the driver wrote: what is kept is bounded.
      if (pending.size() > kMaxMessageBytes) {
        log::Warn("oversized code context driver message dropped", {{"context", id_}});
        std::string().swap(pending);
      }
      return;
    }
    const size_t body = at + marker.size();
    OnMessage(kind, std::string_view(pending).substr(body, nl - body));
    pos = nl + 1;
  }
}

void CodeContext::OnMessage(EntryKind kind, std::string_view message) {
  if (kind == EntryKind::kStderr) {
    if (current_ && message == "sync " + std::to_string(current_->number_)) {
      current_->sync_seen_ = true;
      current_->wake_.Notify();
    }
    return;
  }
  boost::system::error_code ec;
  json::value v = json::parse(message, ec);
  if (ec || !v.is_object()) {
    log::Warn("unreadable message from a code context driver", {{"context", id_}});
    return;
  }
  const json::object& m = v.as_object();
  const json::value* type = m.if_contains("type");
  if (!type || !type->is_string() || !current_) return;
  if (type->as_string() == "result") {
    json::object result;
    result["data"] = m.contains("data") ? m.at("data") : json::object{};
    result["is_main_result"] = m.contains("is_main_result") ? m.at("is_main_result") : false;
    current_->Emit("result", result);
  } else if (type->as_string() == "done") {
    const json::value* id = m.if_contains("id");
    if (!id || !id->is_number() || id->to_number<uint64_t>() != current_->number_) return;
    current_->done_seen_ = true;
    if (const json::value* err = m.if_contains("error")) current_->error_ = *err;
    current_->wake_.Notify();
  }
}

Result<std::shared_ptr<CellRun>> CodeContext::Submit(Service& service, std::string code,
                                                     double timeout_seconds,
                                                     std::string idempotency_key,
                                                     std::map<std::string, std::string> env) {
  if (!idempotency_key.empty()) {
    for (const auto& run : runs_) {
      if (run->idempotency_key_ != idempotency_key) continue;
      if (run->code_ == code && run->timeout_seconds_ == timeout_seconds && run->env_ == env) {
        return run;
      }
      return Error{ErrorCode::kConflict, "Idempotency-Key '" + idempotency_key +
                                             "' was used for another cell (run " +
                                             std::to_string(run->number_) + ")"};
    }
  }
  const auto unfinished =
      std::count_if(runs_.begin(), runs_.end(), [](const auto& r) { return !r->ended(); });
  if (static_cast<size_t>(unfinished) >= kRememberedRuns) {
    return Error{ErrorCode::kQuotaExceeded, "code context " + id_ + " has " +
                                                std::to_string(unfinished) +
                                                " cells queued or running; wait for one to end"};
  }
  auto run = std::make_shared<CellRun>(ex_, ++executions_, std::move(code), timeout_seconds,
                                       std::move(idempotency_key), std::move(env));
  runs_.push_back(run);
  Forget();
  asio::co_spawn(ex_, Execute(service, run), [id = id_](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      log::Error("code context cell failed", {{"context", id}, {"error", ex.what()}});
    }
  });
  return run;
}

void CodeContext::Forget() {
  uint64_t bytes = 0;
  for (const auto& r : runs_) bytes += r->log_->retained_bytes();
  // Oldest first, ended runs only: a queued or running one is still someone's stream.
  for (auto it = runs_.begin();
       it != runs_.end() && (runs_.size() > kRememberedRuns || bytes > kRememberedBytes);) {
    if (!(*it)->ended()) {
      ++it;
      continue;
    }
    bytes -= (*it)->log_->retained_bytes();
    it = runs_.erase(it);
  }
}

std::shared_ptr<CellRun> CodeContext::FindRun(uint64_t number) const {
  for (const auto& run : runs_) {
    if (run->number_ == number) return run;
  }
  return nullptr;
}

asio::awaitable<void> CodeContext::Execute(Service& service, std::shared_ptr<CellRun> run) {
  auto self = shared_from_this();
  co_await turns_.Acquire();
  json::object start;
  start["context_id"] = id_;
  start["language"] = LanguageName(language_);
  start["execution_count"] = run->number_;
  run->started_ = SteadyNow();
  if (closed_ || !service.Find(sandbox_id_) || run->cancelled_) {
    json::object err;
    err["name"] = run->cancelled_ ? "Cancelled" : "ContextDeleted";
    err["value"] = run->cancelled_ ? "the cell was cancelled before it started"
                                   : "code context " + id_ + " was deleted";
    err["traceback"] = "";
    err["execution_count"] = run->number_;
    run->End("error", err);
  } else {
    run->Emit("start", start);
    if (language_ == Language::kBash) {
      current_ = run;
      co_await ExecuteShell(service, *run);
      current_.reset();
    } else {
      co_await ExecuteInterpreter(service, run);
    }
  }
  Forget();
  turns_.Release();
}

asio::awaitable<void> CodeContext::ExecuteInterpreter(Service& service,
                                                      std::shared_ptr<CellRun> cell) {
  CellRun& run = *cell;
  auto finished = [&] { return run.done_seen_ && run.sync_seen_; };
  auto driver = driver_;
  auto alive = [&] { return driver && driver->status() == ProcessStatus::kRunning; };
  if (!alive()) {
    json::object err;
    err["name"] = "ContextDead";
    err["value"] = "the " + std::string(LanguageName(language_)) +
                   " interpreter of this context is not running; restart the context "
                   "(POST .../contexts/" +
                   id_ + "/restart)";
    err["traceback"] = Sanitized(stderr_tail_);
    run.End("error", err);
    co_return;
  }
  current_ = cell;
  json::object request;
  request["id"] = run.number_;
  request["code"] = run.code_;
  if (!run.env_.empty()) {
    json::object env;
    for (const auto& [name, value] : run.env_) env[name] = value;
    request["env"] = std::move(env);
  }
  auto written = co_await driver->WriteStdin(json::serialize(request) + "\n");
  const auto deadline = SteadyNow() + Seconds(run.timeout_seconds_);
  while (written && !finished() && alive() && !run.cancelled_ && SteadyNow() < deadline) {
    co_await run.wake_.Wait(deadline - SteadyNow());
  }
  bool timed_out = false;
  bool restarted = false;
  if (written && !finished() && alive()) {
    // Like Ctrl-C: the whole group, so a subprocess the cell waits for stops too.
    timed_out = !run.cancelled_;
    (void)driver->Signal(SIGINT, true);
    const auto grace = SteadyNow() + service.options().kill_grace;
    while (!finished() && alive() && SteadyNow() < grace) {
      co_await run.wake_.Wait(grace - SteadyNow());
    }
    if (!finished() && alive()) {
      driver->KillNow(ExitReason::kTimeout);
      co_await driver->WaitExit();
      if (service.Find(sandbox_id_) && !closed_) {
        Result<void> again = co_await Start(service);
        restarted = again.ok();
        if (restarted) ++restarts_;
      }
    }
  }
  current_.reset();

  json::object end;
  end["execution_count"] = run.number_;
  end["duration_ms"] = MillisSince(run.started_);
  if (finished() && run.error_.is_object()) {
    json::object err = run.error_.as_object();
    err["execution_count"] = run.number_;
    err["timeout"] = timed_out;
    err["restarted"] = false;
    run.End("error", err);
  } else if (finished()) {
    end["status"] = "ok";
    run.End("exit", end);
  } else if (timed_out || run.cancelled_) {
    json::object err;
    err["name"] = timed_out ? "TimeoutError" : "Cancelled";
    err["value"] = (timed_out ? "the cell ran longer than " +
                                    json::serialize(json::value(run.timeout_seconds_)) + " s"
                              : std::string("the cell was cancelled")) +
                   " and did not stop on SIGINT; " +
                   (restarted ? "the interpreter was restarted and its state is lost"
                              : "the interpreter was killed; restart the context");
    err["traceback"] = "";
    err["execution_count"] = run.number_;
    err["timeout"] = timed_out;
    err["restarted"] = restarted;
    run.End("error", err);
  } else {
    json::object err;
    err["name"] = "InterpreterDied";
    std::string how = "the interpreter exited";
    if (driver && driver->exit()) {
      const auto& exit = *driver->exit();
      how += exit.signal ? " on " + SignalName(*exit.signal)
                         : " with code " + std::to_string(exit.exit_code);
      how += " (" + std::string(ExitReasonName(exit.reason)) + ")";
    }
    err["value"] = how + " during the cell; restart the context to continue";
    err["traceback"] = Sanitized(stderr_tail_);
    err["execution_count"] = run.number_;
    err["timeout"] = false;
    err["restarted"] = false;
    run.End("error", err);
  }
}

namespace {

// Copies a shell command's output into its cell as it is appended.
class Relay final : public OutputLog::Listener {
 public:
  Relay(OutputLog& from, CellRun& to) : from_(from), to_(to) {
    from_.AddListener(this);
    OnAppend();
  }
  ~Relay() override { from_.RemoveListener(this); }
  void OnAppend() override {
    auto slice = from_.Read(after_, UINT64_MAX);
    for (const LogEntry* e : slice.entries) {
      after_ = e->seq;
      if (e->kind != EntryKind::kStdout && e->kind != EntryKind::kStderr) continue;
      json::object chunk;
      chunk["chunk"] = Sanitized(e->data);
      to_.Emit(e->kind == EntryKind::kStdout ? "stdout" : "stderr", chunk);
    }
  }

 private:
  OutputLog& from_;
  CellRun& to_;
  uint64_t after_ = 0;
};

}  // namespace

asio::awaitable<void> CodeContext::ExecuteShell(Service& service, CellRun& run) {
  const SandboxEntry* sb = service.Find(sandbox_id_);
  CommandSpec spec;
  spec.cmd = run.code_;
  spec.argv = {"/bin/sh", "-c", run.code_};
  spec.timeout_seconds = run.timeout_seconds_;
  spec.log_limits = service.options().default_log_limits;
  if (sb) spec.env = service.ComposeEnv(*sb, env_);
  spec.cwd = cwd_;
  auto started = co_await shell_->Run(service, std::move(spec), run.env_, std::nullopt);
  if (!started) {
    json::object err;
    err["name"] = "StartError";
    err["value"] = started.error().message;
    err["traceback"] = "";
    err["execution_count"] = run.number_;
    run.End("error", err);
    co_return;
  }
  auto process = *started;
  shell_command_ = process;
  if (run.cancelled_) process->Kill(ExitReason::kKilled);
  {
    Relay relay(process->log(), run);
    co_await process->WaitExit();
  }
  shell_command_.reset();
  const auto& exit = *process->exit();
  json::object end;
  end["execution_count"] = run.number_;
  end["duration_ms"] = MillisSince(run.started_);
  end["exit_code"] = exit.exit_code;
  if (exit.exit_code == 0) {
    end["status"] = "ok";
    run.End("exit", end);
    co_return;
  }
  json::object err;
  const bool timed_out = exit.reason == ExitReason::kTimeout;
  err["name"] = timed_out ? "TimeoutError" : run.cancelled_ ? "Cancelled" : "ExitCode";
  err["value"] = timed_out        ? "the command ran longer than its timeout and was killed"
                 : run.cancelled_ ? std::string("the cell was cancelled and its command killed")
                                  : "exit code " + std::to_string(exit.exit_code);
  err["traceback"] = "";
  err["execution_count"] = run.number_;
  err["exit_code"] = exit.exit_code;
  err["timeout"] = timed_out;
  err["restarted"] = false;
  run.End("error", err);
}

asio::awaitable<Result<void>> CodeContext::Restart(Service& service) {
  auto self = shared_from_this();
  if (language_ != Language::kBash && driver_ && driver_->status() == ProcessStatus::kRunning) {
    auto old = driver_;
    old->KillNow(ExitReason::kKilled);
    co_await old->WaitExit();
  }
  const SandboxEntry* sb = service.Find(sandbox_id_);
  if (!sb || closed_) co_return Error{ErrorCode::kNotFound, "code context " + id_ + " was deleted"};
  if (language_ == Language::kBash) {
    if (shell_) shell_->Close();
    shell_.reset();
  }
  Result<void> started = co_await Start(service);
  if (!started) co_return std::move(started).error();
  ++restarts_;
  if ((sb = service.Find(sandbox_id_))) service.Persist(*sb);
  co_return Ok{};
}

void CodeContext::Cancel(const std::shared_ptr<CellRun>& run) {
  if (!run || run->ended() || run->cancelled_) return;
  run->cancelled_ = true;
  run->wake_.Notify();
  if (language_ != Language::kBash || current_ != run) return;
  if (auto command = shell_command_.lock();
      command && command->status() == ProcessStatus::kRunning) {
    command->Kill(ExitReason::kKilled);
  }
}

void CodeContext::Close() {
  closed_ = true;
  if (shell_) {
    shell_->Close();
    if (auto p = shell_->last_process(); p && p->status() == ProcessStatus::kRunning) {
      p->Kill(ExitReason::kKilled);
    }
  }
  if (driver_ && driver_->status() == ProcessStatus::kRunning) driver_->Kill(ExitReason::kKilled);
}

asio::awaitable<Result<std::shared_ptr<CodeContext>>> CodeContext::Create(Service& service,
                                                                          std::string sandbox_id,
                                                                          ContextRequest req) {
  const SandboxEntry* sb = service.Find(sandbox_id);
  if (!sb || sb->deleting) co_return Error{ErrorCode::kNotFound, "no sandbox '" + sandbox_id + "'"};
  if (sb->contexts.size() >= 64) {
    co_return Error{ErrorCode::kQuotaExceeded, "too many code contexts in " + sandbox_id + " (64)"};
  }
  std::string id = req.id.empty() ? NewId("ctx_") : std::move(req.id);
  auto taken = [&](const SandboxEntry& entry) -> std::optional<Error> {
    if (!entry.contexts.contains(id)) return std::nullopt;
    return Error{ErrorCode::kConflict,
                 "sandbox " + sandbox_id + " has a code context '" + id + "'"};
  };
  if (auto conflict = taken(*sb)) co_return std::move(*conflict);
  auto context =
      std::make_shared<CodeContext>(service.executor(), id, sandbox_id, req.language,
                                    req.cwd.empty() ? sb->cwd : req.cwd, std::move(req.env));
  Result<void> started = co_await context->Start(service);
  if (!started) co_return std::move(started).error();
  const SandboxEntry* entry = service.Find(sandbox_id);
  if (!entry) co_return Error{ErrorCode::kNotFound, "no sandbox '" + sandbox_id + "'"};
  // Another request took the id while this one started its interpreter.
  if (auto conflict = taken(*entry)) {
    context->Close();
    co_return std::move(*conflict);
  }
  service.AddContext(sandbox_id, context);
  co_return context;
}

Result<void> CodeContext::Delete(Service& service, std::string_view sandbox_id,
                                 std::string_view id) {
  const SandboxEntry* sb = service.Find(sandbox_id);
  if (!sb) return Error{ErrorCode::kNotFound, "no sandbox '" + std::string(sandbox_id) + "'"};
  auto context = service.TakeContext(sandbox_id, id);
  if (!context) {
    return Error{ErrorCode::kNotFound,
                 "no code context '" + std::string(id) + "' in sandbox '" + sb->id + "'"};
  }
  context->Close();
  return Ok{};
}

void PrepareTemplate(const ServiceOptions& options, SandboxEntry& sb) {
  if (sb.template_name != "code-interpreter" || !sb.runtime) return;
  auto fs = sandbox::SandboxFs::Open(sb.runtime->RootPath(), sb.runtime->HostId(0));
  if (!fs) return;
  // Debian's matplotlib reads its defaults through a link to /etc/matplotlibrc, which the
  // base root (a chosen subset of the host's /etc) does not carry.
  for (const char* path : {"/etc/matplotlibrc"}) {
    if (fs->Stat(path)) continue;
    auto content = ReadFile(path);
    if (!content) continue;
    if (auto file = fs->OpenWrite(path, 0644, true)) {
      (void)WriteAll(file->fd.get(), *content);
    }
  }
  for (const char* dir : {"/usr/local/bin", "/usr/bin", "/bin"}) {
    if (fs->Stat(std::string(dir) + "/python")) return;
  }
  if (!fs->Stat("/usr/bin/python3")) return;
  if (auto r = fs->Symlink("/usr/bin/python3", "/opt/sandstream/bin/python");
      !r && r.error().code != ErrorCode::kConflict) {
    log::Warn("code-interpreter: python link failed",
              {{"sandbox", sb.id}, {"error", r.error().message}});
    return;
  }
  if (sb.env.contains("PATH")) return;
  sb.env["PATH"] = CodeInterpreterPath(options);
}

std::string CodeInterpreterPath(const ServiceOptions& options) {
  std::string path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  for (const auto& kv : options.base_env) {
    if (kv.starts_with("PATH=")) path = kv.substr(5);
  }
  return "/opt/sandstream/bin:" + path;
}

}  // namespace sandstream
