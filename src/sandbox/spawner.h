// The daemon side of a sandbox's keeper, which is its PID 1 (init_main.cc): it clones each new
// process (so the daemon's own memory is never copied and the sandbox's cgroups are never
// joined again per process), is its parent, and keeps for the daemon what must outlive it; a
// daemon started again connects to it and takes it all back.
#pragma once

#include <sys/types.h>

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "platform/unique_fd.h"
#include "sandbox/op.h"
#include "sandbox/spawn_request.h"

struct sock_fprog;

namespace sandstream::sandbox {

// A connected pair of control sockets: the daemon's end, and the one a sandbox's PID 1 is
// given as fd 3. One message is one request, up to kMaxSpawnRequestBytes.
struct ControlPair {
  UniqueFd daemon;
  UniqueFd init;
};
Result<ControlPair> MakeControlPair();

// A socket connected to the keeper of an earlier build's sandbox, which listens at `path` in
// the sandbox's state directory.
Result<UniqueFd> ConnectToPath(const std::string& path);

// A spawned process as the keeper answered: its pid (in the keeper's pid namespace: the
// sandbox's, or the host's for an earlier build's keeper apart from PID 1) and pidfd.
struct Launched {
  pid_t pid = -1;
  UniqueFd pidfd;
};

// What a keeper holds for a process (or, with pid 0, for the sandbox), as it hands it back.
struct KeptEntry {
  pid_t pid = 0;
  uint32_t tag = 0;
  std::optional<int> status;  // the wait status, once the keeper reaped the process
  std::vector<UniqueFd> fds;  // pidfd first (not for pid 0), then the held fds in order
};

// What one process needs, in the daemon's terms; see spawn_request.h for the wire format.
struct SpawnRequest {
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string cwd;                         // absolute
  std::optional<std::string> search_path;  // PATH to search argv[0] in (none with a '/')
  uid_t uid = 0;
  gid_t gid = 0;
  int64_t open_files = 1024;
  const sock_fprog* seccomp = nullptr;
  bool tty = false;
  bool has_stdin = false;
  uint32_t held = 0;  // fds after the exit pipe's write end that the keeper holds
  uint32_t tag = 0;
};

// The flat message; strings end at their first NUL, as execve would see them. kInvalidRequest
// when it exceeds kMaxSpawnRequestBytes.
Result<std::string> EncodeSpawnRequest(const SpawnRequest& request);

class Spawner {
 public:
  Spawner() = default;
  Spawner(const Spawner&) = delete;
  Spawner& operator=(const Spawner&) = delete;

  // Takes the control socket of a sandbox's PID 1 as it starts: awaits its hello, then gives it
  // `held`, the sandbox's own fds, which ends the sandbox's setup for it.
  Op<Result<void>> Attach(UniqueFd control, std::vector<int> held);
  // Takes over the keeper an earlier daemon started, on `connected`, a socket connected to
  // where it listens; one of another version (an earlier build's) is upgraded to `keeper_exe`
  // first.
  Op<Result<void>> Connect(UniqueFd connected, int keeper_exe);
  // Has the keeper exec `exe_fd` in place, handing over everything it holds; it answers with
  // its new version.
  Op<Result<void>> Upgrade(int exe_fd);
  // Everything the keeper holds, handed back (it keeps its copies).
  Op<Result<std::vector<KeptEntry>>> List();
  // Sends an encoded request with its fds (stdin if any, stdout, stderr, report pipe, exit
  // pipe, then the held ones) and returns the new process. Errors: "spawn: keeper: ...",
  // "spawn: clone: ...". The strings and fds must stay valid until the Op ends; one request at
  // a time.
  Op<Result<Launched>> Launch(std::string_view request, std::span<const int> fds);
  // A writer of one file in the sandbox's cgroups (kCopy): it copies `source` (a pipe's read
  // end) to `destination` until EOF, and its wait status arrives on `exit_pipe` (a write end):
  // exit 0, or the errno that stopped it. The fds must stay open until the Op ends.
  Op<Result<Launched>> Copy(int source, int destination, int exit_pipe);
  // The keeper may let go of what it holds for `pid` (its end is recorded).
  void Forget(pid_t pid);
  // The keeper closes the fd it holds for `pid` under KeptFds bit `bit`, if it holds one.
  void Release(pid_t pid, uint32_t bit);
  // The keeper holds `fd` instead of the fd it holds for `pid` under KeptFds bit `bit`.
  void Replace(pid_t pid, uint32_t bit, int fd);
  // PID 1 kills every other process of the sandbox (in one pass) and says so: kKillAll.
  Op<Result<void>> KillAll();
  // Asks the keeper to exit (what it holds is closed; PID 1 kills the rest of its sandbox
  // first) and lets go of it.
  void Stop();
  // Lets go of the keeper, which lives on (the daemon stops; the next one connects to it).
  void Leave();
  // Whether a keeper answers on the control socket (false once it died or hung up).
  bool connected() const;
  // Whether the keeper is its sandbox's PID 1; false for an earlier build's keeper apart, in
  // the host's pid namespace, whose pids are the host's.
  bool is_init() const { return pid_ == 1; }
  // The protocol version the keeper said hello with.
  uint32_t version() const { return version_; }

 private:
  // One message within the reply deadline, with the fds it carried; nullopt on timeout, EOF or
  // error.
  struct Message {
    std::string bytes;
    std::vector<UniqueFd> fds;
  };
  Op<std::optional<Message>> Receive();
  // 0 once sent; else the errno of sendmsg.
  int Send(std::string_view request, std::span<const int> fds);
  int Send(const KeeperMessage& m, std::span<const int> fds = {});
  // The keeper's answer to a spawn or a copy.
  Op<Result<Launched>> AwaitLaunched();
  Op<Result<void>> AwaitHello(std::string_view context, bool accept_other_version = false);

  UniqueFd control_;
  pid_t pid_ = -1;  // as the keeper said in its hello
  uint32_t version_ = 0;
};

}  // namespace sandstream::sandbox
