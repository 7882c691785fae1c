// JSON shapes of the domain objects, as spec/README.md defines them. The API answers with
// them and the Store keeps them, so a process reads the same before and after a restart.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "base/clock.h"
#include "base/result.h"
#include "net/policy.h"
#include "process/exit.h"
#include "process/process.h"
#include "sandbox/runtime.h"
#include "service/pause.h"
#include "service/sandbox_entry.h"

namespace sandstream {

struct SandboxEntry;

boost::json::object LimitsJson(const sandbox::Limits& limits);
boost::json::object SandboxJson(const SandboxEntry& sb);
// A sandbox's egress as SandboxJson has it (null without), and its policy back from that.
boost::json::value EgressJson(const SandboxEntry& sb);
Result<net::EgressPolicy> EgressFromJson(const boost::json::value& v);

// A sandbox's record as the store keeps it (Service::Persist: SandboxJson with its ports,
// sessions and code contexts), read back at a restart. Sessions and contexts stay JSON: they
// are read (SessionFromStored, CodeContext::FromStored) once the sandbox's processes are back.
struct StoredSandbox {
  std::string tenant;
  std::string template_name;
  std::map<std::string, std::string> env;
  std::string cwd;
  sandbox::Limits limits;
  // With network kEgress: its policy, or why it could not be read.
  Result<net::EgressPolicy> egress = Error{ErrorCode::kInternal, "no egress policy"};
  boost::json::object metadata;
  int64_t ttl_seconds = 0;
  std::optional<SystemTime> created_at;
  std::map<uint16_t, SystemTime> ports;  // exposed ports, each since when
  // Paused when the record was written: since when and how (the kernel's freezer says whether
  // it still is).
  std::optional<SystemTime> paused_at;
  std::optional<PauseMode> pause_mode;
  std::optional<AutoPause> auto_pause;
  std::optional<int64_t> ttl_period;
  std::vector<SandboxVolume> volumes;
  boost::json::array sessions;
  boost::json::array contexts;
  // The small fields last, together (no padding between the larger ones).
  sandbox::NetworkMode network = sandbox::NetworkMode::kLoopback;
  bool deleting = false;  // the daemon died deleting it
  bool allow_nested_userns = false;
  bool auto_resume = true;
  bool pause_on_timeout = false;
};
// kInvalidRequest naming what is wrong when `text` is not such a record.
Result<StoredSandbox> StoredSandboxFromJson(std::string_view text);

boost::json::object ProcessJson(const Process& p);
// `{"exit_code", "signal", "reason", "duration_ms"}`, or null while running.
boost::json::value ExitJson(const std::optional<ExitRecord>& exit);

// The stored form of a process: its JSON plus what supervising it needs (a running one is
// taken back after a restart) and, once finished, the output tail.
boost::json::object StoredProcessJson(const Process& p, uint64_t tail_bytes);
// The command of a stored process (no environment: it is never stored); throws on a record
// that lacks a required field.
CommandSpec CommandSpecFromStored(const boost::json::object& o);
// A stored process that was running when the daemon stopped and was not taken back: it ends
// there, killed, with an exit event at the end of its output (`now` is when).
void EndStoredAsKilled(boost::json::object& o, SystemTime now);
// Rebuilds a finished process from its stored form; nullptr if the record is unreadable.
std::shared_ptr<Process> ProcessFromStored(const boost::asio::any_io_executor& ex,
                                           const boost::json::object& o);

}  // namespace sandstream
