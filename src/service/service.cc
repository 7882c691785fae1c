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

// The image store; one that cannot be opened (its directory) leaves the daemon without image
// templates, said at each import, rather than without a start.
std::unique_ptr<image::Store> OpenImages(const ServiceOptions& options) {
  auto images = image::Store::Open(options.images_dir, options.image_limits);
  if (images) return std::move(*images);
  log::Error("image store unavailable", {{"error", images.error().message}});
  return nullptr;
}

}  // namespace

Service::Service(asio::any_io_executor ex, sandbox::Runtime& runtime, Store& store,
                 ServiceOptions options)
    : ex_(std::move(ex)),
      runtime_(runtime),
      store_(store),
      options_(std::move(options)),
      templates_(options_.templates_dir, OpenImages(options_), store_) {
  templates_.Load();
  // What an earlier daemon left half made (an import it died in) or no template names.
  image_work_.Post(ImageWork::kCollections, [this] {
    if (auto collected = templates_.Collect(); !collected) {
      log::Warn("collecting image layers failed", {{"error", collected.error().message}});
    }
  });
}

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
  if (auto r = store_.PutSandbox(sb.id, json::serialize(record)); !r) {
    log::Error("persisting sandbox failed", {{"sandbox", sb.id}, {"error", r.error().message}});
  }
}

void Service::PersistProcess(const SandboxEntry& sb, const Process& p) {
  const std::string record = json::serialize(StoredProcessJson(p, options_.retained_tail_bytes));
  if (auto r = store_.PutProcess(sb.id, p.id(), record); !r) {
    log::Error("persisting process failed", {{"process", p.id()}, {"error", r.error().message}});
  }
}

asio::awaitable<Result<const SandboxEntry*>> Service::CreateSandbox(SandboxRequest req) {
  if (shutting_down_) co_return Error{ErrorCode::kShuttingDown, "sandstreamd is shutting down"};
  if (sandboxes_.size() + creating_ >= options_.max_sandboxes) {
    // Not the caller's quota but this daemon's room: 503, and a gateway tries another node.
    co_return Error{ErrorCode::kUnavailable, "sandbox limit reached (" +
                                                 std::to_string(options_.max_sandboxes) +
                                                 "): this node is full"};
  }
  std::string template_name = req.template_name;
  const bool admin = req.by == "admin";
  const Template* tmpl = templates_.Find(template_name);
  if (!tmpl || !tmpl->ready || !MayUseTemplate(*tmpl, req.tenant, admin)) {
    std::string known;
    for (const Template* t : templates_.List()) {
      if (t->ready && MayUseTemplate(*t, req.tenant, admin)) {
        known += (known.empty() ? "" : ", ") + t->name;
      }
    }
    co_return Error{ErrorCode::kInvalidRequest,
                    "unknown template '" + template_name + "' (known: " + known + ")"};
  }
  sandbox::Limits limits = options_.default_limits;
  for (const auto& [name, value] : req.limits) {
    const LimitField* f = nullptr;
    for (const auto& lf : kLimitFields) {
      if (name == lf.name) f = &lf;
    }
    if (!f) co_return Error{ErrorCode::kInvalidRequest, "unknown limit '" + name + "'"};
    const int64_t max = options_.max_limits.*(f->field);
    if (value <= 0 || value > max) {
      co_return Error{ErrorCode::kInvalidRequest,
                      "limits." + name + " must be between 1 and " + std::to_string(max)};
    }
    limits.*(f->field) = value;
  }
  if (req.network != "loopback" && req.network != "none" && req.network != "egress") {
    co_return Error{ErrorCode::kInvalidRequest,
                    "network must be \"loopback\" (the default), \"none\" or \"egress\""};
  }
  if (req.network == "egress" && !options_.egress) {
    co_return Error{ErrorCode::kInvalidRequest,
                    "network: egress is off in this daemon's configuration (egress_pool)"};
  }
  if (req.allow_nested_userns && !options_.allow_nested_userns) {
    co_return Error{ErrorCode::kInvalidRequest,
                    "allow_nested_userns is not granted by this daemon's configuration "
                    "(the operator's allow_nested_userns setting)"};
  }

  auto sb = std::make_unique<SandboxEntry>(ex_);
  sb->id = NewId(options_.node_id.empty() ? "sb_" : "sb_" + options_.node_id + "_");
  sb->tenant = req.tenant;
  sb->template_name = template_name;
  sb->template_env = tmpl->env;
  sb->env = std::move(req.env);
  sb->cwd = !req.cwd.empty()             ? req.cwd
            : !tmpl->working_dir.empty() ? tmpl->working_dir
                                         : "/workspace";
  sb->limits = limits;
  sb->network = req.network;
  sb->egress = std::move(req.egress);
  sb->allow_nested_userns = req.allow_nested_userns;
  sb->metadata = std::move(req.metadata);
  sb->created_at = SystemNow();
  sb->ttl_seconds = req.ttl_seconds.value_or(options_.sandbox_default_ttl_seconds);
  if (sb->ttl_seconds > 0) sb->expires_at = sb->created_at + std::chrono::seconds(sb->ttl_seconds);
  sb->journal = std::make_shared<EventLog>(LogLimits{1u << 20, options_.journal_entries});

  sandbox::SandboxSpec spec;
  spec.id = sb->id;
  spec.template_name = template_name;
  spec.layers = templates_.LayerPaths(*tmpl);
  spec.user_uid = tmpl->uid;
  spec.user_gid = tmpl->gid;
  spec.limits = limits;
  spec.network = sb->network;
  spec.egress = sb->egress;
  spec.allow_nested_userns = sb->allow_nested_userns;
  if (auto quotas = CheckCreateQuotas(sb->tenant, limits); !quotas)
    co_return std::move(quotas).error();
  ++creating_;
  const auto creating = creating_by_tenant_.emplace(sb->tenant, limits);
  // In a cluster the tenant's quotas count its sandboxes on every node: this one is counted
  // there before it is made, and given back if it is not.
  SharedTenants* shared = SharedFor(sb->tenant);
  if (shared) {
    const Tenant* t = TenantOf(sb->tenant);
    std::optional<Quotas> quotas = t ? t->quotas : Quotas{};
    auto committed = co_await shared->Commit(sb->tenant, quotas);
    if (!committed) {
      creating_by_tenant_.erase(creating);
      --creating_;
      shared->Changed(sb->tenant);
      co_return std::move(committed).error();
    }
  }
  Result<std::unique_ptr<sandbox::Sandbox>> runtime = co_await Await(runtime_.Create(spec));
  creating_by_tenant_.erase(creating);
  --creating_;
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
  PrepareTemplate(options_, *sb);
  SandboxEntry* raw = sb.get();
  sandboxes_.emplace(sb->id, std::move(sb));
  order_.push_back(raw->id);
  WatchLife(*raw);
  ++metrics_.sandboxes_created_total;
  Journal(*raw, "sandbox.created", "info", "sandbox created from template " + template_name,
          {{"sandbox_id", raw->id},
           {"template", template_name},
           {"tenant", raw->tenant.empty() ? json::value(nullptr) : json::value(raw->tenant)},
           {"by", req.by}});
  ArmTtl(*raw);
  Persist(*raw);
  log::Info("sandbox created", {{"sandbox", raw->id}, {"template", template_name}});
  co_return raw;
}

