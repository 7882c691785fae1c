// The daemon side of a sandbox's spawner (spawner_main.cc): a small process started once per
// sandbox, at its first spawn, that clones each new process so that the daemon's own memory is
// never copied and the sandbox's cgroups are never joined again per process.
#pragma once

#include <sys/types.h>

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "platform/unique_fd.h"

struct sock_fprog;

namespace sandstream::sandbox {

// Where a spawner starts: the sandbox's init (whose namespaces it joins) and cgroups.
struct SpawnerSite {
  int init_pidfd = -1;
  std::vector<int> cgroup_procs;  // cgroup.procs fds to write "0" to
  int exe_fd = -1;                // the embedded spawner executable
};

// What one process needs, in the daemon's terms; see spawn_request.h for the wire format.
struct SpawnRequest {
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string cwd;                         // absolute
  std::optional<std::string> search_path;  // PATH to search argv[0] in (none with a '/')
  uid_t uid = 0;
  int64_t open_files = 1024;
  const sock_fprog* seccomp = nullptr;
  bool tty = false;
  bool has_stdin = false;
};

// The flat message; strings end at their first NUL, as execve would see them. kInvalidRequest
// when it exceeds kMaxSpawnRequestBytes.
Result<std::string> EncodeSpawnRequest(const SpawnRequest& request);

class Spawner {
 public:
  Spawner() = default;
  Spawner(const Spawner&) = delete;
  Spawner& operator=(const Spawner&) = delete;
  ~Spawner() { Stop(); }

  // Sends an encoded request with its fds (stdin if any, stdout, stderr, report pipe) and
  // returns the new process's host pid. Starts the spawner if none runs, and starts a new one,
  // once, if the request finds it dead. Errors: "spawn: start spawner: ...", "spawn: clone: ...".
  Result<pid_t> Launch(const SpawnerSite& site, std::string_view request, std::span<const int> fds);
  // Kills and reaps the spawner, if one runs.
  void Stop();
  // The spawner's host pid, or -1.
  pid_t pid() const { return pid_; }

 private:
  Result<void> Start(const SpawnerSite& site);
  // 0 once sent; else the errno of sendmsg.
  int Send(std::string_view request, std::span<const int> fds);

  UniqueFd control_;
  UniqueFd pidfd_;
  pid_t pid_ = -1;
};

}  // namespace sandstream::sandbox
