// Pausing and resuming a sandbox. A pause runs in the sandbox's turn (the one spawns take), so
// nothing is being started in it while its processes stop, and deletion waits for it as for a
// spawn. While paused, what counts time for the sandbox stops: its processes' timeouts and idle
// timeouts, and its TTL (a paused sandbox has paused_ttl instead). Resuming moves them on by
// the time paused.
#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "base/async.h"
#include "base/log.h"
#include "process/await_op.h"
#include "service/contexts.h"
#include "service/service.h"

namespace sandstream {
namespace asio = boost::asio;
namespace json = boost::json;

std::string_view PauseModeName(PauseMode mode) {
  return mode == PauseMode::kFreeze ? "freeze" : "checkpoint";
}

std::optional<PauseMode> ParsePauseMode(std::string_view name) {
  if (name == "freeze") return PauseMode::kFreeze;
  if (name == "checkpoint") return PauseMode::kCheckpoint;
  return std::nullopt;
}

namespace {

double SecondsSince(SteadyTime start) {
  return std::chrono::duration<double>(SteadyNow() - start).count();
}

}  // namespace

asio::awaitable<Result<const SandboxEntry*>> Service::PauseSandbox(std::string id, PauseMode mode,
                                                                   std::string by) {
  SandboxEntry* sb = Entry(id);
  if (!sb) co_return Error{ErrorCode::kNotFound, "no sandbox '" + id + "'"};
  if (auto live = CheckLive(*sb); !live) co_return std::move(live).error();
  if (sb->paused) co_return sb;
  // The entry stays while the turn is held or awaited: deletion waits for it.
  SandboxTurn turn(*sb);
  co_await turn.Take();
  if (auto live = CheckLive(*sb); !live) co_return std::move(live).error();
  if (sb->paused) co_return sb;
  if (auto paused = co_await PauseHeld(*sb, mode, by); !paused) {
    co_return std::move(paused).error();
  }
  co_return sb;
}

asio::awaitable<Result<void>> Service::PauseHeld(SandboxEntry& sb, PauseMode mode,
                                                 const std::string& by) {
  const SteadyTime asked = SteadyNow();
  sb.transition = SandboxEntry::Transition::kPausing;
  Result<void> frozen = Ok{};
  if (mode == PauseMode::kCheckpoint) {
    frozen = co_await CheckpointHeld(sb);
  } else {
    frozen = co_await Await(sb.runtime->Freeze());
  }
  sb.transition = SandboxEntry::Transition::kNone;
  if (!frozen) {
    Journal(sb, "sandbox.pause_failed", "warn",
            "the sandbox could not be paused and runs on: " + frozen.error().message,
            {{"mode", PauseModeName(mode)}, {"by", by}});
    co_return std::move(frozen).error();
  }
  const SystemTime now = SystemNow();
  sb.paused = PauseState{mode, now, SteadyNow(), now + options_.paused_ttl};
  // Paused, it counts its disk against its tenant's quotas, not its memory or CPU.
  quotas_.Pause(sb.tenant, sb.limits);
  if (SharedTenants* shared = quotas_.SharedFor(sb.tenant)) shared->Changed(sb.tenant);
  PauseClocks(sb);
  ++metrics_.pauses_total;
  metrics_.pause_duration[static_cast<size_t>(mode)].Observe(SecondsSince(asked));
  Journal(sb, "sandbox.paused", "info",
          "sandbox paused (" + std::string(PauseModeName(mode)) + "); it is deleted at " +
              FormatRfc3339(sb.paused->until) + " unless resumed",
          {{"mode", PauseModeName(mode)}, {"by", by}});
  Persist(sb);
  co_return Ok{};
}

void Service::PauseClocks(SandboxEntry& sb) {
  for (const auto& p : sb.processes) p->Pause();
  ArmTtl(sb);
}

asio::awaitable<Result<const SandboxEntry*>> Service::ResumeSandbox(std::string id,
                                                                    std::string by) {
  SandboxEntry* sb = Entry(id);
  if (!sb) co_return Error{ErrorCode::kNotFound, "no sandbox '" + id + "'"};
  if (auto live = CheckLive(*sb); !live) co_return std::move(live).error();
  if (!sb->paused && sb->transition == SandboxEntry::Transition::kNone) co_return sb;
  SandboxTurn turn(*sb);
  co_await turn.Take();
  if (auto live = CheckLive(*sb); !live) co_return std::move(live).error();
  if (auto resumed = co_await ResumeHeld(*sb, by); !resumed) {
    co_return std::move(resumed).error();
  }
  co_return sb;
}

asio::awaitable<Result<void>> Service::ResumeHeld(SandboxEntry& sb, const std::string& by) {
  if (!sb.paused) co_return Ok{};
  const SteadyTime asked = SteadyNow();
  // Its memory and CPU count again, which must fit its tenant's quotas.
  if (auto room = quotas_.Unpause(sb.tenant, sb.limits, true); !room) {
    Journal(sb, "sandbox.resume_failed", "warn",
            "the sandbox stays paused: " + room.error().message, {{"by", by}});
    co_return room;
  }
  const bool checkpointed = sb.paused->mode == PauseMode::kCheckpoint;
  sb.transition = SandboxEntry::Transition::kResuming;
  Result<void> thawed = Ok{};
  if (checkpointed) {
    thawed = co_await RestoreHeld(sb);
  } else {
    thawed = sb.runtime->Thaw();
  }
  sb.transition = SandboxEntry::Transition::kNone;
  if (!thawed && checkpointed) {
    // Its processes are gone with the memory that could not be brought back; its images stay
    // in its state directory for inspection until it is deleted.
    quotas_.Pause(sb.tenant, sb.limits);
    sb.paused.reset();
    sb.lost = "its checkpoint could not be restored (" + thawed.error().message + ")";
    for (const auto& p : sb.processes) p->EndUnrestored();
    Journal(sb, "sandbox.lost", "error",
            "the sandbox could not be resumed from its checkpoint: " + thawed.error().message +
                "; delete it and create another",
            {{"cause", *sb.lost}, {"by", by}});
    Persist(sb);
    co_return thawed;
  }
  if (!thawed) {
    quotas_.Pause(sb.tenant, sb.limits);
    Journal(sb, "sandbox.resume_failed", "warn",
            "the sandbox could not be resumed and stays paused: " + thawed.error().message,
            {{"by", by}});
    co_return thawed;
  }
  const PauseState was = *sb.paused;
  sb.paused.reset();
  if (SharedTenants* shared = quotas_.SharedFor(sb.tenant)) shared->Changed(sb.tenant);
  for (const auto& p : sb.processes) p->Resume();
  // Idle (auto_pause) counts from the resume, not from before the pause.
  sb.last_active = SteadyNow();
  if (sb.idle_watch) sb.idle_watch->Notify();
  // Its TTL, counted from its creation, is longer by the time paused (whole seconds, rounded
  // up, as SetTimeout counts it), so a restart computes the same end.
  const auto paused_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(SteadyNow() - was.since).count();
  if (sb.expires_at) {
    sb.ttl_seconds += (paused_ms + 999) / 1000;
    sb.expires_at = sb.created_at + std::chrono::seconds(sb.ttl_seconds);
  }
  ArmTtl(sb);
  ++metrics_.resumes_total;
  metrics_.resume_duration[static_cast<size_t>(was.mode)].Observe(SecondsSince(asked));
  Journal(sb, "sandbox.resumed", "info",
          "sandbox resumed after " + std::to_string(paused_ms) + " ms paused",
          {{"paused_ms", paused_ms}, {"by", by}});
  Persist(sb);
  co_return Ok{};
}

asio::awaitable<Result<void>> Service::WakeHeld(SandboxEntry& sb) {
  if (!sb.paused) co_return Ok{};
  if (!sb.auto_resume) {
    co_return Error{ErrorCode::kPaused, "sandbox " + sb.id +
                                            " is paused and was created with auto_resume false: "
                                            "POST /v1/sandboxes/" +
                                            sb.id + "/resume first"};
  }
  ++metrics_.auto_resumes_total;
  co_return co_await ResumeHeld(sb, "auto_resume");
}

asio::awaitable<Result<void>> Service::CheckpointHeld(SandboxEntry& sb) {
  std::vector<std::shared_ptr<Process>> running;
  for (const auto& p : sb.processes) {
    if (!p->exit()) running.push_back(p);
  }
  // What their pipes hold from here on is written with them, and read after the restore.
  for (const auto& p : running) p->Detach();
  Result<void> written = co_await Await(sb.runtime->Checkpoint());
  if (!written) {
    for (const auto& p : running) p->Rebind(std::nullopt);
    co_return written;
  }
  co_return Ok{};
}

asio::awaitable<Result<void>> Service::RestoreHeld(SandboxEntry& sb) {
  Result<void> restored = co_await Await(sb.runtime->Restore());
  if (!restored) co_return restored;
  TakeBackRestored(sb);
  WatchLife(sb);
  co_return Ok{};
}

void Service::TakeBackRestored(SandboxEntry& sb) {
  std::vector<sandbox::AdoptedProcess> adopted = sb.runtime->TakeAdopted();
  for (const auto& p : sb.processes) {
    if (p->exit()) continue;
    auto it = std::find_if(adopted.begin(), adopted.end(),
                           [&](const auto& a) { return a.process.pid == p->pid(); });
    if (it == adopted.end()) {
      p->EndUnrestored();
      continue;
    }
    // The daemon's log went on from where the checkpoint took its copy: the keeper holds it.
    if (p->log().ring_fd() >= 0) sb.runtime->KeepLog(p->pid(), p->log().ring_fd());
    p->Rebind(std::move(*it));
    adopted.erase(it);
  }
  // Checkpointed by an earlier daemon, or made from another sandbox's checkpoint (a fork): its
  // processes are taken back from their records.
  for (const std::string& row : std::exchange(sb.checkpointed_processes, {})) {
    try {
      (void)Readopt(sb, json::parse(row).as_object(), adopted);
    } catch (const std::exception&) {
    }
  }
  for (const std::string& row : std::exchange(sb.checkpointed_contexts, {})) {
    try {
      if (auto context = CodeContext::FromStored(ex_, json::parse(row).as_object(), sb)) {
        sb.contexts[context->id()] = std::move(context);
      }
    } catch (const std::exception&) {
    }
  }
  for (const auto& a : adopted) sb.runtime->Forget(a.process.pid);
}

asio::awaitable<Result<void>> Service::Wake(std::string id) {
  SandboxEntry* sb = Entry(id);
  if (!sb || (!sb->paused && sb->transition == SandboxEntry::Transition::kNone)) co_return Ok{};
  if (sb->lost || sb->deleting) co_return Ok{};  // the request answers for itself
  if (sb->paused && !sb->auto_resume) co_return co_await WakeHeld(*sb);
  SandboxTurn turn(*sb);
  co_await turn.Take();
  if (sb->deleting || sb->lost) co_return Ok{};
  co_return co_await WakeHeld(*sb);
}

void Service::BeginActivity(std::string_view id) {
  if (SandboxEntry* sb = Entry(id)) {
    ++sb->active_requests;
    sb->last_active = SteadyNow();
  }
}

void Service::EndActivity(std::string_view id) {
  if (SandboxEntry* sb = Entry(id); sb && sb->active_requests > 0) {
    --sb->active_requests;
    sb->last_active = SteadyNow();
    // Its idle period starts now: the watch, waiting while it was busy, counts from here.
    if (sb->active_requests == 0 && sb->idle_watch) sb->idle_watch->Notify();
  }
}

Result<const SandboxEntry*> Service::UpdateLifecycle(std::string_view id,
                                                     const LifecycleSettings& change) {
  SandboxEntry* sb = Entry(id);
  if (!sb) return Error{ErrorCode::kNotFound, "no sandbox '" + std::string(id) + "'"};
  if (auto live = CheckLive(*sb); !live) return std::move(live).error();
  if (change.auto_pause) sb->auto_pause = *change.auto_pause;
  if (change.pause_on_timeout) sb->pause_on_timeout = *change.pause_on_timeout;
  if (change.auto_resume) sb->auto_resume = *change.auto_resume;
  // Idle counts from the change, not from before it.
  sb->last_active = SteadyNow();
  if (sb->idle_watch) sb->idle_watch->Notify();
  WatchIdleOf(*sb);
  Persist(*sb);
  return sb;
}

void Service::WatchIdleOf(SandboxEntry& sb) {
  if (!sb.auto_pause || sb.idle_watch) return;
  sb.idle_watch = std::make_shared<AsyncSignal>(ex_);
  Spawn(ex_, WatchIdle(sb.id, sb.idle_watch), "idle watch of " + sb.id);
}

asio::awaitable<void> Service::WatchIdle(std::string id, std::shared_ptr<AsyncSignal> wake) {
  for (;;) {
    SandboxEntry* sb = Entry(id);
    if (!sb) co_return;
    if (!sb->auto_pause || sb->deleting || sb->lost || shutting_down_) {
      sb->idle_watch.reset();
      co_return;
    }
    const auto idle = std::chrono::seconds(sb->auto_pause->idle_seconds);
    const bool busy = sb->active_requests > 0 || sb->paused ||
                      sb->transition != SandboxEntry::Transition::kNone || sb->spawning > 0 ||
                      std::ranges::any_of(sb->processes, [](const auto& p) {
                        return p->spec().keep_awake && !p->exit();
                      });
    if (!busy && SteadyNow() - sb->last_active >= idle) {
      log::Info("sandbox idle: pausing it", {{"sandbox", id}});
      (void)co_await PauseSandbox(id, sb->auto_pause->mode, "auto_pause");
      if ((sb = Entry(id)) != nullptr) sb->last_active = SteadyNow();
      continue;
    }
    // Looked at again when it may have become idle: when its last request or a process that
    // kept it awake ends, or it resumes (notified), else when its idle period has passed (a spawn,
    // a pause or a resume is over long before).
    const SteadyTime next = busy ? SteadyNow() + idle : sb->last_active + idle;
    (void)co_await wake->Wait(std::max(next - SteadyNow(), SteadyClock::duration::zero()));
  }
}

std::optional<SystemTime> EndsAt(const SandboxEntry& sb) {
  return sb.paused ? std::optional(sb.paused->until) : sb.expires_at;
}

asio::awaitable<void> Service::OnTtl(std::string id) {
  SandboxEntry* sb = Entry(id);
  if (!sb) co_return;
  if (sb->pause_on_timeout && !sb->paused && !sb->lost && !sb->deleting) {
    log::Info("sandbox TTL passed: pausing it (on_timeout pause)", {{"sandbox", id}});
    // Resumed, it runs for another period (its TTL grows by the time paused besides).
    sb->ttl_seconds += std::max<int64_t>(1, sb->ttl_period);
    sb->expires_at = sb->created_at + std::chrono::seconds(sb->ttl_seconds);
    auto paused = co_await PauseSandbox(id, PauseMode::kFreeze, "on_timeout");
    if (paused) co_return;
    log::Warn("pausing at the TTL failed: deleting the sandbox",
              {{"sandbox", id}, {"error", paused.error().message}});
  } else {
    log::Info("sandbox TTL passed", {{"sandbox", id}});
  }
  (void)co_await DeleteSandbox(id);
}

std::string_view SandboxState(const SandboxEntry& sb) {
  if (sb.deleting) return "deleting";
  if (sb.lost) return "lost";
  if (sb.transition == SandboxEntry::Transition::kPausing) return "pausing";
  if (sb.transition == SandboxEntry::Transition::kResuming) return "resuming";
  return sb.paused ? "paused" : "running";
}

std::map<std::string, size_t> Service::CountByState() const {
  std::map<std::string, size_t> counts{{"running", 0}, {"paused", 0}, {"lost", 0}};
  for (const auto& [id, sb] : sandboxes_) ++counts[std::string(SandboxState(*sb))];
  return counts;
}

}  // namespace sandstream
