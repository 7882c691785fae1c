// A sandbox as the service holds it (SandboxEntry), and what a client asks one to be made
// with (SandboxRequest).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/json/object.hpp>

#include "base/async.h"
#include "base/clock.h"
#include "base/result.h"
#include "base/timer.h"
#include "net/policy.h"
#include "process/event_log.h"
#include "process/process.h"
#include "sandbox/runtime.h"
#include "service/pause.h"
#include "service/resolver.h"

namespace sandstream {

// A volume a sandbox mounts: asked by name (or id), then known by its id too.
struct SandboxVolume {
  std::string id;
  std::string name;
  std::string path;  // absolute and normalized, inside the sandbox
  bool read_only = false;
};

// A checkpoint of a sandbox that others are made from (a fork with memory): its runtime's
// directory, and what the daemon knew of it then, the records of its running processes and of
// its code contexts (codec.h), which each sandbox made from it takes as its own.
struct MemoryImage {
  std::string dir;
  std::string source;  // the sandbox it was taken of
  std::vector<std::string> processes;
  std::vector<std::string> contexts;
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
  bool auto_resume = true;  // a request for it while paused resumes it (else 409 paused)
  std::optional<AutoPause> auto_pause;
  bool pause_on_timeout = false;       // its TTL pauses it instead of deleting it
  std::vector<SandboxVolume> volumes;  // `name` and where: the service finds each
  std::string tenant;                  // whose it will be ("" for the admin's)
  std::string by;  // the credential that asks ("admin", a key id): the audit's who
  // Made from this checkpoint, its processes running where they were (not from the client).
  std::shared_ptr<const MemoryImage> memory;
};

class Session;
class CodeContext;

// A live sandbox as the service keeps it. The API, sessions and code contexts read it through
// Service::Find's const view and change it only through Service's methods; `runtime` is for the
// service layer alone.
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
  std::optional<net::EgressPolicy> egress;  // with network kEgress
  std::vector<SandboxVolume> volumes;
  boost::json::object metadata;
  SystemTime created_at;
  std::optional<SystemTime> expires_at;
  int64_t ttl_seconds = 0;
  // The TTL's length as last asked (at creation, or a timeout set since): what a sandbox paused
  // by its TTL (pause_on_timeout) runs for once resumed.
  int64_t ttl_period = 0;
  // Set while it is paused (service_lifecycle.cc).
  std::optional<PauseState> paused;
  // Checkpointed when an earlier daemon stopped: the records of its processes that ran, taken
  // back from what the restore brings back (until then they have no Process).
  std::vector<std::string> checkpointed_processes;
  // And the records of its code contexts, bound again to their interpreters then.
  std::vector<std::string> checkpointed_contexts;
  std::optional<AutoPause> auto_pause;
  // Activity, for auto_pause: requests for it being answered now (a stream, a terminal or a
  // port connection is one that lasts), and when the last one ended.
  size_t active_requests = 0;
  SteadyTime last_active;
  // Set while Service::WatchIdle runs for it: notified when it may have become idle sooner
  // than the watch expects (its last request ended, it resumed, its auto_pause changed).
  std::shared_ptr<AsyncSignal> idle_watch;

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
  std::map<std::string, std::shared_ptr<Session>, std::less<>> sessions;      // sessions.h
  std::map<std::string, std::shared_ptr<CodeContext>, std::less<>> contexts;  // contexts.h
  std::map<uint16_t, SystemTime> ports;  // exposed through the daemon's proxy -> since when

  // Spawns, pauses and resumes run one at a time per sandbox (its spawner answers in order),
  // each in a SandboxTurn, awaited on the event loop; what a spawn will take (an id, an
  // idempotency key, a slot) is reserved meanwhile, and deletion waits for them all.
  TurnQueue spawn_turns;
  size_t spawning = 0;      // turns held or awaited
  AsyncSignal spawns_done;  // a turn ended (its spawn started or not)
  std::set<std::string, std::less<>> starting_ids;
  // Processes that ended before their start was recorded: their end is recorded right after.
  std::set<std::string, std::less<>> ended_unrecorded;
  std::set<std::string, std::less<>> starting_keys;

  // The small fields last, together (no padding between the larger ones).
  sandbox::NetworkMode network = sandbox::NetworkMode::kLoopback;
  // A pause or resume under way: deletion waits for it, as for a spawn.
  enum class Transition : uint8_t { kNone, kPausing, kResuming } transition = Transition::kNone;
  bool allow_nested_userns = false;
  bool deleting = false;
  bool auto_resume = true;
  bool pause_on_timeout = false;
  bool sweeping_windows = false;

  std::shared_ptr<Process> FindProcess(std::string_view pid) const;
  size_t RunningProcesses() const;
};

// The sandbox's turn (SandboxEntry::spawn_turns) for a spawn, a pause or a resume: counted in
// `spawning` from construction, so deletion waits for it and the entry outlives it; Take waits
// for the turns before it. Released when it goes out of scope.
class SandboxTurn {
 public:
  explicit SandboxTurn(SandboxEntry& sb) : sb_(&sb) { ++sb_->spawning; }
  SandboxTurn(const SandboxTurn&) = delete;
  SandboxTurn& operator=(const SandboxTurn&) = delete;
  // Notify cancels a timer, which throws only when the reactor itself has failed.
  ~SandboxTurn() {  // NOLINT(bugprone-exception-escape)
    if (held_) sb_->spawn_turns.Release();
    --sb_->spawning;
    sb_->spawns_done.Notify();
  }
  boost::asio::awaitable<void> Take() {
    co_await sb_->spawn_turns.Acquire();
    held_ = true;
  }

 private:
  SandboxEntry* sb_;
  bool held_ = false;
};

// When it ends unless something changes: its TTL's end, or paused, its paused_ttl's (its own
// TTL does not run while paused). None: it has no TTL.
std::optional<SystemTime> EndsAt(const SandboxEntry& sb);

// Its `status` on the wire: running, pausing, paused, resuming, deleting or lost.
std::string_view SandboxState(const SandboxEntry& sb);

// What a call on a sandbox that is being deleted answers.
inline Error BeingDeleted(const std::string& sandbox_id) {
  return Error{ErrorCode::kNotFound, "sandbox " + sandbox_id + " is being deleted"};
}

}  // namespace sandstream
