// Service's processes: what a command starts with (its environment, the checks), starting and
// supervising it, recording its end, and trimming a finished one's output window once no
// reader is on it.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "base/ids.h"
#include "base/log.h"
#include "platform/signals.h"
#include "service/codec.h"
#include "service/service.h"

namespace sandstream {
namespace asio = boost::asio;
namespace json = boost::json;

std::vector<std::string> Service::ComposeEnv(
    const SandboxEntry& sb, const std::map<std::string, std::string>& extra) const {
  std::map<std::string, std::string> merged;
  for (const auto* list : {&options_.base_env, &sb.template_env}) {
    for (const auto& kv : *list) {
      const auto eq = kv.find('=');
      merged[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
    }
  }
  for (const auto& [k, v] : sb.env) merged[k] = v;
  for (const auto& [k, v] : extra) merged[k] = v;
  std::vector<std::string> env;
  env.reserve(merged.size());
  for (const auto& [k, v] : merged) env.push_back(k + "=" + v);
  return env;
}

Result<std::shared_ptr<Process>> Service::Attach(SandboxEntry& sb, const CommandSpec& spec,
                                                 bool* attached) {
  *attached = false;
  if (spec.idempotency_key.empty()) return std::shared_ptr<Process>();
  auto it = sb.idempotency.find(spec.idempotency_key);
  if (it == sb.idempotency.end()) return std::shared_ptr<Process>();
  auto existing = sb.FindProcess(it->second);
  if (!existing) return std::shared_ptr<Process>();
  if (existing->spec().argv != spec.argv) {
    return Error{ErrorCode::kConflict,
                 "Idempotency-Key '" + spec.idempotency_key + "' was used for another command"};
  }
  *attached = true;
  return existing;
}

Result<void> Service::CheckLive(const SandboxEntry& sb) const {
  if (shutting_down_) return Error{ErrorCode::kShuttingDown, "sandstreamd is shutting down"};
  if (sb.deleting) return Error{ErrorCode::kNotFound, "sandbox " + sb.id + " is being deleted"};
  if (sb.lost) {
    return Error{ErrorCode::kConflict,
                 "sandbox " + sb.id + " is lost (" + *sb.lost + "): delete it and create another"};
  }
  return Ok{};
}

Result<void> Service::CheckStart(const SandboxEntry& sb, const CommandSpec& spec) const {
  if (auto live = CheckLive(sb); !live) return live;
  if (!spec.id.empty() && (sb.FindProcess(spec.id) || sb.starting_ids.contains(spec.id))) {
    return Error{ErrorCode::kConflict, "process id '" + spec.id + "' is in use"};
  }
  if (sb.RunningProcesses() + sb.spawning >= options_.max_processes_per_sandbox) {
    return Error{ErrorCode::kQuotaExceeded, "too many running processes in " + sb.id};
  }
  if (const Tenant* t = quotas_.TenantOf(sb.tenant); t && t->quotas.running_processes > 0) {
    const TenantUsage used = Usage(sb.tenant);
    if (used.running_processes >= t->quotas.running_processes) {
      return Error{ErrorCode::kQuotaExceeded, "tenant '" + sb.tenant +
                                                  "' is at its quota running_processes " +
                                                  std::to_string(t->quotas.running_processes)};
    }
  }
  return Ok{};
}

asio::awaitable<Result<Service::Started>> Service::StartProcess(std::string sandbox_id,
                                                                CommandSpec spec) {
  SandboxEntry* sb = Entry(sandbox_id);
  if (!sb) co_return Error{ErrorCode::kNotFound, "no sandbox '" + sandbox_id + "'"};
  const std::string key = spec.idempotency_key;
  // A retry that arrives while the first request's spawn is in flight waits for it.
  while (!key.empty() && sb->starting_keys.contains(key)) {
    co_await sb->spawns_done.Wait();
    sb = Entry(sandbox_id);
    if (!sb) co_return Error{ErrorCode::kNotFound, "no sandbox '" + sandbox_id + "'"};
  }
  bool attached = false;
  auto existing = Attach(*sb, spec, &attached);
  if (!existing) co_return std::move(existing).error();
  if (attached) co_return Started{*existing, true};
  if (auto ok = CheckStart(*sb, spec); !ok) co_return std::move(ok).error();
  if (spec.id.empty()) spec.id = NewId("proc_");
  spec.sandbox_id = sandbox_id;

  const std::string id = spec.id;
  sb->starting_ids.insert(id);
  if (!key.empty()) sb->starting_keys.insert(key);
  Result<std::shared_ptr<Process>> started = BeingDeleted(sandbox_id);
  {
    // The entry stays while the turn is held or awaited: deletion waits for it.
    SandboxTurn turn(*sb);
    co_await turn.Take();
    if (!sb->deleting && !shutting_down_) {
      // Paused since the request looked (its keeper is frozen too): resumed first, or refused.
      if (auto awake = co_await WakeHeld(*sb); !awake) {
        started = std::move(awake).error();
      } else {
        started = co_await Process::Start(sb->runtime, std::move(spec), ProcessOptionsFor(),
                                          ExitHandler(sandbox_id));
      }
    }
    sb->starting_ids.erase(id);
    if (!key.empty()) sb->starting_keys.erase(key);
  }
  if (!started) co_return std::move(started).error();
  Record(*sb, *started);
  co_return Started{*started, false};
}

ProcessOptions Service::ProcessOptionsFor() const {
  return ProcessOptions{options_.kill_grace, options_.reader_stall};
}

Process::ExitCallback Service::ExitHandler(std::string sandbox_id) {
  return [this, sandbox_id = std::move(sandbox_id)](Process& p) {
    if (auto* s = Entry(sandbox_id)) OnProcessExit(*s, p);
  };
}

void Service::Record(SandboxEntry& sb, const std::shared_ptr<Process>& p) {
  sb.processes.push_back(p);
  if (!p->spec().idempotency_key.empty()) sb.idempotency[p->spec().idempotency_key] = p->id();
  ++metrics_.processes_started_total;
  Journal(sb, "process.started", "info",
          "process " + p->id() +
              " started: " + (p->spec().cmd.empty() ? p->spec().argv[0] : p->spec().cmd),
          {{"process_id", p->id()}, {"pid", p->pid()}});
  PersistProcess(sb, *p);
  if (sb.ended_unrecorded.erase(p->id()) > 0) OnProcessExit(sb, *p);
}

void Service::OnProcessExit(SandboxEntry& sb, Process& p) {
  // One that kept its sandbox awake leaves it idle from its end on (auto_pause).
  if (p.spec().keep_awake) {
    sb.last_active = SteadyNow();
    if (sb.idle_watch) sb.idle_watch->Notify();
  }
  // A command that ends at once may end before StartProcess has recorded it: its start is
  // journaled first, then this.
  if (!sb.FindProcess(p.id())) {
    sb.ended_unrecorded.insert(p.id());
    return;
  }
  const auto& exit = *p.exit();
  std::string message = "process " + p.id() +
                        " exited: " + std::string(ExitReasonName(exit.reason)) + ", exit code " +
                        std::to_string(exit.exit_code);
  if (exit.signal) message += ", " + SignalName(*exit.signal);
  json::object fields{{"process_id", p.id()}};
  const json::value exit_json = ExitJson(exit);
  for (const auto& [k, v] : exit_json.as_object()) fields[k] = v;
  const bool bad = exit.reason == ExitReason::kOom || exit.reason == ExitReason::kTimeout ||
                   exit.reason == ExitReason::kIdleTimeout;
  Journal(sb, "process.exited", bad ? "warn" : "info", message, fields);
  if (exit.reason == ExitReason::kOom) {
    Journal(sb, "limit.hit", "warn",
            "memory limit of " + std::to_string(sb.limits.memory_mb) + " MiB hit: process " +
                p.id() + " was killed",
            {{"limit", "memory_mb"}, {"process_id", p.id()}});
  }
  PersistProcess(sb, p);
  // Its end is recorded: what the sandbox kept of it for a later daemon may go.
  if (sb.runtime) sb.runtime->Forget(p.pid());
  sb.held_windows.emplace(p.id(), SteadyNow());
  if (!sb.sweeping_windows) {
    sb.sweeping_windows = true;
    Spawn(ex_, SweepWindows(sb.id), "output window sweep of " + sb.id);
  }
  // Bound memory and the store: a sandbox keeps its newest kFinishedInMemory finished
  // processes; an older one is forgotten, its record too.
  size_t finished = 0;
  for (const auto& q : sb.processes) finished += q->status() == ProcessStatus::kExited;
  if (finished > kFinishedInMemory) {
    for (auto it = sb.processes.begin(); it != sb.processes.end(); ++it) {
      if ((*it)->status() == ProcessStatus::kExited && (*it).get() != &p) {
        std::erase_if(sb.idempotency, [&](const auto& kv) { return kv.second == (*it)->id(); });
        sb.held_windows.erase((*it)->id());
        (void)store_.DeleteProcess(sb.id, (*it)->id());
        sb.processes.erase(it);
        break;
      }
    }
  }
}

asio::awaitable<void> Service::SweepWindows(std::string id) {
  // Looked at every quarter of the grace: a window goes once no reader has been on it for a
  // whole grace, counted from when the last one left (seen within a quarter), however readers
  // came and went before. One timer per sandbox, whatever the number of processes it ran.
  const SteadyClock::duration grace = options_.finished_window_grace;
  const SteadyClock::duration step =
      std::max<SteadyClock::duration>(grace / 4, std::chrono::milliseconds(1));
  Timer timer(ex_);
  for (;;) {
    timer.expires_after(step);
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
    SandboxEntry* sb = Entry(id);
    if (!sb) co_return;
    const SteadyTime now = SteadyNow();
    for (const auto& p : sb->processes) {
      auto held = sb->held_windows.find(p->id());
      if (held == sb->held_windows.end()) continue;
      std::optional<SteadyTime>& idle_since = held->second;
      if (p->log().listener_count() > 0) {
        idle_since.reset();
      } else if (!idle_since) {
        idle_since = now;
      } else if (now - *idle_since >= grace) {
        p->log().Trim(options_.retained_tail_bytes);
        sb->held_windows.erase(held);
      }
    }
    if (sb->held_windows.empty()) {
      sb->sweeping_windows = false;
      co_return;
    }
  }
}

}  // namespace sandstream
