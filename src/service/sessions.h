// Persistent shell sessions. Each command of a session runs, one at a time, as a process of its
// own that starts from the shell state the previous command left (working directory, variables,
// functions, aliases, options), kept in a file inside the sandbox. So `cd` and `export` persist,
// while output framing, stdin, timeouts and exit codes stay exactly those of one process.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include "base/async.h"
#include "base/clock.h"
#include "base/result.h"
#include "process/process.h"

namespace sandstream {

class Service;
struct SandboxEntry;

struct SessionRequest {
  std::string id;  // caller-chosen, or empty for a new one
  std::map<std::string, std::string> env;
  std::string cwd;  // empty: the sandbox's
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(const boost::asio::any_io_executor& ex, std::string id, std::string sandbox_id,
          std::map<std::string, std::string> env, std::string cwd);

  // A new session of sandbox `sandbox_id`, listed among its sessions and stored.
  static boost::asio::awaitable<Result<std::shared_ptr<Session>>> Create(Service& service,
                                                                         std::string sandbox_id,
                                                                         SessionRequest req);
  // Ends session `id` of sandbox `sandbox_id`: its running command is killed, its state goes.
  static Result<void> Delete(Service& service, std::string_view sandbox_id, std::string_view id);

  const std::string& id() const { return id_; }
  const std::string& sandbox_id() const { return sandbox_id_; }
  const std::map<std::string, std::string>& env() const { return env_; }
  const std::string& cwd() const { return cwd_; }
  SystemTime created_at() const { return created_at_; }
  uint64_t commands() const { return commands_; }
  bool busy() const { return turns_.busy(); }
  // Where the shell state lives inside the sandbox.
  std::string StatePath() const;
  std::shared_ptr<Process> last_process() const { return last_.lock(); }

  // Runs `spec` (a command request with the sandbox's defaults) in the session once the
  // commands before it have ended. `call_env`/`call_cwd`, when given, apply to this command
  // only: it then runs in a subshell, so nothing it changes persists.
  boost::asio::awaitable<Result<std::shared_ptr<Process>>> Run(
      Service& service, CommandSpec spec, std::map<std::string, std::string> call_env,
      std::optional<std::string> call_cwd);

  // Marks the session deleted: queued commands fail instead of starting.
  void Close() { closed_ = true; }
  // Taken back after a restart: when it was made, and how many commands it ran.
  void Resume(SystemTime created_at, uint64_t commands) {
    created_at_ = created_at;
    commands_ = commands;
  }

 private:
  CommandSpec Wrap(const Service& service, const SandboxEntry& sb, CommandSpec spec,
                   const std::map<std::string, std::string>& call_env,
                   const std::optional<std::string>& call_cwd) const;

  boost::asio::any_io_executor ex_;
  std::string id_;
  std::string sandbox_id_;
  std::map<std::string, std::string> env_;
  std::string cwd_;
  SystemTime created_at_;
  uint64_t commands_ = 0;
  bool closed_ = false;
  TurnQueue turns_;
  std::weak_ptr<Process> last_;
};

// The directory inside every sandbox that holds session state (owned by `user`).
inline constexpr const char* kSessionStateDir = "/tmp/.sandstream";

boost::json::object SessionJson(const Session& s);
// A session an earlier daemon had (its shell state is in the sandbox already), from
// SessionJson's form; nullptr if the record is unreadable.
std::shared_ptr<Session> SessionFromStored(const boost::asio::any_io_executor& ex,
                                           const boost::json::object& o);

// `'a b' 'c'`: argv as one shell command line.
std::string ShellQuote(const std::vector<std::string>& argv);

}  // namespace sandstream
