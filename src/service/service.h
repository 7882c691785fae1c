// The domain core: live sandboxes, their processes, idempotency keys and lifecycle journals,
// persisted through the Store. Transport-agnostic: the API layer calls it, never the reverse.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json/object.hpp>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/async.h"
#include "base/result.h"
#include "base/timer.h"
#include "image/registry.h"
#include "process/event_log.h"
#include "process/process.h"
#include "sandbox/files.h"
#include "sandbox/runtime.h"
#include "service/access.h"
#include "service/image_work.h"
#include "service/metrics.h"
#include "service/resolver.h"
#include "service/store.h"
#include "service/templates.h"

namespace sandstream {

// The templates a cluster keeps on every node (cluster::EtcdTemplates): told of each template
// pulled from a registry without credentials, and of each one deleted, it has every other node,
// and every node that joins later, pull it too.
class TemplateCatalog {
 public:
  virtual ~TemplateCatalog() = default;
  virtual void Pulled(const std::string& name, const std::string& tenant,
                      const std::string& image) = 0;
  virtual void Deleted(const std::string& name) = 0;
};

struct ServiceOptions {
  // Tenants and their quotas, keys and tokens; null: the admin alone (tests).
  Access* access = nullptr;
  // In a cluster: where pulled templates are kept for every node; null: not in one.
  TemplateCatalog* catalog = nullptr;
  // Egress, when the daemon offers it, and the resolvers its sandboxes' DNS goes to.
  std::shared_ptr<net::Egress> egress;
  std::vector<uint32_t> dns_upstreams;
  sandbox::Limits default_limits;
  sandbox::Limits max_limits;
  double exec_default_timeout_seconds = 600;
  double max_timeout_seconds = 7 * 24 * 3600;
  LogLimits default_log_limits;
  uint64_t log_window_max_bytes = 256u << 20;
  uint64_t retained_tail_bytes = 64u << 10;
  uint64_t exec_output_limit_bytes = 10u << 20;
  std::chrono::milliseconds kill_grace{2000};
  // A waiting reader whose client went away keeps its place this long (a resume gets every
  // byte); one that takes nothing this long while holding its process back is dropped.
  std::chrono::milliseconds resume_grace{30000};
  std::chrono::milliseconds reader_stall{300000};
  int64_t sandbox_default_ttl_seconds = 0;
  size_t max_sandboxes = 1000;
  size_t max_processes_per_sandbox = 1024;
  bool allow_nested_userns = false;  // the operator grants requests' allow_nested_userns
  // Shutdown() ends every sandbox; else they run on for the next daemon's Restore().
  bool teardown_on_exit = false;
  size_t journal_entries = 1000;
  // This daemon's id in a cluster: every sandbox id it makes names it, sb_{node_id}_{hex}, so a
  // gateway routes without a table. Empty: sb_{hex}.
  std::string node_id;
  // A finished process keeps its whole output window this long after its last reader left
  // (for reconnects), then only the retained tail: memory follows live processes, not history.
  std::chrono::seconds finished_window_grace{60};
  std::vector<std::string> base_env;  // every process starts from these ("PATH=...")
  // Directory templates (one per directory), and the image store's root and limits.
  std::string templates_dir;
  std::string images_dir;
  image::StoreLimits image_limits;
  // Registries pulled from at all (empty: any), over plain HTTP, and over HTTPS on non-public
  // addresses (host[:port]).
  std::vector<std::string> registry_allow;
  std::vector<std::string> registry_plain_http;
  std::vector<std::string> registry_private_hosts;
  double pull_timeout_seconds = 1800;  // a whole pull, at most
  size_t image_workers = 4;            // image jobs at once (one per tenant at a time)
};

// What the client asked for, validated by the API layer; defaults filled by the service.
struct SandboxRequest {
  std::string template_name = "base";
  std::map<std::string, std::string> env;
  std::string cwd;  // "": the template's working directory, else /workspace
  std::optional<int64_t> ttl_seconds;
  std::map<std::string, int64_t> limits;  // by wire name: memory_mb, pids, ...
  std::string network = "loopback";
  std::optional<net::EgressPolicy> egress;  // with network "egress"
  bool allow_nested_userns = false;
  boost::json::object metadata;
  std::string tenant;  // whose it will be ("" for the admin's)
  std::string by;      // the credential that asks ("admin", a key id): the audit's who
};

class Session;
class CodeContext;

// A live sandbox as the service keeps it. The API reads it through Service::Find's const view
// and changes it only through Service (and the service layer's Session and CodeContext, which
// reach the mutable entry as friends); `runtime` is for the service layer alone.
struct SandboxEntry {
  explicit SandboxEntry(const boost::asio::any_io_executor& ex)
      : spawn_turns(ex), spawns_done(ex) {}