asio::awaitable<Result<const SandboxEntry*>> Service::ForkSandbox(std::string sandbox_id,
                                                                  std::string name,
                                                                  std::string by) {
  const SandboxEntry* sb = Find(sandbox_id);
  if (!sb) co_return Error{ErrorCode::kNotFound, "no sandbox " + sandbox_id};
  // Its settings now: the sandbox may change or go while the snapshot is taken.
  SandboxRequest req;
  req.template_name = name;
  req.env = sb->env;
  req.cwd = sb->cwd;
  if (sb->ttl_seconds > 0) req.ttl_seconds = sb->ttl_seconds;
  for (const auto& lf : kLimitFields) req.limits[lf.name] = sb->limits.*(lf.field);
  req.network = sb->network;
  req.egress = sb->egress;
  req.allow_nested_userns = sb->allow_nested_userns;
  req.metadata = sb->metadata;
  req.tenant = sb->tenant;
  req.by = std::move(by);
  auto made = co_await SnapshotSandbox(std::move(sandbox_id), name);
  if (!made) co_return std::move(made).error();
  Result<const SandboxEntry*> fork = co_await CreateSandbox(std::move(req));
  // Nothing half made: without its sandbox the snapshot goes too.
  if (!fork) (void)co_await DeleteTemplate(std::move(name));
  co_return fork;
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
  sb->expires_at = sb->created_at + std::chrono::seconds(sb->ttl_seconds);
  ArmTtl(*sb);
  Journal(*sb, "sandbox.timeout", "info",
          "the sandbox now ends at " + FormatRfc3339(*sb->expires_at),
          {{"expires_at", FormatRfc3339(*sb->expires_at)}, {"ttl_seconds", sb->ttl_seconds}});
  Persist(*sb);
  return {};
}

