// The domain core: live sandboxes, their processes, idempotency keys and lifecycle journals,
// persisted through the Store. Transport-agnostic: the API layer calls it, never the reverse.
// What it is made with is options.h; a sandbox as it holds one, sandbox_entry.h; tenants and
// quotas, access.h; persistence, store.h; templates and images, templates.h; sessions and code
// contexts, sessions.h and contexts.h.
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
#include "service/options.h"
#include "service/resolver.h"
#include "service/sandbox_entry.h"
#include "service/store.h"
#include "service/templates.h"

namespace sandstream {

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

  // Ports of a sandbox that the daemon's proxy reaches (api/routes/ports.cc): at most
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