  std::string id;
  std::string tenant;  // its owner ("" for the admin's): other tenants never see it
  std::string template_name;
  std::vector<std::string> template_env;  // the template's (an image's Env), under `env`
  std::map<std::string, std::string> env;
  std::string cwd;
  sandbox::Limits limits;
  std::string network;
  std::optional<net::EgressPolicy> egress;  // with network "egress"
  bool allow_nested_userns = false;
  boost::json::object metadata;
  SystemTime created_at;
  std::optional<SystemTime> expires_at;
  int64_t ttl_seconds = 0;
  bool deleting = false;

  std::shared_ptr<sandbox::Sandbox> runtime;
  std::shared_ptr<SandboxResolver> resolver;  // with egress: its DNS
  // Set when the sandbox ended under the daemon (its PID 1 died): why. It then only accepts
  // reads and DELETE.
  std::optional<std::string> lost;
  std::vector<std::shared_ptr<Process>> processes;  // in start order
  std::map<std::string, std::string> idempotency;   // key -> process id
  // The lifecycle journal: one event per record; it ends when the sandbox is deleted.
  std::shared_ptr<EventLog> journal;
  std::unique_ptr<Timer> ttl_timer;
  // Finished processes still holding their whole output window, each with since when no reader
  // has been on it (unset: one is now). One sweep per sandbox trims them to the retained tail
  // (Service::SweepWindows); what this costs follows the processes in memory, not history.
  std::map<std::string, std::optional<SteadyTime>, std::less<>> held_windows;
  bool sweeping_windows = false;
  std::map<std::string, std::shared_ptr<Session>, std::less<>> sessions;      // sessions.h
  std::map<std::string, std::shared_ptr<CodeContext>, std::less<>> contexts;  // contexts.h
  std::map<uint16_t, SystemTime> ports;  // exposed through the daemon's proxy -> since when

  // Spawns run one at a time per sandbox (its spawner answers in order) and are awaited on the
  // event loop; what they will take (an id, an idempotency key, a slot) is reserved meanwhile,
  // and deletion waits for them.
  TurnQueue spawn_turns;
  size_t spawning = 0;
  AsyncSignal spawns_done;  // a spawn ended (started or not)
  std::set<std::string, std::less<>> starting_ids;
  // Processes that ended before their start was recorded: their end is recorded right after.
  std::set<std::string, std::less<>> ended_unrecorded;
  std::set<std::string, std::less<>> starting_keys;

  std::shared_ptr<Process> FindProcess(std::string_view pid) const;
  size_t RunningProcesses() const;
};

class Service {
 public:
  Service(boost::asio::any_io_executor ex, sandbox::Runtime& runtime, Store& store,
          ServiceOptions options);
  ~Service();

  // Takes back the sandboxes an earlier run left running, with their files and running
  // processes, and brings back the finished processes' records; a sandbox that could not be
  // taken back is reported lost (with a fresh filesystem, so that it can be looked at).
  void Restore();

  boost::asio::awaitable<Result<const SandboxEntry*>> CreateSandbox(SandboxRequest req);
  const SandboxEntry* Find(std::string_view id) const;
  std::vector<const SandboxEntry*> List() const;
  // Kills every process, waits for their exits, frees the sandbox.
  boost::asio::awaitable<Result<void>> DeleteSandbox(std::string id);
  // Sandbox `id` ends `seconds` from now (its TTL, which counts from its creation, becomes
  // that); with `extend_only`, never sooner than it would have, and one without a TTL keeps
  // running. Persisted, so a restart keeps it.
  Result<void> SetTimeout(std::string_view id, int64_t seconds, bool extend_only);

  // Starts a command in a sandbox. With an idempotency key already used there, returns the
  // process it started instead (`*attached` = true), or kConflict for another command. The
  // sandbox is looked up again after the spawn: it may have gone meanwhile (kNotFound).
  struct Started {
    std::shared_ptr<Process> process;
    bool attached = false;
  };
  boost::asio::awaitable<Result<Started>> StartProcess(std::string sandbox_id, CommandSpec spec);

  // Ports of a sandbox that the daemon's proxy reaches (api/routes_ports.cc): at most
  // kMaxPorts each. ExposePort is idempotent (false: it was exposed already).
  static constexpr size_t kMaxPorts = 64;
  Result<bool> ExposePort(std::string_view sandbox_id, uint16_t port);
  Result<void> UnexposePort(std::string_view sandbox_id, uint16_t port);
  // A socket in the sandbox's network namespace to connect to `port`, which must be exposed.
  Result<UniqueFd> PortSocket(std::string_view sandbox_id, uint16_t port);
  // The same for any port (to see whether something listens).
  Result<UniqueFd> SandboxSocket(std::string_view sandbox_id);