void Service::ArmTtl(SandboxEntry& sb) {
  if (!sb.expires_at) return;
  sb.ttl_timer = std::make_unique<Timer>(ex_);
  const auto left = *sb.expires_at - SystemNow();
  sb.ttl_timer->expires_after(std::chrono::duration_cast<SteadyClock::duration>(
      std::max(left, SystemTime::duration::zero())));
  sb.ttl_timer->async_wait([this, id = sb.id](const boost::system::error_code& ec) {
    if (ec) return;
    log::Info("sandbox TTL passed", {{"sandbox", id}});
    asio::co_spawn(ex_, DeleteSandbox(id), [](std::exception_ptr, const Result<void>&) {});
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

void Service::StreamOpened(const std::string& tenant) {
  if (!tenant.empty()) ++streams_[tenant];
}

void Service::StreamClosed(const std::string& tenant) {
  if (tenant.empty()) return;
  auto it = streams_.find(tenant);
  if (it != streams_.end() && --it->second <= 0) streams_.erase(it);
}

const Tenant* Service::TenantOf(std::string_view tenant) const {
  if (tenant.empty() || !options_.access) return nullptr;
  return options_.access->FindTenant(tenant);
}

TenantUsage Service::Usage(std::string_view tenant) const {
  TenantUsage u;
  for (const auto& [id, sb] : sandboxes_) {
    if (sb->tenant != tenant) continue;
    ++u.sandboxes;
    u.running_processes += static_cast<int64_t>(sb->RunningProcesses() + sb->spawning);
    u.memory_mb += sb->limits.memory_mb;
    u.cpu_percent += sb->limits.cpu_percent;
    u.disk_mb += sb->limits.disk_mb;
  }
  u.streams = StreamsOf(tenant);
  return u;
}

Result<void> Service::CheckTemplateStorage(std::string_view tenant, uint64_t adding) const {
  const Tenant* t = TenantOf(tenant);
  if (!t || t->quotas.template_storage_mb <= 0) return Ok{};
  uint64_t used = 0;
  for (const Template* tmpl : templates_.List()) {
    if (tmpl->tenant == tenant && tmpl->ready) used += tmpl->size_bytes;
  }
  const uint64_t quota = static_cast<uint64_t>(t->quotas.template_storage_mb) << 20;
  const auto mib = [](uint64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20); };
  const std::string head = "tenant '" + std::string(tenant) + "' ";
  const std::string named =
      "quota template_storage_mb " + std::to_string(t->quotas.template_storage_mb);
  if (adding == 0 && used >= quota) {
    return Error{ErrorCode::kQuotaExceeded,
                 head + "is at its " + named + " (its templates take " + mib(used) + " MiB)"};
  }
  if (adding > 0 && used + adding > quota) {
    return Error{ErrorCode::kQuotaExceeded, head + "would pass its " + named + " (" +
                                                mib(used + adding) + " MiB with this template)"};
  }
  return Ok{};
}

Result<void> Service::CheckCreateQuotas(std::string_view tenant,
                                        const sandbox::Limits& limits) const {
  const Tenant* t = TenantOf(tenant);
  if (!t) return Ok{};
  // What it holds here, sandboxes still being made included, and this one.
  const auto committed = Committed();
  const auto held = committed.find(tenant);
  TenantUsage after = held == committed.end() ? TenantUsage{} : held->second;
  ++after.sandboxes;
  after.memory_mb += limits.memory_mb;
  after.cpu_percent += limits.cpu_percent;
  after.disk_mb += limits.disk_mb;
  if (auto over = PastCreateQuota(tenant, t->quotas, after)) return std::move(*over);
  return Ok{};
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
  ++sb->spawning;
  co_await sb->spawn_turns.Acquire();
  Result<std::optional<sandbox::FileWriter>> writer = BeingDeleted(sandbox_id);
  if (!sb->deleting && !shutting_down_) {
    writer = co_await Await(sb->runtime->StartFileWriter(file));
  }
  sb->spawn_turns.Release();
  --sb->spawning;
  sb->spawns_done.Notify();
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
  Journal(*sb, "sandbox.deleting", "info", "sandbox is being deleted");
  // A daemon that dies from here on finishes the deletion at its next start.
  Persist(*sb);
  // A spawn in flight ends within its deadlines; its process is then killed with the rest.
  while (sb->spawning > 0) {
    co_await sb->spawns_done.Wait();
    sb = Entry(id);
    if (!sb) co_return Ok{};
  }
  // Holding the processes keeps them alive while we wait, whatever the table does meanwhile.
  auto processes = sb->processes;
  for (auto& p : processes) p->Kill(ExitReason::kKilled);
  for (auto& p : processes) {
    // Bounded: after the grace period Kill() escalates to SIGKILL of the group.
    co_await p->WaitExit();
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
  std::string tenant;
  if (auto it = sandboxes_.find(id); it != sandboxes_.end()) tenant = it->second->tenant;
  std::erase(order_, id);
  sandboxes_.erase(id);
  if (SharedTenants* shared = SharedFor(tenant)) shared->Changed(tenant);
}

SharedTenants* Service::SharedFor(std::string_view tenant) const {
  if (tenant.empty() || !options_.access) return nullptr;
  return options_.access->shared();
}

std::map<std::string, TenantUsage, std::less<>> Service::Committed() const {
  std::map<std::string, TenantUsage, std::less<>> out;
  auto add = [&out](const std::string& tenant, const sandbox::Limits& limits) {
    if (tenant.empty()) return;
    TenantUsage& u = out[tenant];
    ++u.sandboxes;
    u.memory_mb += limits.memory_mb;
    u.cpu_percent += limits.cpu_percent;
    u.disk_mb += limits.disk_mb;
  };
  for (const auto& [id, sb] : sandboxes_) add(sb->tenant, sb->limits);
  for (const auto& [tenant, limits] : creating_by_tenant_) add(tenant, limits);
  return out;
}

asio::awaitable<void> Service::Shutdown() {
  shutting_down_ = true;
  stop_pulls_ = true;
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
    co_return;
  }
  std::vector<std::shared_ptr<Process>> running;
  for (auto& [id, sb] : sandboxes_) {
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
}

}  // namespace sandstream
