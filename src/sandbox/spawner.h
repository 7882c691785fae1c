// The daemon side of a sandbox's spawner (spawner_main.cc): a small process started once per
// sandbox, at its first spawn, that clones each new process so that the daemon's own memory is
// never copied and the sandbox's cgroups are never joined again per process.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "sandbox/spawn_request.h"
#include "platform/unique_fd.h"
#include "sandbox/op.h"

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
  // `unreaped` takes the pidfd of a killed spawner that had not exited yet, to be reaped later.
  explicit Spawner(std::function<void(UniqueFd)> unreaped = {}) : unreaped_(std::move(unreaped)) {}
  Spawner(const Spawner&) = delete;
  Spawner& operator=(const Spawner&) = delete;
  ~Spawner() { Kill(); }

  // Sends an encoded request with its fds (stdin if any, stdout, stderr, report pipe) and
  // returns the new process's host pid. Starts the spawner if none runs, and starts a new one,
  // once, if the request finds it dead. Errors: "spawn: start spawner: ...", "spawn: clone: ...".
  // The strings and fds must stay valid until the Op ends; one request at a time.
  Op<Result<pid_t>> Launch(SpawnerSite site, std::string_view request, std::span<const int> fds);
  // Kills the spawner, if one runs, and reaps it (within a bound; else `unreaped` gets it).
  Op<Result<void>> Stop();
  // Kills it without waiting; `unreaped` gets it.
  void Kill();
  // The spawner's host pid, or -1.
  pid_t pid() const { return pid_; }

 private:
  Op<Result<void>> Start(SpawnerSite site);
  // 0 once sent; else the errno of sendmsg.
  int Send(std::string_view request, std::span<const int> fds);
  // One reply within the reply deadline; nullopt on timeout, EOF or error.
  Op<std::optional<SpawnReply>> Receive(int fd);

  std::function<void(UniqueFd)> unreaped_;
  UniqueFd control_;
  UniqueFd pidfd_;
  pid_t pid_ = -1;
};

}  // namespace sandstream::sandbox
