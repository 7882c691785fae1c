#include "service/service.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "base/ids.h"
#include "base/log.h"
#include "net/egress.h"
#include "net/policy.h"
#include "platform/signals.h"
#include "process/await_op.h"
#include "service/codec.h"
#include "service/contexts.h"
#include "service/sessions.h"

namespace sandstream {
namespace asio = boost::asio;
namespace json = boost::json;

std::shared_ptr<Process> SandboxEntry::FindProcess(std::string_view pid) const {
  for (const auto& p : processes) {
    if (p->id() == pid) return p;
  }
  return nullptr;
}

size_t SandboxEntry::RunningProcesses() const {
  size_t n = 0;
  for (const auto& p : processes) n += p->status() == ProcessStatus::kRunning;
  return n;
}

namespace {

// The limits by their wire names (SandboxRequest::limits).
struct LimitField {
  const char* name;
  int64_t sandbox::Limits::*field;
};
constexpr LimitField kLimitFields[] = {{"memory_mb", &sandbox::Limits::memory_mb},
                                       {"pids", &sandbox::Limits::pids},
                                       {"cpu_percent", &sandbox::Limits::cpu_percent},
                                       {"disk_mb", &sandbox::Limits::disk_mb},
                                       {"open_files", &sandbox::Limits::open_files}};

}  // namespace

Service::Service(asio::any_io_executor ex, sandbox::Runtime& runtime, Store& store,
                 ServiceOptions options)
    : ex_(std::move(ex)), runtime_(runtime), store_(store), options_(std::move(options)) {}

Service::~Service() = default;

size_t Service::running_processes() const {
  size_t n = 0;
  for (const auto& [id, sb] : sandboxes_) n += sb->RunningProcesses();
  return n;
}

void Service::Audit(std::string_view sandbox_id, std::string_view type, std::string message,
                    json::object fields) {
  if (SandboxEntry* sb = Entry(sandbox_id))
    Journal(*sb, type, "info", std::move(message), std::move(fields));
}

void Service::Journal(SandboxEntry& sb, std::string_view type, std::string_view level,
                      std::string message, json::object fields) {
  const SystemTime now = SystemNow();
  const uint64_t seq = sb.journal->next_seq();
  const std::string time = FormatRfc3339(now);
  // The /logs view of a record: only what a person reads.
  const json::object line{{"seq", seq}, {"time", time}, {"level", level}, {"message", message}};
  fields["seq"] = seq;
  fields["time"] = time;
  fields["type"] = type;
  fields["level"] = level;
  fields["message"] = message;
  sb.journal->Append(std::string(type), json::serialize(fields), json::serialize(line), false, now);
}

void Service::Persist(const SandboxEntry& sb) {
  json::object record = SandboxJson(sb);
  json::array sessions;
  for (const auto& [id, session] : sb.sessions) sessions.push_back(SessionJson(*session));
  json::array contexts;
  for (const auto& [id, context] : sb.contexts) contexts.push_back(context->Stored());
  record["sessions"] = std::move(sessions);
  record["contexts"] = std::move(contexts);
  json::array ports;
  for (const auto& [port, since] : sb.ports) {
    ports.push_back(json::object{{"port", port}, {"created_at", FormatRfc3339(since)}});
  }
  record["ports"] = std::move(ports);
  record["ttl_period"] = sb.ttl_period;
  if (auto r = store_.PutSandbox(sb.id, json::serialize(record)); !r) {
    log::Error("persisting sandbox failed", {{"sandbox", sb.id}, {"error", r.error().message}});
  }
}

namespace {

// Takes entry `id` out of `members` (a sandbox's sessions or contexts); null if none.
template <class Members>
typename Members::mapped_type TakeMember(Members& members, std::string_view id) {
  auto it = members.find(id);
  if (it == members.end()) return nullptr;
  auto member = std::move(it->second);
  members.erase(it);
  return member;
}

}  // namespace

void Service::AddSession(std::string_view sandbox_id, std::shared_ptr<Session> session) {
  SandboxEntry* sb = Entry(sandbox_id);
  if (!sb) return;
  sb->sessions.emplace(session->id(), std::move(session));
  Persist(*sb);
}

std::shared_ptr<Session> Service::TakeSession(std::string_view sandbox_id, std::string_view id) {
  SandboxEntry* sb = Entry(sandbox_id);
  if (!sb) return nullptr;
  auto session = TakeMember(sb->sessions, id);
  if (session) Persist(*sb);
  return session;
}

void Service::AddContext(std::string_view sandbox_id, std::shared_ptr<CodeContext> context) {
  SandboxEntry* sb = Entry(sandbox_id);
  if (!sb) return;
  sb->contexts.emplace(context->id(), std::move(context));
  Persist(*sb);
}

std::shared_ptr<CodeContext> Service::TakeContext(std::string_view sandbox_id,
                                                  std::string_view id) {
  SandboxEntry* sb = Entry(sandbox_id);
  if (!sb) return nullptr;
  auto context = TakeMember(sb->contexts, id);
  if (context) Persist(*sb);
  return context;
}

void Service::PersistProcess(const SandboxEntry& sb, const Process& p) {
  const std::string record = json::serialize(StoredProcessJson(p, options_.retained_tail_bytes));
  if (auto r = store_.PutProcess(sb.id, p.id(), record); !r) {
    log::Error("persisting process failed", {{"process", p.id()}, {"error", r.error().message}});
  }
}

Result<Service::Plan> Service::Validate(const SandboxRequest& req) const {
  if (shutting_down_) return Error{ErrorCode::kShuttingDown, "sandstreamd is shutting down"};
  if (sandboxes_.size() + quotas_.creating() >= options_.max_sandboxes) {
    // Not the caller's quota but this daemon's room: 503, and a gateway tries another node.
    return Error{ErrorCode::kUnavailable, "sandbox limit reached (" +
                                              std::to_string(options_.max_sandboxes) +
                                              "): this node is full"};
  }
  Plan plan;
  const bool admin = req.by == "admin";
  const Templates& templates = template_service_.templates();
  plan.tmpl = templates.Find(req.template_name);
  if (!plan.tmpl || !plan.tmpl->ready || !TemplateService::MayUse(*plan.tmpl, req.tenant, admin)) {
    std::string known;
    for (const Template* t : templates.List()) {
      if (t->ready && TemplateService::MayUse(*t, req.tenant, admin)) {
        known += (known.empty() ? "" : ", ") + t->name;
      }
    }
    return Error{ErrorCode::kInvalidRequest,
                 "unknown template '" + req.template_name + "' (known: " + known + ")"};
  }
  plan.limits = options_.default_limits;
  for (const auto& [name, value] : req.limits) {
    const LimitField* f = nullptr;
    for (const auto& lf : kLimitFields) {
      if (name == lf.name) f = &lf;
    }
    if (!f) return Error{ErrorCode::kInvalidRequest, "unknown limit '" + name + "'"};
    const int64_t max = options_.max_limits.*(f->field);
    if (value <= 0 || value > max) {
      return Error{ErrorCode::kInvalidRequest,
                   "limits." + name + " must be between 1 and " + std::to_string(max)};
    }
    plan.limits.*(f->field) = value;
  }
  const auto network = sandbox::ParseNetworkMode(req.network);
  if (!network) {
    return Error{ErrorCode::kInvalidRequest,
                 "network must be \"loopback\" (the default), \"none\" or \"egress\""};
  }
  plan.network = *network;
  if (plan.network == sandbox::NetworkMode::kEgress && !options_.egress) {
    return Error{ErrorCode::kInvalidRequest,
                 "network: egress is off in this daemon's configuration (egress_pool)"};
  }
  if (req.allow_nested_userns && !options_.allow_nested_userns) {
    return Error{ErrorCode::kInvalidRequest,
                 "allow_nested_userns is not granted by this daemon's configuration "
                 "(the operator's allow_nested_userns setting)"};
  }
  auto volumes = FindVolumes(req);
  if (!volumes) return std::move(volumes).error();
  plan.volumes = std::move(*volumes);
  return plan;
}

Result<std::vector<SandboxVolume>> Service::FindVolumes(const SandboxRequest& req) const {
  if (req.volumes.size() > sandbox::kMaxVolumeMounts) {
    return Error{ErrorCode::kInvalidRequest,
                 "volumes: at most " + std::to_string(sandbox::kMaxVolumeMounts) + " mounts"};
  }
  std::vector<SandboxVolume> found;
  for (const SandboxVolume& asked : req.volumes) {
    const Volume* v = volumes_.Find(req.tenant, req.by == "admin", asked.name);
    if (!v) {
      return Error{ErrorCode::kInvalidRequest, "volumes: unknown volume '" + asked.name + "'"};
    }
    if (auto root = volumes_.Root(*v); !root) return std::move(root).error();
    auto path = sandbox::NormalizeSandboxPath(asked.path);
    if (!path) {
      return Error{ErrorCode::kInvalidRequest,
                   "volumes: path '" + asked.path + "' must be an absolute path"};
    }
    if (*path == "/") {
      return Error{ErrorCode::kInvalidRequest, "volumes: a volume cannot be the root ('/')"};
    }
    for (std::string_view system : {"/proc", "/sys", "/dev"}) {
      if (*path == system || path->starts_with(std::string(system) + "/")) {
        return Error{ErrorCode::kInvalidRequest,
                     "volumes: path " + *path + " is under " + std::string(system) +
                         ", which the sandbox's kernel filesystems take"};
      }
    }
    for (const SandboxVolume& other : found) {
      const auto inside = [](const std::string& a, const std::string& b) {
        return a == b || a.starts_with(b + "/");
      };
      if (inside(*path, other.path) || inside(other.path, *path)) {
        return Error{ErrorCode::kInvalidRequest,
                     "volumes: " + *path + " and " + other.path + " overlap (one mount each)"};
      }
    }
    found.push_back(SandboxVolume{v->id, v->name, *path, asked.read_only});
  }
  return found;
}

std::unique_ptr<SandboxEntry> Service::Build(SandboxRequest req, const Plan& plan) const {
  const Template& tmpl = *plan.tmpl;
  auto sb = std::make_unique<SandboxEntry>(ex_);
  sb->id = NewId(options_.node_id.empty() ? "sb_" : "sb_" + options_.node_id + "_");
  sb->tenant = std::move(req.tenant);
  sb->template_name = tmpl.name;
  sb->template_env = tmpl.env;
  sb->env = std::move(req.env);
  sb->cwd = !req.cwd.empty()            ? std::move(req.cwd)
            : !tmpl.working_dir.empty() ? tmpl.working_dir
                                        : "/workspace";
  sb->limits = plan.limits;
  sb->network = plan.network;
  sb->egress = std::move(req.egress);
  sb->volumes = plan.volumes;
  sb->allow_nested_userns = req.allow_nested_userns;
  sb->auto_resume = req.auto_resume;
  sb->auto_pause = req.auto_pause;
  sb->pause_on_timeout = req.pause_on_timeout;
  sb->metadata = std::move(req.metadata);
  sb->created_at = SystemNow();
  sb->ttl_seconds = req.ttl_seconds.value_or(options_.sandbox_default_ttl_seconds);
  if (sb->ttl_seconds > 0) sb->expires_at = sb->created_at + std::chrono::seconds(sb->ttl_seconds);
  sb->ttl_period = sb->ttl_seconds;
  sb->journal = std::make_shared<EventLog>(LogLimits{1u << 20, options_.journal_entries});
  return sb;
}

sandbox::SandboxSpec Service::SpecFor(const SandboxEntry& sb, const Template* tmpl) const {
  sandbox::SandboxSpec spec;
  spec.id = sb.id;
  spec.template_name = sb.template_name;
  // Without its template (a restart finds it gone, its directory removed by hand) the sandbox
  // runs on what it had, and a fresh one is base.
  if (tmpl) {
    spec.layers = template_service_.templates().LayerPaths(*tmpl);
    spec.host_base = tmpl->root == "base";
    spec.user_uid = tmpl->uid;
    spec.user_gid = tmpl->gid;
  }
  spec.limits = sb.limits;
  spec.network = sb.network;
  spec.egress = sb.egress;
  spec.allow_nested_userns = sb.allow_nested_userns;
  for (const SandboxVolume& v : sb.volumes) {
    const Volume* volume = volumes_.Find(sb.tenant, true, v.id);
    auto root = volume ? volumes_.Root(*volume) : Result<std::string>(std::string());
    // Gone, or not mounted (a sandbox made again at a start that could not mount it): its path
    // is a directory of the sandbox's own, never the host's directory under it.
    if (!volume || !root) continue;
    spec.volumes.push_back({*root, v.path, v.read_only});
  }
  return spec;
}

SandboxEntry* Service::Register(std::unique_ptr<SandboxEntry> sb) {
  PrepareTemplate(options_, *sb);
  SandboxEntry* raw = sb.get();
  quotas_.Hold(raw->tenant, raw->limits);
  // Taken back paused: its disk counts, not its memory or CPU.
  if (raw->paused) quotas_.Pause(raw->tenant, raw->limits);
  sandboxes_.emplace(raw->id, std::move(sb));
  order_.push_back(raw->id);
  return raw;
}

asio::awaitable<Result<const SandboxEntry*>> Service::CreateSandbox(SandboxRequest req) {
  auto plan = Validate(req);
  if (!plan) co_return std::move(plan).error();
  if (plan->tmpl && !plan->tmpl->checkpoint.empty() && !req.memory) {
    auto image = MemoryOf(*plan->tmpl);
    if (!image) co_return std::move(image).error();
    req.memory = std::move(*image);
  }
  const std::string by = req.by;
  const std::shared_ptr<const MemoryImage> memory = req.memory;
  std::unique_ptr<SandboxEntry> sb = Build(std::move(req), *plan);
  sandbox::SandboxSpec spec = SpecFor(*sb, plan->tmpl);
  if (memory) spec.checkpoint = memory->dir;
  // Counted against its tenant's quotas (and the node's room) while it is made.
  auto reservation = quotas_.Reserve(sb->tenant, sb->limits);
  if (!reservation) co_return std::move(reservation).error();
  // Its volumes stay while it is made; once registered, it holds them itself.
  for (const SandboxVolume& v : sb->volumes) volumes_.Pin(v.id);
  const std::vector<SandboxVolume> pinned = sb->volumes;
  const auto unpin = [this, &pinned] {
    for (const SandboxVolume& v : pinned) volumes_.Unpin(v.id);
  };
  // In a cluster the tenant's quotas count its sandboxes on every node: this one is counted
  // there before it is made, and given back if it is not.
  SharedTenants* shared = quotas_.SharedFor(sb->tenant);
  if (shared) {
    const Tenant* t = quotas_.TenantOf(sb->tenant);
    std::optional<Quotas> quotas = t ? t->quotas : Quotas{};
    auto committed = co_await shared->Commit(sb->tenant, quotas);
    if (!committed) {
      quotas_.Unreserve(*reservation);
      shared->Changed(sb->tenant);
      unpin();
      co_return std::move(committed).error();
    }
  }
  Result<std::unique_ptr<sandbox::Sandbox>> runtime = co_await Await(runtime_.Create(spec));
  quotas_.Unreserve(*reservation);
  unpin();
  // Every way out from here without the sandbox gives its share back (said at each, not by a
  // destructor: one would run as the loop is torn down, after what it reaches is gone).
  if (!runtime) {
    log::Warn("sandbox setup failed", {{"sandbox", sb->id}, {"error", runtime.error().message}});
    if (shared) shared->Changed(sb->tenant);
    co_return std::move(runtime).error();
  }
  if (shutting_down_) {
    (void)co_await Await((*runtime)->Destroy());
    if (shared) shared->Changed(sb->tenant);
    co_return Error{ErrorCode::kShuttingDown, "sandstreamd is shutting down"};
  }
  sb->runtime = std::move(*runtime);
  if (auto resolving = StartResolver(*sb); !resolving) {
    (void)co_await Await(sb->runtime->Destroy());
    if (shared) shared->Changed(sb->tenant);
    co_return std::move(resolving).error();
  }
  SandboxEntry* raw = Register(std::move(sb));
  if (memory) {
    // What ran in the sandbox it was made from runs here: the records of that sandbox's
    // processes and code contexts, as this one's.
    const auto as_ours = [&raw](const std::vector<std::string>& rows,
                                std::vector<std::string>& into) {
      for (const std::string& row : rows) {
        json::value v = json::parse(row);  // the service's own records
        v.as_object()["sandbox_id"] = raw->id;
        into.push_back(json::serialize(v));
      }
    };
    as_ours(memory->processes, raw->checkpointed_processes);
    as_ours(memory->contexts, raw->checkpointed_contexts);
    TakeBackRestored(*raw);
  }
  WatchLife(*raw);
  ++metrics_.sandboxes_created_total;
  Journal(*raw, "sandbox.created", "info",
          memory ? "sandbox forked from " + memory->source + " with its running processes"
                 : "sandbox created from template " + raw->template_name,
          {{"sandbox_id", raw->id},
           {"template", raw->template_name},
           {"tenant", raw->tenant.empty() ? json::value(nullptr) : json::value(raw->tenant)},
           {"by", by}});
  ArmTtl(*raw);
  raw->last_active = SteadyNow();  // idle (auto_pause) counts from its creation
  WatchIdleOf(*raw);
  Persist(*raw);
  // Its processes' records after its own, which they refer to.
  for (const auto& p : raw->processes) PersistProcess(*raw, *p);
  log::Info("sandbox created", {{"sandbox", raw->id}, {"template", raw->template_name}});
  co_return raw;
}

SandboxRequest Service::ForkRequest(const SandboxEntry& sb, std::string by) const {
  SandboxRequest req;
  req.template_name = sb.template_name;
  req.env = sb.env;
  req.cwd = sb.cwd;
  if (sb.ttl_seconds > 0) req.ttl_seconds = sb.ttl_seconds;
  for (const auto& lf : kLimitFields) req.limits[lf.name] = sb.limits.*(lf.field);
  req.network = sandbox::NetworkModeName(sb.network);
  req.egress = sb.egress;
  req.volumes = sb.volumes;
  for (SandboxVolume& v : req.volumes) v.name = v.id;
  req.allow_nested_userns = sb.allow_nested_userns;
  req.metadata = sb.metadata;
  req.auto_resume = sb.auto_resume;
  req.auto_pause = sb.auto_pause;
  req.pause_on_timeout = sb.pause_on_timeout;
  req.tenant = sb.tenant;
  req.by = std::move(by);
  return req;
}

asio::awaitable<Result<const Template*>> Service::SnapshotSandbox(std::string sandbox_id,
                                                                  std::string name, bool memory) {
  if (shutting_down_) co_return Error{ErrorCode::kShuttingDown, "sandstreamd is shutting down"};
  if (memory) co_return co_await MemorySnapshot(std::move(sandbox_id), std::move(name));
  SandboxEntry* sb = Entry(sandbox_id);
  if (!sb) co_return Error{ErrorCode::kNotFound, "no sandbox " + sandbox_id};
  if (auto live = CheckLive(*sb); !live) co_return std::move(live).error();
  // The writable layer is opened now, through PID 1's fd while the sandbox is live (its pid is
  // its own until the daemon reaps it): the copy runs later, on the tenant's image queue, when
  // that pid may name another sandbox's PID 1. This frame holds the fd, and with it the layer,
  // until the copy is done.
  UniqueFd layer;
  if (const std::string path = sb->runtime->WritableLayer(); !path.empty()) {
    layer = UniqueFd(::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!layer && (errno == ENOENT || errno == ENOTDIR)) {
      co_return Error{ErrorCode::kConflict,
                      "snapshot: sandbox " + sandbox_id +
                          " keeps no writable layer the daemon can read (a sandbox made by an "
                          "older sandstreamd); snapshot a sandbox made since"};
    }
    if (!layer) co_return SysError(ErrorCode::kInternal, "snapshot: open " + path, errno);
  }
  // A snapshot holds at most what the sandbox's disk does, its sparse files at their full size:
  // what it costs to hash, and what a sandbox made from it reads.
  TemplateService::SnapshotSource from{
      sb->id,
      sb->template_name,
      sb->tenant,
      layer ? "/proc/self/fd/" + std::to_string(layer.get()) : std::string(),
      sb->runtime->HostId(0),
      static_cast<uint64_t>(std::max<int64_t>(sb->limits.disk_mb, 0)) << 20};
  Result<const Template*> made = co_await template_service_.Snapshot(name, std::move(from));
  if (made) {
    Audit(sandbox_id, "sandbox.snapshot", "snapshot taken as template " + name,
          {{"template", name}});
  }
  co_return made;
}

asio::awaitable<Result<const Volume*>> Service::CreateVolume(std::string name, std::string tenant,
                                                             std::optional<int64_t> size_mb) {
  if (shutting_down_) co_return Error{ErrorCode::kShuttingDown, "sandstreamd is shutting down"};
  const int64_t size = size_mb.value_or(options_.volume_default_mb);
  if (size < Volumes::kMinSizeMb || size > options_.volume_max_mb) {
    co_return Error{ErrorCode::kInvalidRequest,
                    "size_mb must be between " + std::to_string(Volumes::kMinSizeMb) + " and " +
                        std::to_string(options_.volume_max_mb) + " (volume_max_mb)"};
  }
  co_return co_await volumes_.Create(std::move(name), std::move(tenant), size);
}

std::vector<std::string> Service::VolumeUsers(std::string_view id) const {
  std::vector<std::string> users;
  for (const auto& sandbox_id : order_) {
    const SandboxEntry& sb = *sandboxes_.at(sandbox_id);
    for (const SandboxVolume& v : sb.volumes) {
      if (v.id == id) {
        users.push_back(sandbox_id);
        break;
      }
    }
  }
  return users;
}

asio::awaitable<Result<void>> Service::DeleteVolume(std::string id) {
  const std::vector<std::string> users = VolumeUsers(id);
  std::string used_by;
  if (!users.empty()) used_by = users.front();
  co_return co_await volumes_.Delete(std::move(id), std::move(used_by));
}

asio::awaitable<Result<void>> Service::DeleteTemplate(std::string name) {
  std::string used_by;
  for (const auto& [id, sb] : sandboxes_) {
    if (sb->template_name == name) {
      used_by = id;
      break;
    }
  }
  co_return co_await template_service_.Delete(std::move(name), std::move(used_by));
}

void Service::WatchLife(const SandboxEntry& sb) {
  const int fd = sb.runtime->LifeFd();
  if (fd < 0) return;
  // A copy of its own: the sandbox closes its fd when it is destroyed.
  UniqueFd life(::fcntl(fd, F_DUPFD_CLOEXEC, 3));
  if (!life) return;
  asio::co_spawn(ex_, AwaitDeath(sb.id, std::move(life)), [id = sb.id](std::exception_ptr e) {
    if (e) log::Error("sandbox watch failed", {{"sandbox", id}});
  });
}

asio::awaitable<void> Service::AwaitDeath(std::string id, UniqueFd life) {
  const sandbox::WaitFor forever{life.get(), sandbox::Deadline::max()};
  for (;;) {
    const bool dead = co_await AwaitReadable(forever);
    SandboxEntry* sb = Entry(id);
    if (!sb || sb->deleting || shutting_down_) co_return;
    // Checkpointed, its PID 1 ended on purpose; a restore watches the new one.
    if (sb->runtime->Checkpointed() || sb->transition == SandboxEntry::Transition::kPausing) {
      co_return;
    }
    if (dead) break;
  }
  if (SandboxEntry* sb = Entry(id)) OnLost(*sb);
}

void Service::OnLost(SandboxEntry& sb) {
  sb.lost = sb.runtime->LostCause();
  log::Warn("sandbox lost", {{"sandbox", sb.id}, {"cause", *sb.lost}});
  // The kernel ends every process of its pid namespace: their exits come as usual, and say
  // they were killed.
  for (auto& p : sb.processes) p->SandboxLost();
  Journal(sb, "sandbox.lost", "error",
          "the sandbox ended under the daemon: " + *sb.lost + "; delete it and create another",
          {{"cause", *sb.lost}});
  Persist(sb);
}

Result<void> Service::SetTimeout(std::string_view id, int64_t seconds, bool extend_only) {
  SandboxEntry* sb = Entry(id);
  if (!sb || sb->deleting) {
    return Error{ErrorCode::kNotFound, "no sandbox '" + std::string(id) + "'"};
  }
  const SystemTime end = SystemNow() + std::chrono::seconds(seconds);
  if (extend_only && (!sb->expires_at || *sb->expires_at >= end)) return {};
  // Whole seconds from creation, rounded up: a restart computes the end the same way.
  const auto since = std::chrono::duration_cast<std::chrono::milliseconds>(end - sb->created_at);
  sb->ttl_seconds = std::max<int64_t>(1, (since.count() + 999) / 1000);
  sb->ttl_period = seconds;
  sb->expires_at = sb->created_at + std::chrono::seconds(sb->ttl_seconds);
  ArmTtl(*sb);
  Journal(*sb, "sandbox.timeout", "info",
          "the sandbox now ends at " + FormatRfc3339(*sb->expires_at),
          {{"expires_at", FormatRfc3339(*sb->expires_at)}, {"ttl_seconds", sb->ttl_seconds}});
  Persist(*sb);
  return {};
}

void Service::ArmTtl(SandboxEntry& sb) {
  if (sb.ttl_timer) sb.ttl_timer->cancel();
  // A paused sandbox's own TTL stops; it is deleted once paused_ttl has passed.
  const std::optional<SystemTime> end = EndsAt(sb);
  if (!end) return;
  sb.ttl_timer = std::make_unique<Timer>(ex_);
  const auto left = *end - SystemNow();
  sb.ttl_timer->expires_after(std::chrono::duration_cast<SteadyClock::duration>(
      std::max(left, SystemTime::duration::zero())));
  sb.ttl_timer->async_wait([this, id = sb.id](const boost::system::error_code& ec) {
    if (ec) return;
    Spawn(ex_, OnTtl(id), "TTL of " + id);
  });
}

SandboxEntry* Service::Entry(std::string_view id) {
  auto it = sandboxes_.find(id);
  return it == sandboxes_.end() ? nullptr : it->second.get();
}

const SandboxEntry* Service::Find(std::string_view id) const {
  auto it = sandboxes_.find(id);
  return it == sandboxes_.end() ? nullptr : it->second.get();
}

std::vector<const SandboxEntry*> Service::List() const {
  std::vector<const SandboxEntry*> out;
  for (const auto& id : order_) {
    if (const SandboxEntry* sb = Find(id)) out.push_back(sb);
  }
  return out;
}

TenantUsage Service::Usage(std::string_view tenant) const {
  TenantUsage u = quotas_.Usage(tenant);
  for (const auto& [id, sb] : sandboxes_) {
    if (sb->tenant == tenant) {
      u.running_processes += static_cast<int64_t>(sb->RunningProcesses() + sb->spawning);
    }
  }
  return u;
}

Result<bool> Service::ExposePort(std::string_view sandbox_id, uint16_t port) {
  SandboxEntry* sb = Entry(sandbox_id);
  if (!sb) return Error{ErrorCode::kNotFound, "no sandbox '" + std::string(sandbox_id) + "'"};
  if (auto live = CheckLive(*sb); !live) return std::move(live).error();
  if (sb->ports.contains(port)) return false;
  if (sb->ports.size() >= kMaxPorts) {
    return Error{ErrorCode::kQuotaExceeded,
                 "sandbox " + sb->id + " has " + std::to_string(kMaxPorts) + " ports exposed"};
  }
  sb->ports[port] = SystemNow();
  Persist(*sb);
  Journal(*sb, "port.exposed", "info", "port " + std::to_string(port) + " exposed",
          {{"port", port}});
  return true;
}

Result<void> Service::UnexposePort(std::string_view sandbox_id, uint16_t port) {
  SandboxEntry* sb = Entry(sandbox_id);
  if (!sb) return Error{ErrorCode::kNotFound, "no sandbox '" + std::string(sandbox_id) + "'"};
  if (sb->ports.erase(port) == 0) {
    return Error{ErrorCode::kNotFound,
                 "port " + std::to_string(port) + " of sandbox " + sb->id + " is not exposed"};
  }
  Persist(*sb);
  Journal(*sb, "port.closed", "info", "port " + std::to_string(port) + " no longer exposed",
          {{"port", port}});
  return Ok{};
}

Result<UniqueFd> Service::PortSocket(std::string_view sandbox_id, uint16_t port) {
  SandboxEntry* sb = Entry(sandbox_id);
  if (!sb) return Error{ErrorCode::kNotFound, "no sandbox '" + std::string(sandbox_id) + "'"};
  if (!sb->ports.contains(port)) {
    return Error{ErrorCode::kNotFound, "port " + std::to_string(port) + " of sandbox " + sb->id +
                                           " is not exposed (POST /v1/sandboxes/" + sb->id +
                                           "/ports {\"port\": " + std::to_string(port) + "})"};
  }
  return SandboxSocket(sandbox_id);
}

Result<UniqueFd> Service::SandboxSocket(std::string_view sandbox_id) {
  SandboxEntry* sb = Entry(sandbox_id);
  if (!sb) return Error{ErrorCode::kNotFound, "no sandbox '" + std::string(sandbox_id) + "'"};
  if (auto live = CheckLive(*sb); !live) return std::move(live).error();
  return sb->runtime->Socket();
}

Result<sandbox::SandboxFs> Service::Files(std::string_view sandbox_id, uint32_t uid) {
  SandboxEntry* sb = Entry(sandbox_id);
  if (!sb) return Error{ErrorCode::kNotFound, "no sandbox '" + std::string(sandbox_id) + "'"};
  return sandbox::SandboxFs::Open(sb->runtime->RootPath(), sb->runtime->HostId(uid));
}

asio::awaitable<Result<std::optional<sandbox::FileWriter>>> Service::StartFileWriter(
    std::string sandbox_id, int file) {
  SandboxEntry* sb = Entry(sandbox_id);
  if (!sb) co_return BeingDeleted(sandbox_id);
  // A lost sandbox has no keeper to start one: its files are only there to be looked at.
  if (sb->lost) co_return std::optional<sandbox::FileWriter>();
  Result<std::optional<sandbox::FileWriter>> writer = BeingDeleted(sandbox_id);
  {
    // The entry stays while the turn is held or awaited: deletion waits for it.
    SandboxTurn turn(*sb);
    co_await turn.Take();
    if (!sb->deleting && !shutting_down_) {
      if (auto awake = co_await WakeHeld(*sb); !awake) {
        writer = std::move(awake).error();
      } else {
        writer = co_await Await(sb->runtime->StartFileWriter(file));
      }
    }
  }
  // At its pids limit the sandbox has no room for a writer; the daemon writes, still within the
  // sandbox's disk limit.
  if (!writer && writer.error().code == ErrorCode::kQuotaExceeded) {
    co_return std::optional<sandbox::FileWriter>();
  }
  co_return writer;
}

void Service::ForgetFileWriter(std::string_view sandbox_id, pid_t pid) {
  if (SandboxEntry* sb = Entry(sandbox_id)) sb->runtime->Forget(pid);
}

asio::awaitable<Result<void>> Service::DeleteSandbox(std::string id) {
  SandboxEntry* sb = Entry(id);
  if (!sb) co_return Error{ErrorCode::kNotFound, "no sandbox '" + id + "'"};
  if (sb->deleting) co_return Ok{};
  sb->deleting = true;
  if (sb->ttl_timer) sb->ttl_timer->cancel();
  if (sb->idle_watch) sb->idle_watch->Notify();  // it ends its watch
  Journal(*sb, "sandbox.deleting", "info", "sandbox is being deleted");
  // A daemon that dies from here on finishes the deletion at its next start.
  Persist(*sb);
  // A spawn in flight ends within its deadlines; its process is then killed with the rest.
  while (sb->spawning > 0) {
    co_await sb->spawns_done.Wait();
    sb = Entry(id);
    if (!sb) co_return Ok{};
  }
  // A paused sandbox runs again to be killed: a frozen process takes no signal (the v1
  // freezer holds even SIGKILL until it thaws).
  bool frozen = false;
  if (sb->paused) {
    if (auto thawed = sb->runtime->Thaw(); !thawed) {
      frozen = true;
      log::Warn(
          "thawing a paused sandbox to delete it failed: its processes are killed without "
          "waiting for them",
          {{"sandbox", id}, {"error", thawed.error().message}});
    }
    sb->paused.reset();
    (void)quotas_.Unpause(sb->tenant, sb->limits, false);  // Free releases them with the rest
  }
  // Holding the processes keeps them alive while we wait, whatever the table does meanwhile.
  auto processes = sb->processes;
  if (frozen) {
    // Their exits may never come: the sandbox's destruction below ends what it can.
    for (auto& p : processes) p->KillNow(ExitReason::kKilled);
  } else {
    for (auto& p : processes) p->Kill(ExitReason::kKilled);
    for (auto& p : processes) {
      // Bounded: after the grace period Kill() escalates to SIGKILL of the group.
      co_await p->WaitExit();
    }
  }
  sb = Entry(id);
  if (!sb) co_return Ok{};
  (void)co_await Await(sb->runtime->KillAll());
  sb = Entry(id);
  if (!sb) co_return Ok{};
  if (sb->resolver) sb->resolver->Stop();
  Result<void> destroyed = co_await Await(sb->runtime->Destroy());
  sb = Entry(id);
  if (!sb) co_return Ok{};
  Journal(*sb, "sandbox.deleted", "info", "sandbox deleted");
  sb->journal->End();
  if (options_.access) options_.access->ForgetSandbox(id);
  if (auto r = store_.DeleteSandbox(id); !r) {
    log::Error("deleting sandbox row failed", {{"sandbox", id}, {"error", r.error().message}});
  }
  Free(id);
  log::Info("sandbox deleted", {{"sandbox", id}});
  if (!destroyed) co_return std::move(destroyed).error();
  co_return Ok{};
}

size_t Service::egress_sandboxes() const {
  return static_cast<size_t>(std::count_if(sandboxes_.begin(), sandboxes_.end(), [](const auto& e) {
    return e.second->egress.has_value();
  }));
}

asio::awaitable<Result<const SandboxEntry*>> Service::UpdateEgress(std::string id,
                                                                   net::EgressPolicy policy,
                                                                   std::string by) {
  SandboxEntry* sb = Entry(id);
  if (!sb) co_return Error{ErrorCode::kNotFound, "no sandbox '" + id + "'"};
  if (auto live = CheckLive(*sb); !live) co_return std::move(live).error();
  // The sandbox's turn, held until its table has changed: a delete waits for it, so its slot
  // (and table) cannot pass to another sandbox under the update.
  SandboxTurn turn(*sb);
  co_await turn.Take();
  if (auto live = CheckLive(*sb); !live) co_return std::move(live).error();
  const auto addresses = sb->egress && options_.egress && sb->runtime
                             ? sb->runtime->Egress()
                             : std::optional<sandbox::EgressAddresses>();
  if (!addresses) {
    co_return Error{ErrorCode::kConflict,
                    "sandbox " + id +
                        " was made without egress: a sandbox's network mode is set at create "
                        "(network \"egress\"), only its rules can change"};
  }
  // The resolver first: a pin it asks for from now on is of the new rules, and one asked for
  // before runs ahead of the table's change on the same pool, which drops it.
  if (sb->resolver) sb->resolver->SetPolicy(policy);
  sb->egress = policy;
  Persist(*sb);
  auto egress = options_.egress;
  const uint32_t slot = addresses->slot;
  // A named lambda, moved in, as everywhere with OffThread: GCC 12 destroys a lambda
  // temporary's captures twice when it is an argument of a co_await.
  auto apply = [egress, slot, rules = *sb->egress] { return egress->Update(slot, rules); };
  Result<void> applied = co_await OffThread(net_pool_, std::move(apply));
  sb = Entry(id);
  if (!applied) {
    if (sb) {
      Journal(*sb, "sandbox.network_update_failed", "error",
              "the new egress rules could not be applied: " + applied.error().message,
              {{"by", by}});
    }
    co_return Error{applied.error().code, "network update: " + applied.error().message};
  }
  if (!sb) co_return Error{ErrorCode::kNotFound, "no sandbox '" + id + "'"};
  Journal(*sb, "sandbox.network_updated", "info",
          "egress rules changed: its connections go on only where the new rules allow",
          {{"by", by}});
  co_return sb;
}

Result<void> Service::StartResolver(SandboxEntry& sb) {
  if (!sb.egress || !options_.egress) return Ok{};
  const auto addresses = sb.runtime->Egress();
  if (!addresses) return Error{ErrorCode::kSandboxSetupFailed, "net: no egress addresses"};
  SandboxResolver::Options o{options_.egress, options_.dns_upstreams, &net_pool_, &metrics_};
  auto resolver = SandboxResolver::Start(ex_, std::move(o), sb.id, addresses->slot,
                                         addresses->gateway, *sb.egress);
  if (!resolver) return std::move(resolver).error();
  sb.resolver = std::move(*resolver);
  return Ok{};
}

void Service::Free(const std::string& id) {
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return;
  const std::string tenant = it->second->tenant;
  quotas_.Release(tenant, it->second->limits);
  std::erase(order_, id);
  sandboxes_.erase(it);
  if (SharedTenants* shared = quotas_.SharedFor(tenant)) shared->Changed(tenant);
}

asio::awaitable<void> Service::Shutdown() {
  shutting_down_ = true;
  template_service_.Stop();
  resources_.Stop();
  std::vector<std::string> ids;
  for (auto& [id, sb] : sandboxes_) ids.push_back(id);
  // A spawn in flight finishes first, so that its process is recorded (or ended).
  for (const auto& id : ids) {
    SandboxEntry* sb = Entry(id);
    while (sb && sb->spawning > 0) {
      co_await sb->spawns_done.Wait();
      sb = Entry(id);
    }
  }
  if (!options_.teardown_on_exit) {
    // Sandboxes and their processes run on; the next start takes them back (Restore). What the
    // records say of each running process is written now, so it resumes where it is.
    for (const auto& id : ids) {
      SandboxEntry* sb = Entry(id);
      if (!sb) continue;
      for (auto& p : sb->processes) {
        if (p->status() == ProcessStatus::kRunning) PersistProcess(*sb, *p);
      }
      Persist(*sb);
      if (sb->resolver) sb->resolver->Stop();
      if (sb->runtime) sb->runtime->Release();
    }
    // Each sandbox mounts its volumes itself: they stay theirs, and the next start mounts
    // the daemon's again.
    volumes_.UnmountAll();
    co_return;
  }
  std::vector<std::shared_ptr<Process>> running;
  for (auto& [id, sb] : sandboxes_) {
    if (sb->paused && sb->runtime) (void)sb->runtime->Thaw();  // to take its signals
    for (auto& p : sb->processes) {
      if (p->status() == ProcessStatus::kRunning) {
        p->Kill(ExitReason::kKilled);
        running.push_back(p);
      }
    }
  }
  // Bounded by the kill grace: Kill() escalates to SIGKILL of each group.
  for (auto& p : running) co_await p->WaitExit();
  for (const auto& id : ids) {
    SandboxEntry* sb = Entry(id);
    if (!sb) continue;
    (void)co_await Await(sb->runtime->KillAll());
    // Sandboxes stay in the store: they come back, with fresh filesystems and reported lost, at
    // the next start.
    if (!(sb = Entry(id))) continue;
    if (sb->resolver) sb->resolver->Stop();
    (void)co_await Await(sb->runtime->Destroy());
  }
  volumes_.UnmountAll();
}

}  // namespace sandstream