  // The files of sandbox `sandbox_id` as its user `uid` (0 or 1000) sees them.
  Result<sandbox::SandboxFs> Files(std::string_view sandbox_id, uint32_t uid);
  // A writer for `file` (one of the sandbox's files, open until this returns) that runs in the
  // sandbox's cgroups, started in its turn with the spawns; nullopt where the runtime has none,
  // or the sandbox is at its pids limit: the caller writes itself (file_sink.h).
  boost::asio::awaitable<Result<std::optional<sandbox::FileWriter>>> StartFileWriter(
      std::string sandbox_id, int file);
  // The writer `pid` of sandbox `sandbox_id` has ended and its status was read.
  void ForgetFileWriter(std::string_view sandbox_id, pid_t pid);

  // Environment and argv for a request: the sandbox's env plus the command's.
  std::vector<std::string> ComposeEnv(const SandboxEntry& sb,
                                      const std::map<std::string, std::string>& extra) const;

  // Templates: every one a principal of `tenant` may use (admin: all), one by name, and those
  // made through the API: an image archive imported (`archive`, a file the import reads) or an
  // image pulled from a registry (`credentials` for it are used for this pull only, never
  // kept), reporting its progress on the event loop as it goes; or deleted, when no sandbox
  // uses it.
  const Templates& templates() const { return templates_; }
  bool MayUseTemplate(const Template& t, std::string_view tenant, bool admin) const {
    return admin || t.tenant.empty() || t.tenant == tenant;
  }
  using TemplateProgress = std::function<void(boost::json::object)>;
  boost::asio::awaitable<Result<const Template*>> ImportTemplate(std::string name,
                                                                 std::string tenant,
                                                                 UniqueFd archive,
                                                                 TemplateProgress progress);
  boost::asio::awaitable<Result<const Template*>> PullTemplate(std::string name,
                                                               std::string tenant,
                                                               image::Reference image,
                                                               image::Credentials credentials,
                                                               TemplateProgress progress);
  boost::asio::awaitable<Result<void>> DeleteTemplate(std::string name);
  // A template of sandbox `sandbox_id`'s files now: its template's layers and, on top, a copy
  // of what it changed in them (its running processes keep running; each file is copied as it
  // is when read). It belongs to the sandbox's tenant.
  boost::asio::awaitable<Result<const Template*>> SnapshotSandbox(std::string sandbox_id,
                                                                  std::string name);
  // A snapshot of sandbox `sandbox_id` as template `name`, and a sandbox made from it with the
  // first one's env, cwd, limits, network, TTL, metadata and owner; `by` asks (the audit's who).
  boost::asio::awaitable<Result<const SandboxEntry*>> ForkSandbox(std::string sandbox_id,
                                                                  std::string name,
                                                                  std::string by);

  // Kills everything (the daemon is stopping) and waits for the exits (at most the kill grace).
  boost::asio::awaitable<void> Shutdown();
  bool shutting_down() const { return shutting_down_; }

  const ServiceOptions& options() const { return options_; }
  const boost::asio::any_io_executor& executor() const { return ex_; }
  Metrics& metrics() { return metrics_; }
  // Threads for the file syscalls done on a sandbox's behalf, which a sandbox can slow down (a
  // lease, a huge directory, a slow disk): the io_context thread never waits on them.
  boost::asio::thread_pool& blocking_pool() { return blocking_pool_; }
  size_t sandbox_count() const { return sandboxes_.size(); }
  TenantUsage Usage(std::string_view tenant) const;
  // What each tenant's sandboxes here take, those being made included (sandboxes, memory_mb,
  // cpu_percent, disk_mb): what a cluster counts against its quotas for this node.
  std::map<std::string, TenantUsage, std::less<>> Committed() const;
  // The tenant's record when it has one (quotas), else null (the admin's sandboxes).
  const Tenant* TenantOf(std::string_view tenant) const;
  Access* access() const { return options_.access; }
  // A streaming response (SSE, WebSocket) of `tenant` opens or ends: its streams quota's
  // measure (the server refuses a stream's request past it).
  void StreamOpened(const std::string& tenant);
  int64_t StreamsOf(std::string_view tenant) const {
    auto it = streams_.find(tenant);
    return it == streams_.end() ? 0 : it->second;
  }
  void StreamClosed(const std::string& tenant);
  size_t egress_sandboxes() const;
  size_t running_processes() const;
  std::string_view runtime_name() const { return runtime_.name(); }
  // An event of the sandbox's journal for what was done to it through the API (a token made
  // or revoked), with who did it in `fields`.
  void Audit(std::string_view sandbox_id, std::string_view type, std::string message,
             boost::json::object fields);
  // Writes the sandbox's record (with its sessions and code contexts) to the store.
  void Persist(const SandboxEntry& sb);

