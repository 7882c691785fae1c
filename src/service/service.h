// The domain core: live sandboxes, their processes, idempotency keys and lifecycle journals,
// persisted through the Store. Transport-agnostic: the API layer calls it, never the reverse.
//
// Where each concern lives:
//   service.cc             sandboxes: create (validate, build, register), delete, TTL, ports,
//                          files, sessions' and contexts' membership, shutdown
//   service_processes.cc   processes: start (one spawn at a time per sandbox), exits, windows
//   service_restore.cc     a restart: the store's records (codec.h) and the kept sandboxes
//   service_lifecycle.cc   pausing and resuming (the runtime freezes, sandbox/runtime.h)
//   service_fork.cc        forks, with memory (a checkpoint) or of the files (a snapshot)
//   template_service.h     templates and images: imports, pulls, snapshots, deletion
//   quota_ledger.h         what each tenant holds here, and the refusals past its quotas
//   options.h, sandbox_entry.h, access.h, store.h, sessions.h, contexts.h
// What comes next has its place: a checkpoint (memory written to disk) is a PauseMode of
// service_lifecycle.cc; volumes, which outlive sandboxes and are counted against their tenant,
// get a VolumeService of their own (as TemplateService), their use recorded in QuotaLedger.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json/object.hpp>

#include "base/async.h"
#include "base/result.h"
#include "base/timer.h"
#include "image/registry.h"
#include "process/event_log.h"
#include "process/process.h"
#include "sandbox/files.h"
#include "sandbox/runtime.h"
#include "service/access.h"
#include "service/metrics.h"
#include "service/options.h"
#include "service/quota_ledger.h"
#include "service/resolver.h"
#include "service/resource_series.h"
#include "service/sandbox_entry.h"
#include "service/store.h"
#include "service/template_service.h"
#include "service/templates.h"
#include "service/volumes.h"

namespace sandstream {

struct StoredSandbox;  // codec.h

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

  // Pausing and resuming (service_lifecycle.cc). Pause stops every process of sandbox `id`
  // where it is (PauseMode::kFreeze: its memory kept); its process timeouts and its TTL stop
  // counting, and it is deleted after paused_ttl unless resumed. A paused sandbox is answered as
  // it is, by either; neither is an error. `by` asks (the journal's who).
  boost::asio::awaitable<Result<const SandboxEntry*>> PauseSandbox(std::string id, PauseMode mode,
                                                                   std::string by);
  boost::asio::awaitable<Result<const SandboxEntry*>> ResumeSandbox(std::string id, std::string by);
  // Before a request that needs sandbox `id` running: resumes it if it is paused, or refuses
  // with kPaused when it was made with auto_resume false. Immediate for a running sandbox.
  boost::asio::awaitable<Result<void>> Wake(std::string id);
  // A request that needs sandbox `id` is being answered (Begin) or was (End): while any is,
  // and for auto_pause's idle_seconds after the last, the sandbox is not idle.
  void BeginActivity(std::string_view id);
  void EndActivity(std::string_view id);
  // Changes what PATCH /v1/sandboxes/{id} may: auto_pause (nullopt in the optional: off),
  // pause_on_timeout, auto_resume; each given one only. Persisted.
  struct LifecycleSettings {
    std::optional<std::optional<AutoPause>> auto_pause;
    std::optional<bool> pause_on_timeout;
    std::optional<bool> auto_resume;
  };
  Result<const SandboxEntry*> UpdateLifecycle(std::string_view id, const LifecycleSettings& change);
  // Gives sandbox `id`, made with egress, `policy` in place of its rules: its DNS answers by
  // them at once, its table's sets are replaced and its open connections cut. kConflict for a
  // sandbox without egress. Persisted and journalled (`by` asks).
  boost::asio::awaitable<Result<const SandboxEntry*>> UpdateEgress(std::string id,
                                                                   net::EgressPolicy policy,
                                                                   std::string by);
  // Live sandboxes by state (running, paused, lost, ...), for /metrics.
  std::map<std::string, size_t> CountByState() const;
  // Each live sandbox's CPU, memory and disk use over time.
  const ResourceSampler& resources() const { return resources_; }

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

