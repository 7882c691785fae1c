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
    json::object record;
  };
  std::map<std::string, json::object> records;  // of the sandboxes taken back
  std::vector<Pending> pending;
  std::vector<std::string> kept;
  std::map<std::string, std::vector<sandbox::AdoptedProcess>> adopted;
  for (const auto& row : *sandboxes) {
    json::object o;
    try {
      o = json::parse(row.record).as_object();
    } catch (const std::exception&) {
      log::Error("unreadable sandbox record dropped", {{"sandbox", row.id}});
      (void)store_.DeleteSandbox(row.id);
      continue;
    }
    if (o["status"] == "deleting") {
      // Deleted when the daemon died: the deletion ends here, CleanupLeftovers frees the rest.
      log::Info("finishing the deletion of a sandbox", {{"sandbox", row.id}});
      (void)store_.DeleteSandbox(row.id);
      continue;
    }
    auto sb = std::make_unique<SandboxEntry>(ex_);
    sb->id = row.id;
    if (auto* t = o.if_contains("tenant"); t && t->is_string()) sb->tenant = t->as_string();
    sb->template_name = json::value_to<std::string>(o["template"]);
    for (const auto& [k, v] : o["env"].as_object()) {
      if (v.is_string()) sb->env[std::string(k)] = std::string(v.as_string());
    }
    sb->cwd = json::value_to<std::string>(o["cwd"]);
    const auto& l = o["limits"].as_object();
    sb->limits = {l.at("memory_mb").to_number<int64_t>(), l.at("pids").to_number<int64_t>(),
                  l.at("cpu_percent").to_number<int64_t>(), l.at("disk_mb").to_number<int64_t>(),
                  l.at("open_files").to_number<int64_t>()};
    sb->network = json::value_to<std::string>(o["network"]);
    if (sb->network == "egress") {
      auto policy = EgressFromJson(o["egress"]);
      if (policy) {
        sb->egress = std::move(*policy);
      } else {
        log::Warn("sandbox egress record unreadable",
                  {{"sandbox", row.id}, {"error", policy.error().message}});
      }
    }
    if (o["allow_nested_userns"].is_bool()) {
      sb->allow_nested_userns = o["allow_nested_userns"].as_bool() && options_.allow_nested_userns;
    }
    if (o["metadata"].is_object()) sb->metadata = o["metadata"].as_object();
    sb->ttl_seconds = o["ttl_seconds"].to_number<int64_t>();
    sb->created_at = SystemNow();
    if (auto* c = o.if_contains("created_at"); c && c->is_string()) {
      sb->created_at = ParseRfc3339(c->as_string()).value_or(sb->created_at);
    }
    if (sb->ttl_seconds > 0) sb->expires_at = sb->created_at + std::chrono::seconds(sb->ttl_seconds);
    sb->journal = std::make_shared<EventLog>(LogLimits{1u << 20, options_.journal_entries});
    sandbox::SandboxSpec spec;
    spec.id = sb->id;
    spec.template_name = sb->template_name;
    // A template in use is never deleted; one that is gone anyway (its directory removed by
    // hand) leaves the sandbox running on what it had, and a fresh one base.
    if (const Template* tmpl = templates_.Find(sb->template_name)) {
      sb->template_env = tmpl->env;
      spec.layers = templates_.LayerPaths(*tmpl);
      spec.user_uid = tmpl->uid;
      spec.user_gid = tmpl->gid;
    }
    spec.limits = sb->limits;
    spec.network = sb->network;
    spec.egress = sb->egress;
    spec.allow_nested_userns = sb->allow_nested_userns;
    // Before the daemon serves anything: waiting here holds up no request.
    auto runtime = sandbox::RunBlocking(runtime_.Adopt(spec));
    std::string lost;
    if (runtime) {
      sb->runtime = std::move(*runtime);
      adopted[sb->id] = sb->runtime->TakeAdopted();
      kept.push_back(sb->id);
    } else {
      lost = runtime.error().message;
      log::Warn("sandbox could not be taken back", {{"sandbox", sb->id}, {"error", lost}});
    }
    pending.push_back(Pending{std::move(sb), std::move(spec), std::move(lost), std::move(o)});
  }
  runtime_.CleanupLeftovers(kept);
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
    PrepareTemplate(options_, *sb);
    SandboxEntry* raw = sb.get();
    sandboxes_.emplace(raw->id, std::move(sb));
    order_.push_back(raw->id);
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
    json::object o;
    try {
      o = json::parse(row.record).as_object();
    } catch (const std::exception&) {
      continue;
    }
    if (o["status"] == "running" && Readopt(*sb, o, adopted[sb->id])) continue;
    // A process that was running and was not kept did not survive the restart.
    if (o["status"] == "running") {
      o["status"] = "exited";
      o["exit_code"] = 137;
      o["signal"] = "SIGKILL";
      o["reason"] = "killed";
      o["ended_at"] = FormatRfc3339(SystemNow());
      o["duration_ms"] = 0;
      json::array tail = o["tail"].is_array() ? o["tail"].as_array() : json::array{};
      const uint64_t next = o["next_seq"].to_number<uint64_t>();
      tail.push_back(json::object{{"seq", next}, {"kind", "exit"},
                                  {"time", FormatRfc3339(SystemNow())},
                                  {"offset", o["stdout_bytes"].to_number<uint64_t>() +
                                                 o["stderr_bytes"].to_number<uint64_t>()},
                                  {"data", ""}});
      o["tail"] = std::move(tail);
      o["next_seq"] = next + 1;
    }
    auto p = ProcessFromStored(ex_, o);
    if (!p) {
      log::Error("unreadable process record dropped", {{"process", row.id}});
      continue;
    }
    sb->processes.push_back(p);
    if (!p->spec().idempotency_key.empty()) sb->idempotency[p->spec().idempotency_key] = p->id();
    PersistProcess(*sb, *p);
  }
  for (auto& [id, record] : records) {
    if (SandboxEntry* sb = Entry(id)) RestoreSessionsAndContexts(*sb, record);
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

void Service::RestoreSessionsAndContexts(SandboxEntry& sb, const json::object& record) {
  if (auto* ports = record.if_contains("ports"); ports && ports->is_array()) {
    for (const auto& v : ports->as_array()) {
      const auto* o = v.if_object();
      const auto* port = o ? o->if_contains("port") : nullptr;
      const auto* since = o ? o->if_contains("created_at") : nullptr;
      if (!port || !port->is_int64() || port->as_int64() < 1 || port->as_int64() > 65535 ||
          sb.ports.size() >= kMaxPorts) {
        continue;
      }
      sb.ports[static_cast<uint16_t>(port->as_int64())] =
          since && since->is_string() ? ParseRfc3339(since->as_string()).value_or(SystemNow())
                                      : SystemNow();
    }
  }
  if (auto* sessions = record.if_contains("sessions"); sessions && sessions->is_array()) {
    for (const auto& v : sessions->as_array()) {
      if (!v.is_object()) continue;
      if (auto session = SessionFromStored(ex_, v.as_object())) {
        sb.sessions.emplace(session->id(), std::move(session));
      }
    }
  }
  if (auto* contexts = record.if_contains("contexts"); contexts && contexts->is_array()) {
    for (const auto& v : contexts->as_array()) {
      if (!v.is_object()) continue;
      const auto& o = v.as_object();
      std::shared_ptr<Process> driver;
      if (auto* pid = o.if_contains("process_id"); pid && pid->is_string()) {
        driver = sb.FindProcess(pid->as_string());
      }
      if (auto context = CodeContext::FromStored(ex_, o, std::move(driver))) {
        sb.contexts.emplace(context->id(), std::move(context));
      }
    }
  }
}

bool Service::Readopt(SandboxEntry& sb, const json::object& o,
                      std::vector<sandbox::AdoptedProcess>& kept) {
  if (sb.lost || !o.at("pid").is_int64()) return false;
  const pid_t pid = static_cast<pid_t>(o.at("pid").as_int64());
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
  const SystemTime started = ParseRfc3339(o.at("started_at").as_string()).value_or(SystemNow());
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
  Journal(sb, "process.restored", "info",
          "process " + (*p)->id() + " taken back after a restart",
          {{"process_id", (*p)->id()}, {"pid", pid}});
  return true;
}

}  // namespace sandstream
