// Service's restart: the sandboxes, processes, sessions and code contexts an earlier daemon left
// running, taken back from the Store's records and the sandboxes' keepers; a sandbox that
// cannot be taken back is reported lost.
#include <boost/json.hpp>

#include "base/log.h"
#include "service/codec.h"
#include "service/contexts.h"
#include "service/service.h"
#include "service/sessions.h"

namespace sandstream {
namespace json = boost::json;

void Service::Restore() {
  resources_.Start();
  // Before any sandbox: a sandbox made again (lost) mounts its volumes.
  volumes_.Load();
  auto sandboxes = store_.Sandboxes();
  auto processes = store_.Processes(kFinishedInMemory);
  if (!sandboxes || !processes) {
    log::Error("reading the store failed",
               {{"error", !sandboxes ? sandboxes.error().message : processes.error().message}});
    runtime_.CleanupLeftovers({});
    return;
  }
  // First every sandbox that still runs is taken back; then what no record keeps is removed;
  // then a sandbox that could not be taken back gets a fresh one under its id, reported lost.
  struct Pending {
    std::unique_ptr<SandboxEntry> sb;
    sandbox::SandboxSpec spec;
    std::string lost;  // why it could not be taken back
    StoredSandbox record;
  };
  std::map<std::string, StoredSandbox> records;  // of the sandboxes taken back
  std::vector<Pending> pending;
  std::vector<std::string> kept;
  std::map<std::string, std::vector<sandbox::AdoptedProcess>> adopted;
  for (const auto& row : *sandboxes) {
    Result<StoredSandbox> record = StoredSandboxFromJson(row.record);
    if (!record) {
      log::Error("unreadable sandbox record dropped",
                 {{"sandbox", row.id}, {"error", record.error().message}});
      (void)store_.DeleteSandbox(row.id);
      continue;
    }
    StoredSandbox& o = *record;
    if (o.deleting) {
      // Deleted when the daemon died: the deletion ends here, CleanupLeftovers frees the rest.
      log::Info("finishing the deletion of a sandbox", {{"sandbox", row.id}});
      (void)store_.DeleteSandbox(row.id);
      continue;
    }
    auto sb = std::make_unique<SandboxEntry>(ex_);
    sb->id = row.id;
    sb->tenant = o.tenant;
    sb->template_name = o.template_name;
    sb->env = o.env;
    sb->cwd = o.cwd;
    sb->limits = o.limits;
    sb->network = o.network;
    sb->volumes = o.volumes;
    if (o.network == sandbox::NetworkMode::kEgress) {
      if (o.egress) {
        sb->egress = *o.egress;
      } else {
        log::Warn("sandbox egress record unreadable",
                  {{"sandbox", row.id}, {"error", o.egress.error().message}});
      }
    }
    sb->allow_nested_userns = o.allow_nested_userns && options_.allow_nested_userns;
    sb->metadata = o.metadata;
    sb->auto_resume = o.auto_resume;
    sb->auto_pause = o.auto_pause;
    sb->pause_on_timeout = o.pause_on_timeout;
    sb->ttl_period = o.ttl_period.value_or(o.ttl_seconds);
    sb->ttl_seconds = o.ttl_seconds;
    sb->created_at = o.created_at.value_or(SystemNow());
    if (sb->ttl_seconds > 0)
      sb->expires_at = sb->created_at + std::chrono::seconds(sb->ttl_seconds);
    sb->journal = std::make_shared<EventLog>(LogLimits{1u << 20, options_.journal_entries});
    const Template* tmpl = template_service_.templates().Find(sb->template_name);
    if (tmpl) sb->template_env = tmpl->env;
    sandbox::SandboxSpec spec = SpecFor(*sb, tmpl);
    // Before the daemon serves anything: waiting here holds up no request.
    auto runtime = sandbox::RunBlocking(runtime_.Adopt(spec));
    std::string lost;
    if (runtime) {
      sb->runtime = std::move(*runtime);
      adopted[sb->id] = sb->runtime->TakeAdopted();
      kept.push_back(sb->id);
      // Paused is what the kernel says: a daemon that died between freezing the sandbox and
      // writing its record finds it frozen, one that died thawing it finds it running.
      // Checkpointed is what the runtime found on disk: a checkpoint a dying daemon finished
      // (the record may still say running), or none, when it died before.
      const bool checkpointed = sb->runtime->Checkpointed();
      if (sb->runtime->Frozen() || checkpointed) {
        const SystemTime at = o.paused_at.value_or(SystemNow());
        const SteadyTime since =
            SteadyNow() - std::chrono::duration_cast<SteadyClock::duration>(
                              std::max(SystemNow() - at, SystemTime::duration{}));
        const PauseMode mode =
            checkpointed ? PauseMode::kCheckpoint : o.pause_mode.value_or(PauseMode::kFreeze);
        sb->paused = PauseState{mode, at, since, at + options_.paused_ttl};
      }
    } else {
      lost = runtime.error().message;
      log::Warn("sandbox could not be taken back", {{"sandbox", sb->id}, {"error", lost}});
    }
    pending.push_back(Pending{std::move(sb), std::move(spec), std::move(lost), std::move(*record)});
  }
  runtime_.CleanupLeftovers(kept);
  RemoveLeftoverCheckpoints();
  for (Pending& p : pending) {
    auto& sb = p.sb;
    if (!sb->runtime) {
      auto runtime = sandbox::RunBlocking(runtime_.Create(p.spec));
      if (!runtime) {
        log::Error("restoring sandbox failed; dropping it",
                   {{"sandbox", sb->id}, {"error", runtime.error().message}});
        (void)store_.DeleteSandbox(sb->id);
        continue;
      }
      sb->runtime = std::move(*runtime);
      sb->lost = "sandstreamd restarted and could not take the sandbox back (" + p.lost +
                 "): its files and processes are gone";
    }
    if (auto resolving = StartResolver(*sb); !resolving) {
      log::Error("sandbox resolver could not start",
                 {{"sandbox", sb->id}, {"error", resolving.error().message}});
    }
    SandboxEntry* raw = Register(std::move(sb));
    if (raw->lost) {
      Journal(*raw, "sandbox.lost", "error", *raw->lost + "; delete it and create another",
              {{"cause", *raw->lost}});
    } else {
      records[raw->id] = std::move(p.record);
      WatchLife(*raw);
      Journal(*raw, "sandbox.restored", "info",
              "sandstreamd restarted: the sandbox, its files and its running processes were "
              "taken back");
    }
    ArmTtl(*raw);
  }
  for (const auto& row : *processes) {
    SandboxEntry* sb = Entry(row.sandbox_id);
    if (!sb) continue;
    std::shared_ptr<Process> p;
    try {
      json::object o = json::parse(row.record).as_object();
      if (o["status"] == "running" && sb->runtime->Checkpointed()) {
        // Taken back when the restore brings it back.
        sb->checkpointed_processes.push_back(row.record);
        continue;
      }
      if (o["status"] == "running" && Readopt(*sb, o, adopted[sb->id])) continue;
      // A process that was running and was not kept did not survive the restart.
      if (o["status"] == "running") EndStoredAsKilled(o, SystemNow());
      p = ProcessFromStored(ex_, o);
    } catch (const std::exception&) {
      p = nullptr;
    }
    if (!p) {
      log::Error("unreadable process record dropped", {{"process", row.id}});
      continue;
    }
    sb->processes.push_back(p);
    if (!p->spec().idempotency_key.empty()) sb->idempotency[p->spec().idempotency_key] = p->id();
    PersistProcess(*sb, *p);
  }
  for (auto& [id, record] : records) {
    if (SandboxEntry* sb = Entry(id)) {
      RestoreSessionsAndContexts(*sb, record);
      // Their interpreters come back with the restore: the contexts are bound to them then.
      if (!sb->checkpointed_processes.empty()) {
        for (const auto& v : record.contexts) {
          sb->checkpointed_contexts.push_back(json::serialize(v));
        }
      }
    }
  }
  for (auto& [id, sb] : sandboxes_) {
    if (sb->paused) PauseClocks(*sb);
    sb->last_active = SteadyNow();
    WatchIdleOf(*sb);
  }
  // Kept processes no record names (the daemon died between the spawn and its record): no
  // client knows them, so they end.
  for (auto& [id, rest] : adopted) {
    SandboxEntry* sb = Entry(id);
    if (!sb || !sb->runtime) continue;
    for (const auto& a : rest) {
      sb->runtime->SignalGroup(a.process.pid, SIGKILL);
      sb->runtime->Forget(a.process.pid);
    }
  }
  if (!sandboxes_.empty()) {
    log::Info("restored state", {{"sandboxes", std::to_string(sandboxes_.size())},
                                 {"taken_back", std::to_string(kept.size())}});
  }
}

void Service::RestoreSessionsAndContexts(SandboxEntry& sb, const StoredSandbox& record) {
  for (const auto& [port, since] : record.ports) {
    if (sb.ports.size() >= kMaxPorts) break;
    sb.ports[port] = since;
  }
  for (const auto& v : record.sessions) {
    if (!v.is_object()) continue;
    if (auto session = SessionFromStored(ex_, v.as_object())) {
      sb.sessions.emplace(session->id(), std::move(session));
    }
  }
  for (const auto& v : record.contexts) {
    if (!v.is_object()) continue;
    if (auto context = CodeContext::FromStored(ex_, v.as_object(), sb)) {
      sb.contexts.emplace(context->id(), std::move(context));
    }
  }
}

bool Service::Readopt(SandboxEntry& sb, const json::object& o,
                      std::vector<sandbox::AdoptedProcess>& kept) {
  const json::value* stored_pid = o.if_contains("pid");
  if (sb.lost || !stored_pid || !stored_pid->is_int64()) return false;
  const pid_t pid = static_cast<pid_t>(stored_pid->as_int64());
  auto it = std::find_if(kept.begin(), kept.end(),
                         [&](const sandbox::AdoptedProcess& a) { return a.process.pid == pid; });
  if (it == kept.end()) return false;
  sandbox::AdoptedProcess a = std::move(*it);
  kept.erase(it);
  CommandSpec spec;
  try {
    spec = CommandSpecFromStored(o);
  } catch (const std::exception&) {
    return false;
  }
  const json::value* started_at = o.if_contains("started_at");
  const SystemTime started = started_at && started_at->is_string()
                                 ? ParseRfc3339(started_at->as_string()).value_or(SystemNow())
                                 : SystemNow();
  auto p = Process::Adopt(ex_, sb.runtime, std::move(spec), started, std::move(a),
                          ProcessOptionsFor(), ExitHandler(sb.id));
  if (!p) {
    log::Warn("a running process could not be taken back",
              {{"sandbox", sb.id}, {"pid", std::to_string(pid)}, {"error", p.error().message}});
    return false;
  }
  sb.processes.push_back(*p);
  if (!(*p)->spec().idempotency_key.empty()) {
    sb.idempotency[(*p)->spec().idempotency_key] = (*p)->id();
  }
  Journal(sb, "process.restored", "info", "process " + (*p)->id() + " taken back after a restart",
          {{"process_id", (*p)->id()}, {"pid", pid}});
  return true;
}

}  // namespace sandstream