  // Templates and images (template_service.h): what the API makes and reads of them. Deleting
  // one or snapshotting a sandbox goes through the Service, which knows its sandboxes.
  TemplateService& template_service() { return template_service_; }
  const Templates& templates() const { return template_service_.templates(); }
  // Deletes template `name` when no sandbox uses it.
  boost::asio::awaitable<Result<void>> DeleteTemplate(std::string name);
  // A template of sandbox `sandbox_id`'s files now: its template's layers and, on top, a copy
  // of what it changed in them (its running processes keep running; each file is copied as it
  // is when read). It belongs to the sandbox's tenant.
  // With `memory`: a template that holds its processes too, a checkpoint that each sandbox made
  // from it is restored from (service_fork.cc).
  boost::asio::awaitable<Result<const Template*>> SnapshotSandbox(std::string sandbox_id,
                                                                  std::string name,
                                                                  bool memory = false);
  // `count` sandboxes made from sandbox `sandbox_id` as it is now, each with its env, cwd,
  // limits, network, TTL, metadata, lifecycle settings (auto_pause, auto_resume, on_timeout)
  // and owner, and its own id, hostname and ids
  // (service_fork.cc). With `memory`, its processes and code contexts run on in each where they
  // were: one checkpoint, restored `count` times (the sandbox runs on, stopped only while it is
  // written); else its files only, a snapshot as template `name` that each is made from. All
  // or none: one that fails ends the others. `by` asks (the audit's who).
  static constexpr int kMaxForks = 32;  // at once
  boost::asio::awaitable<Result<std::vector<const SandboxEntry*>>> ForkSandbox(
      std::string sandbox_id, std::string name, std::string by, int count, bool memory);

  // Volumes (volumes.h), made and deleted through the Service, which knows which sandboxes
  // mount them. `size_mb` nullopt: volume_default_mb.
  const Volumes& volumes() const { return volumes_; }
  boost::asio::awaitable<Result<const Volume*>> CreateVolume(std::string name, std::string tenant,
                                                             std::optional<int64_t> size_mb);
  // Refused (kConflict) while a sandbox mounts it.
  boost::asio::awaitable<Result<void>> DeleteVolume(std::string id);
  // The sandboxes that mount volume `id`, in creation order.
  std::vector<std::string> VolumeUsers(std::string_view id) const;

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
  // What each tenant holds here (sandboxes, streams), the quotas' measure (quota_ledger.h).
  QuotaLedger& quotas() { return quotas_; }
  const QuotaLedger& quotas() const { return quotas_; }
  // The ledger's usage of `tenant`, with its running processes.
  TenantUsage Usage(std::string_view tenant) const;
  Access* access() const { return options_.access; }
  size_t egress_sandboxes() const;
  size_t running_processes() const;
  std::string_view runtime_name() const { return runtime_.name(); }
  // An event of the sandbox's journal for what was done to it through the API (a token made
  // or revoked), with who did it in `fields`.
  void Audit(std::string_view sandbox_id, std::string_view type, std::string message,
             boost::json::object fields);
  // Writes the sandbox's record (with its sessions and code contexts) to the store.
  void Persist(const SandboxEntry& sb);
  // Sessions and code contexts (sessions.h, contexts.h) join and leave sandbox `sandbox_id`
  // here, each change persisted; they check their own rules (ids, counts) on Find's view first.
  // Nothing is done for a sandbox that is gone; Take hands back what it removed (null: none).
  void AddSession(std::string_view sandbox_id, std::shared_ptr<Session> session);
  std::shared_ptr<Session> TakeSession(std::string_view sandbox_id, std::string_view id);
  void AddContext(std::string_view sandbox_id, std::shared_ptr<CodeContext> context);
  std::shared_ptr<CodeContext> TakeContext(std::string_view sandbox_id, std::string_view id);

 private:
  SandboxEntry* Entry(std::string_view id);

  // CreateSandbox's steps: the request checked against the daemon's settings and templates,
  // with what it resolves to; the sandbox's record built from it; and, once its runtime is made,
  // the record registered (listed, counted against its tenant). Restore registers too.
  struct Plan {
    const Template* tmpl = nullptr;
    sandbox::Limits limits;
    sandbox::NetworkMode network = sandbox::NetworkMode::kLoopback;
    std::vector<SandboxVolume> volumes;  // found: ids and names known
  };
  Result<Plan> Validate(const SandboxRequest& req) const;
  // The request's volumes, each found among its tenant's and its path checked.
  Result<std::vector<SandboxVolume>> FindVolumes(const SandboxRequest& req) const;
  std::unique_ptr<SandboxEntry> Build(SandboxRequest req, const Plan& plan) const;
  SandboxEntry* Register(std::unique_ptr<SandboxEntry> sb);
  // What the runtime makes sandbox `sb` with; `tmpl` null: its template is gone.
  sandbox::SandboxSpec SpecFor(const SandboxEntry& sb, const Template* tmpl) const;