 private:
  friend class Session;
  friend class CodeContext;
  SandboxEntry* Entry(std::string_view id);

  void Journal(SandboxEntry& sb, std::string_view type, std::string_view level,
               std::string message, boost::json::object fields = {});
  void ArmTtl(SandboxEntry& sb);
  // Notices a sandbox whose PID 1 dies while it is not being deleted.
  void WatchLife(const SandboxEntry& sb);
  boost::asio::awaitable<void> AwaitDeath(std::string id, UniqueFd life);
  void OnLost(SandboxEntry& sb);
  void OnProcessExit(SandboxEntry& sb, Process& p);
  // Trims the windows of sandbox `id`'s finished processes once no reader has been on one for
  // a whole finished_window_grace; runs while any is held.
  boost::asio::awaitable<void> SweepWindows(std::string id);
  void PersistProcess(const SandboxEntry& sb, const Process& p);
  ProcessOptions ProcessOptionsFor() const;
  // Records the end of a process of sandbox `sandbox_id` (OnProcessExit), if it still exists.
  Process::ExitCallback ExitHandler(std::string sandbox_id);
  // Finished processes a sandbox keeps (in memory and in the store); older ones are forgotten.
  static constexpr size_t kFinishedInMemory = 256;
  // The sessions and contexts a sandbox record lists, bound again after a restart.
  void RestoreSessionsAndContexts(SandboxEntry& sb, const boost::json::object& record);
  void Free(const std::string& id);
  // With egress: its resolver, on its gateway. Failing, the sandbox cannot be used.
  Result<void> StartResolver(SandboxEntry& sb);
  // Supervises again the running process that record `o` describes, if `kept` (what the
  // sandbox kept across the restart) holds it; takes it out of `kept`.
  bool Readopt(SandboxEntry& sb, const boost::json::object& o,
               std::vector<sandbox::AdoptedProcess>& kept);

  Result<std::shared_ptr<Process>> Attach(SandboxEntry& sb, const CommandSpec& spec,
                                          bool* attached);
  Result<void> CheckCreateQuotas(std::string_view tenant, const sandbox::Limits& limits) const;
  // Whether `tenant`'s templates on this node leave room (`adding` 0: any; else that many bytes
  // more) within its template_storage_mb: kQuotaExceeded naming it if not.
  Result<void> CheckTemplateStorage(std::string_view tenant, uint64_t adding) const;
  // The cluster's tenants, when `tenant` is one of them and tenants are shared.
  SharedTenants* SharedFor(std::string_view tenant) const;
  // An image template: `job` makes the image on the image thread (from an archive, a
  // registry), then it is recorded as `name`, with `source` saying where it came from.
  using ImageJob =
      std::function<Result<image::Image>(image::Store& store, const image::Progress& progress)>;
  boost::asio::awaitable<Result<const Template*>> MakeImageTemplate(std::string name,
                                                                    std::string tenant,
                                                                    std::string source,
                                                                    ImageJob job,
                                                                    TemplateProgress progress);
  // Not deleting, not lost, the daemon not stopping.
  Result<void> CheckLive(const SandboxEntry& sb) const;
  Result<void> CheckStart(const SandboxEntry& sb, const CommandSpec& spec) const;
  // A process that started: listed, its key remembered, journalled, stored.
  void Record(SandboxEntry& sb, const std::shared_ptr<Process>& p);

  boost::asio::any_io_executor ex_;
  sandbox::Runtime& runtime_;
  Store& store_;
  ServiceOptions options_;
  Metrics metrics_;
  std::map<std::string, std::unique_ptr<SandboxEntry>, std::less<>> sandboxes_;
  std::vector<std::string> order_;  // creation order, for listing
  size_t creating_ = 0;             // sandboxes being created (counted against max_sandboxes)
  // The same by tenant, with their limits (counted against its quotas).
  std::multimap<std::string, sandbox::Limits> creating_by_tenant_;
  std::map<std::string, int64_t, std::less<>> streams_;  // open streams by tenant
  bool shutting_down_ = false;
  // Set at shutdown, read by pulls on the image thread: a download in flight ends.
  std::atomic<bool> stop_pulls_{false};
  Templates templates_;
  // Declared last, so destroyed first: stopped and joined before anything it could reach goes.
  boost::asio::thread_pool blocking_pool_{4};
  // The resolvers' pins (netlink, microseconds each), on a thread of their own: never queued
  // behind file syscalls a sandbox can slow down.
  boost::asio::thread_pool net_pool_{1};
  // Imports, pulls, snapshots and collections: minutes of disk and network work that must not
  // hold the pool the sandboxes' file syscalls take; one job of a tenant at a time, tenants in
  // turn, so that one tenant's slow pull never holds another's import.
  ImageWork image_work_{options_.image_workers};
};

}  // namespace sandstream
