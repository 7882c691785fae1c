// JSON shapes of the domain objects, as spec/README.md defines them. The API answers with
// them and the Store keeps them, so a process reads the same before and after a restart.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <optional>

#include "process/exit.h"
#include "process/process.h"
#include "sandbox/runtime.h"

namespace sandstream {

struct SandboxEntry;

boost::json::object LimitsJson(const sandbox::Limits& limits);
boost::json::object SandboxJson(const SandboxEntry& sb);
// A sandbox's egress as SandboxJson has it (null without), and its policy back from that.
boost::json::value EgressJson(const SandboxEntry& sb);
Result<net::EgressPolicy> EgressFromJson(const boost::json::value& v);
boost::json::object ProcessJson(const Process& p);
// `{"exit_code", "signal", "reason", "duration_ms"}`, or null while running.
boost::json::value ExitJson(const std::optional<ExitRecord>& exit);

// The stored form of a process: its JSON plus what supervising it needs (a running one is
// taken back after a restart) and, once finished, the output tail.
boost::json::object StoredProcessJson(const Process& p, uint64_t tail_bytes);
// The command of a stored process (no environment: it is never stored); throws on a record
// that lacks a required field.
CommandSpec CommandSpecFromStored(const boost::json::object& o);
// Rebuilds a finished process from its stored form; nullptr if the record is unreadable.
std::shared_ptr<Process> ProcessFromStored(const boost::asio::any_io_executor& ex,
                                           const boost::json::object& o);

}  // namespace sandstream