  // The lifecycle steps, with the sandbox's turn held (no spawn, pause or resume under way).
  boost::asio::awaitable<Result<void>> PauseHeld(SandboxEntry& sb, PauseMode mode,
                                                 const std::string& by);
  boost::asio::awaitable<Result<void>> ResumeHeld(SandboxEntry& sb, const std::string& by);
  // A spawn's turn found its sandbox paused: resumed (auto_resume), else kPaused.
  boost::asio::awaitable<Result<void>> WakeHeld(SandboxEntry& sb);
  // Pausing and resuming by checkpoint: the processes stop being read for the runtime's
  // checkpoint, and are supervised again on what its restore brings back.
  boost::asio::awaitable<Result<void>> CheckpointHeld(SandboxEntry& sb);
  boost::asio::awaitable<Result<void>> RestoreHeld(SandboxEntry& sb);
  // What the runtime's restore (or a sandbox made from a checkpoint) brought back, supervised:
  // the processes the daemon knows (sb.processes) bound to theirs again, those it knew only by
  // their records (sb.checkpointed_processes, _contexts) taken back, any other let go.
  void TakeBackRestored(SandboxEntry& sb);
  // ForkSandbox's steps: the settings a fork of `sb` is made with; and, in the sandbox's turn,
  // a checkpoint of it in `dir` with the records of what runs in it (kPaused or resumed first,
  // as a request would); `durable` (a snapshot's): on disk before it answers.
  SandboxRequest ForkRequest(const SandboxEntry& sb, std::string by) const;
  boost::asio::awaitable<Result<std::shared_ptr<const MemoryImage>>> TakeMemoryImage(
      std::string sandbox_id, std::string dir, bool durable);
  boost::asio::awaitable<Result<const Template*>> MemorySnapshot(std::string sandbox_id,
                                                                 std::string name);
  // What a sandbox made from memory snapshot `t` starts from.
  Result<std::shared_ptr<const MemoryImage>> MemoryOf(const Template& t) const;
  // The forks of one ForkSandbox, made at once: each CreateFork puts its result (the fork's
  // id: it may be deleted before the others are made) at its index.
  struct ForkBatch {
    ForkBatch(const boost::asio::any_io_executor& ex, size_t count)
        : made(count, Error{ErrorCode::kInternal, "not made"}), left(count), done(ex) {}
    std::vector<Result<std::string>> made;
    size_t left;
    AsyncSignal done;  // when left reaches 0
  };
  boost::asio::awaitable<void> CreateFork(SandboxRequest req, std::shared_ptr<ForkBatch> batch,
                                          size_t i);
  // A path for a new checkpoint (CheckpointTo makes it) in checkpoints_dir, which is made
  // (the daemon's alone) if missing; `prefix` says whose ("fork_", "snapshot_").
  std::string NewCheckpointDir(std::string_view prefix) const;
  // What forks a dying daemon was making left in checkpoints_dir.
  void RemoveLeftoverCheckpoints();
  // Paused state applied to what runs and counts: its processes' timeouts, its TTL.
  void PauseClocks(SandboxEntry& sb);
  // With auto_pause: pauses sandbox `id` once it has been idle for its idle_seconds. One per
  // sandbox (SandboxEntry::idle_watch, which `wake` is); ends when the sandbox or its
  // auto_pause does.
  void WatchIdleOf(SandboxEntry& sb);
  boost::asio::awaitable<void> WatchIdle(std::string id, std::shared_ptr<AsyncSignal> wake);
  // Its TTL passed: deleted, or paused when it says so (on_timeout "pause").
  boost::asio::awaitable<void> OnTtl(std::string id);

  void Journal(SandboxEntry& sb, std::string_view type, std::string_view level, std::string message,
               boost::json::object fields = {});
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
  void RestoreSessionsAndContexts(SandboxEntry& sb, const StoredSandbox& record);
  void Free(const std::string& id);
  // With egress: its resolver, on its gateway. Failing, the sandbox cannot be used.
  Result<void> StartResolver(SandboxEntry& sb);
  // Supervises again the running process that record `o` describes, if `kept` (what the
  // sandbox kept across the restart) holds it; takes it out of `kept`.
  bool Readopt(SandboxEntry& sb, const boost::json::object& o,
               std::vector<sandbox::AdoptedProcess>& kept);

  Result<std::shared_ptr<Process>> Attach(SandboxEntry& sb, const CommandSpec& spec,
                                          bool* attached);
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
  bool shutting_down_ = false;
  QuotaLedger quotas_{options_.access};
  TemplateService template_service_{ex_, options_, store_, quotas_};
  ResourceSampler resources_{*this, ex_, options_.metrics_interval};
  Volumes volumes_{options_.volumes_dir, options_.node_id, store_, quotas_, blocking_pool_};
  // Declared last, so destroyed first: stopped and joined before anything it could reach goes.
  boost::asio::thread_pool blocking_pool_{4};
  // The resolvers' pins (netlink, microseconds each), on a thread of their own: never queued
  // behind file syscalls a sandbox can slow down.
  boost::asio::thread_pool net_pool_{1};
};

}  // namespace sandstream
