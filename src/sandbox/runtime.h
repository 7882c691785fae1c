// The seam between supervision and isolation: a Runtime makes Sandboxes, a Sandbox spawns
// processes inside itself. No Asio, no HTTP; what has to wait for the kernel is an Op
// (op.h) that its caller runs, so nothing here ever blocks the daemon. The process layer only
// ever sees these types, so a runtime can be swapped without touching anything above.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "net/policy.h"
#include "platform/unique_fd.h"
#include "sandbox/op.h"

namespace sandstream::sandbox {

// Resource limits; every field is always set (the config supplies defaults and maximums).
struct Limits {
  int64_t memory_mb = 512;
  int64_t pids = 256;
  int64_t cpu_percent = 100;  // 100 = one full core
  int64_t disk_mb = 1024;     // writable layer (and /tmp) size
  int64_t open_files = 1024;  // RLIMIT_NOFILE
};

// The most layers a template may have: they travel to the sandbox's setup in one SCM_RIGHTS
// message (the kernel takes 253 fds at most), and overlayfs stacks at most 500.
inline constexpr size_t kMaxTemplateLayers = 128;

// The uid and gid of `user` inside every sandbox.
inline constexpr uid_t kSandboxUserId = 1000;

// A volume (service/volumes.h) mounted into a sandbox: the host directory where its filesystem
// is mounted, its files owned by the template's ids (0 is the sandbox's root, 1000 its user),
// and where it appears inside.
struct VolumeMount {
  std::string source;  // host path
  std::string path;    // absolute and normalized, inside the sandbox
  bool read_only = false;
};
inline constexpr size_t kMaxVolumeMounts = 16;

// Every detached mount a sandbox's setup receives in its go-ahead: its layers, its volumes.
inline constexpr size_t kMaxSetupMounts = kMaxTemplateLayers + kMaxVolumeMounts;

// A sandbox's network: kLoopback (a private loopback, the default), kNone (no interface up,
// not even lo) or kEgress (loopback and a veth pair to the host under an egress policy,
// net/egress.h). On the wire and in the store by name: "loopback", "none", "egress".
enum class NetworkMode { kLoopback, kNone, kEgress };
inline constexpr std::string_view NetworkModeName(NetworkMode mode) {
  switch (mode) {
    case NetworkMode::kNone:
      return "none";
    case NetworkMode::kEgress:
      return "egress";
    case NetworkMode::kLoopback:
      break;
  }
  return "loopback";
}
inline constexpr std::optional<NetworkMode> ParseNetworkMode(std::string_view name) {
  for (NetworkMode mode : {NetworkMode::kLoopback, NetworkMode::kNone, NetworkMode::kEgress}) {
    if (NetworkModeName(mode) == name) return mode;
  }
  return std::nullopt;
}

struct SandboxSpec {
  std::string id;             // "sb_..."; also the hostname inside
  std::string template_name;  // resolved template name ("base")
  // The template's layers, bottom first: directories whose files are owned by the template's
  // own ids (0 is its root), seen so inside through idmapped mounts under the sandbox's
  // writable overlay layer. Empty: the root is built from the host's system directories.
  std::vector<std::string> layers;
  // The layers go over the host's system directories, as a base sandbox's root, instead of
  // being the whole root: a snapshot of a base sandbox.
  bool host_base = false;
  // The sandbox's user, whom processes run as unless as root, and who owns /workspace: `user`
  // (1000) or its template's.
  uint32_t user_uid = 1000;
  uint32_t user_gid = 1000;
  Limits limits;
  NetworkMode network = NetworkMode::kLoopback;
  std::optional<net::EgressPolicy> egress;  // set when network is kEgress
  // The content of /etc/resolv.conf when not the host's (egress: the sandbox's resolver).
  std::string resolv_conf;
  bool allow_nested_userns = false;
  // Mounted over the root, each read-write unless read_only (at most kMaxVolumeMounts).
  std::vector<VolumeMount> volumes;
  // Not empty: the sandbox is made from this checkpoint (CheckpointTo's directory, left as it
  // is) instead of a new PID 1: the processes and files of the sandbox it was taken of, as
  // theirs were, with its own id, hostname and ids (TakeAdopted has the processes).
  std::string checkpoint;
};

// A terminal's size in character cells.
struct PtySize {
  uint16_t rows = 24;
  uint16_t cols = 80;
};

struct ProcessSpec {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH inside the sandbox
  std::vector<std::string> env;   // the complete environment, "K=V"
  std::string cwd;                // a path inside the sandbox
  bool merge_stderr = false;      // stderr shares the stdout pipe
  bool open_stdin = true;         // false: stdin is /dev/null
  bool as_root = false;           // run as root (uid 0) of the sandbox instead of its user
  std::optional<PtySize> pty;     // run on a new terminal of the sandbox's own devpts, as its
                                  // session leader; merge_stderr and open_stdin do not apply
  // Fds of the daemon's for this process that must outlive the daemon with it (its output log,
  // a terminal's relay pipe); the runtime keeps them where the next daemon finds them
  // (AdoptedProcess::kept, in this order).
  std::vector<int> keep_fds;
};

// A sandbox with egress: its slot, the host's end of its veth pair (its gateway, where its
// resolver answers) and its own.
struct EgressAddresses {
  uint32_t slot = 0;
  uint32_t gateway = 0;
  uint32_t address = 0;
};

// A started process. It leads its own process group (pgid == pid) so a group kill reaches
// everything it started.
struct SpawnedProcess {
  pid_t pid = -1;  // as the sandbox sees it (the namespace runtime), else as the daemon does
  UniqueFd pidfd;
  UniqueFd stdin_fd;   // write end; invalid when !open_stdin
  UniqueFd stdout_fd;  // read end, non-blocking; with a pty: its master (read and write)
  UniqueFd stderr_fd;  // read end, non-blocking; invalid when merge_stderr
  // Where its wait status arrives (4 bytes, then EOF) when the runtime, not the daemon, is its
  // parent; invalid when the daemon is (it waits on the pidfd).
  UniqueFd exit_fd;
};

// A writer of one file of the sandbox that runs in the sandbox's cgroups, so the pages it
// writes to the sandbox's tmpfs are charged to the sandbox's memory, not the daemon's: what is
// written to `input` (a pipe, non-blocking) goes to the file; closing `input` ends it, and its
// wait status arrives on `exit_fd` (4 bytes): exit 0, or with the errno that stopped it.
struct FileWriter {
  pid_t pid = -1;
  UniqueFd pidfd;
  UniqueFd input;
  UniqueFd exit_fd;
};

// A process an earlier daemon started that the sandbox kept: its fds as they were, its wait
// status if it has ended since, and the fds it was given to keep.
struct AdoptedProcess {
  SpawnedProcess process;
  std::optional<int> status;
  std::vector<UniqueFd> kept;
};

// What a sandbox's processes use now, from its cgroups: CPU time since it was made, memory
// charged to it (what the kernel could drop at once, its inactive file cache, not counted) and
// that file cache; and its writable filesystem's size and use, where it could be read.
struct ResourceUsage {
  uint64_t cpu_usec = 0;
  uint64_t memory_bytes = 0;
  uint64_t cache_bytes = 0;
  struct Disk {
    uint64_t used_bytes = 0;
    uint64_t total_bytes = 0;
  };
  std::optional<Disk> disk;
};

class Sandbox {
 public:
  virtual ~Sandbox() = default;
  virtual const std::string& id() const = 0;
  // Starts a process inside. Errors name the step and errno ("spawn: execve sh: ENOENT").
  // The sandbox must outlive the Op; spawns of one sandbox are run one at a time.
  virtual Op<Result<SpawnedProcess>> Spawn(ProcessSpec spec) = 0;
  // A writer for `file` (the daemon's fd of one of the sandbox's files, open until the Op
  // ends), run like a spawn: one at a time with them. Forget(pid) once its status is read.
  // nullopt where the sandbox has no memory of its own to charge: the caller writes itself.
  virtual Op<Result<std::optional<FileWriter>>> StartFileWriter(int file) {
    (void)file;
    co_return std::optional<FileWriter>();
  }
  // OOM kills seen in this sandbox so far; the process layer compares before and after.
  virtual uint64_t OomKills() const = 0;
  // Its use of CPU, memory and disk now; nullopt where the runtime does not account it.
  virtual std::optional<ResourceUsage> Usage() const { return std::nullopt; }
  // Whether its /proc/meminfo, cpuinfo, stat, uptime and /sys/devices/system/cpu/online are
  // answered from its limits (lxcfs) rather than the host's.
  virtual bool LimitsView() const { return false; }
  // SIGKILL to every process in the sandbox; idempotent, safe after Destroy.
  virtual Op<Result<void>> KillAll() = 0;
  // Pausing in place: every process of the sandbox (its PID 1 and keeper too) stopped where it
  // is, its memory kept, until Thaw. Freeze waits until the kernel says all are stopped, or
  // fails having thawed them again; kNotImplemented where the runtime or host cannot. A frozen
  // sandbox still dies whole on KillAll and Destroy, which thaw it for that.
  virtual Op<Result<void>> Freeze() {
    co_return Error{ErrorCode::kNotImplemented, "this runtime cannot pause a sandbox"};
  }
  virtual Result<void> Thaw() { return Ok{}; }
  virtual bool Frozen() const { return false; }
  // Pausing to disk: every process of the sandbox, with its memory, open files, pipes (and what
  // they hold), terminals and pids, and its writable filesystem, written to disk (where the
  // runtime keeps the sandbox's state, so that it survives a restart of the daemon or of the
  // host: Runtime::Adopt takes it back checkpointed), then ended. Its cgroups and ids stay for
  // Restore. The daemon must have stopped reading the processes' pipes first. A checkpoint that
  // fails leaves the sandbox running; the error names the step ("checkpoint: criu dump: ...").
  // kNotImplemented where the runtime or this sandbox cannot (the message says why).
  virtual Op<Result<void>> Checkpoint() {
    co_return Error{ErrorCode::kNotImplemented, "this runtime cannot checkpoint a sandbox"};
  }
  // The same as Checkpoint, into directory `dir` (which it makes), and the sandbox runs on: what
  // a sandbox made from it (SandboxSpec::checkpoint) starts as. The daemon must have stopped
  // reading the processes' pipes meanwhile. `durable`: on disk when this returns (it outlives a
  // crash of the host), else perhaps in the page cache only (a fork's, gone once they are made).
  virtual Op<Result<void>> CheckpointTo(std::string dir, bool durable) {
    (void)dir;
    (void)durable;
    co_return Error{ErrorCode::kNotImplemented, "this runtime cannot checkpoint a sandbox"};
  }
  // Brings back what Checkpoint wrote: the same processes with the same pids, each as an
  // AdoptedProcess (TakeAdopted), their pipes new. A restore that fails leaves the sandbox
  // checkpointed, its images kept for inspection.
  virtual Op<Result<void>> Restore() {
    co_return Error{ErrorCode::kNotImplemented, "this runtime cannot restore a sandbox"};
  }
  // Whether the sandbox is written to disk now, its processes ended (Checkpoint, until Restore).
  virtual bool Checkpointed() const { return false; }
  // After a restore: what is kept for `pid` holds `log` (the daemon's output log, which went on)
  // instead of the restored copy of it.
  virtual void KeepLog(pid_t pid, int log) {
    (void)pid;
    (void)log;
  }
  // `sig` to the processes of group `pgid` that are in this sandbox, and to no other process
  // whatever the number names by now (a group whose leader was reaped may have been reused).
  virtual void SignalGroup(pid_t pgid, int sig) = 0;
  // An fd that turns readable when the sandbox itself has ended (its PID 1 exited), or -1 for
  // a runtime without one; then LostCause() says why ("PID 1 was killed by SIGKILL (out of
  // memory)").
  virtual int LifeFd() const { return -1; }
  // Whether the sandbox has ended that way (its processes were killed with it).
  virtual bool Ended() const { return false; }
  virtual std::string LostCause() const { return {}; }
  // Frees processes, mounts, cgroups and directories. Idempotent.
  virtual Op<Result<void>> Destroy() = 0;
  // The processes an earlier daemon started here, for Runtime::Adopt's caller.
  virtual std::vector<AdoptedProcess> TakeAdopted() { return {}; }
  // The daemon has recorded the end of `pid`: what was kept for it may go.
  virtual void Forget(pid_t pid) { (void)pid; }
  // The daemon closed the stdin of `pid`: the copy kept with it goes too, so that the process
  // reads EOF.
  virtual void CloseStdin(pid_t pid) { (void)pid; }
  // The daemon stops and leaves the sandbox running (it is adopted at the next start): frees
  // what this object holds without touching the sandbox.
  virtual void Release() {}
  // A TCP socket (non-blocking) in the sandbox's network namespace, for the daemon to connect
  // to a port listening inside; the host's own for a runtime without one. Never waits.
  virtual Result<UniqueFd> Socket() {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) return SysError(ErrorCode::kInternal, "ports: socket", errno);
    return fd;
  }
  // Its addresses when its network is "egress".
  virtual std::optional<EgressAddresses> Egress() const { return std::nullopt; }
  // Where the sandbox's root filesystem is visible to the daemon (for the files API).
  virtual std::string RootPath() const = 0;
  // Where the daemon reads the overlay layer that holds what the sandbox changed in its
  // template's layers (whiteouts and opaque directories as overlayfs keeps them, owners as
  // host ids); empty when its root has no template layers.
  virtual std::string WritableLayer() const { return {}; }
  // The host uid (and gid) that id `inside` of the sandbox maps to, so the daemon can act as
  // that user on the sandbox's files; nullopt when the runtime maps no ids.
  virtual std::optional<uint32_t> HostId(uint32_t inside) const {
    (void)inside;
    return std::nullopt;
  }
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual std::string_view name() const = 0;
  virtual Op<Result<std::unique_ptr<Sandbox>>> Create(SandboxSpec spec) = 0;
  // Takes over a sandbox an earlier daemon created with `spec` and left running. kNotFound when
  // it is gone (the host rebooted, PID 1 died): the message says what was found.
  virtual Op<Result<std::unique_ptr<Sandbox>>> Adopt(SandboxSpec spec) {
    co_return Error{ErrorCode::kNotFound, "the " + std::string(name()) +
                                              " runtime does not keep sandbox " + spec.id +
                                              " across restarts"};
  }
  // At start-up: removes what sandboxes of an earlier daemon left behind, but for those in
  // `keep` (which are adopted).
  virtual void CleanupLeftovers(const std::vector<std::string>& keep) = 0;
};

}  // namespace sandstream::sandbox
