// The keeper's wire format (spawner.h): one SOCK_SEQPACKET message per request, a flat buffer
// plus its fds by SCM_RIGHTS. A spawn is answered by one SpawnReply (with the process's pidfd);
// the other requests keep, list and forget what the keeper holds for a daemon that may come and
// go. Parsing allocates nothing and bounds every count and length by the message it came in.
#pragma once

#include <linux/filter.h>

#include <cstddef>
#include <cstdint>

#include "sandbox/launch.h"

namespace sandstream::sandbox {

inline constexpr uint32_t kSpawnRequestMagic = 0x32505353;  // "SSP2"
inline constexpr size_t kMaxSpawnRequestBytes = size_t{4} << 20;
inline constexpr uint32_t kMaxSeccompInstructions = BPF_MAXINSNS;
inline constexpr uid_t kMaxSpawnUid = 65534;
// The version of everything below; a keeper says it in its hello. 5: the keeper is PID 1.
inline constexpr uint32_t kKeeperVersion = 5;
// Where PID 1 listens for a daemon started later: this abstract unix socket name (a leading
// NUL, then these bytes, unterminated) in the sandbox's own network namespace. It takes only
// peers outside the sandbox's pid namespace, and the daemon only a listener PID 1 made.
inline constexpr char kKeeperSocketName[] = "sandstream-keeper";
// Fds the keeper holds for one process (the daemon's pipe ends, its exit pipe's read end, its
// output log) or for the sandbox (PID 1's pidfd; of an earlier build's sandbox, also the
// control socket of its PID 1 apart).
inline constexpr size_t kMaxHeldFds = 6;
// stdin (with kSpawnStdin), stdout, stderr, the report pipe's write end, the exit pipe's write
// end, then `held` fds, in this order.
inline constexpr size_t kMaxSpawnFds = 5 + kMaxHeldFds;

enum SpawnFlags : uint32_t {
  kSpawnTty = 1,         // 0, 1 and 2 are a terminal
  kSpawnStdin = 2,       // a stdin fd comes first; else /dev/null
  kSpawnSearchPath = 4,  // a PATH string follows cwd: search argv[0] in it
};

// The message: this header; `filter_len` sock_filter instructions; argc + envc + 2 zeroed
// pointer-sized slots, which the spawner fills with the argv and envp arrays in place; then
// the strings, each NUL-terminated: cwd, the PATH (with kSpawnSearchPath), argc arguments,
// envc environment entries. Nothing may follow.
struct SpawnRequestHeader {
  uint32_t magic;
  uint32_t flags;
  int64_t open_files;
  uint32_t uid;
  uint32_t gid;
  uint32_t argc;  // >= 1
  uint32_t envc;
  uint32_t filter_len;  // 1 .. kMaxSeccompInstructions
  uint32_t held;        // 0 .. kMaxHeldFds
  uint32_t tag;         // the daemon's, returned with the held fds
  uint32_t reserved;    // 0
};
static_assert(sizeof(SpawnRequestHeader) % alignof(char*) == 0);
static_assert(sizeof(sock_filter) % alignof(char*) == 0);

// The answer to a spawn: the new process's host pid and, by SCM_RIGHTS, its pidfd; or -1 and
// the errno of clone (EBADMSG, which clone never returns, for a request it refused). At
// start-up, pid 0 and err 0 say it is ready; pid -1 and an errno that it could not start.
struct SpawnReply {
  int32_t pid;
  int32_t err;
};

// What a keeper holds for a process, in this order: the exit pipe's read end, stdout's read end
// (or the terminal's master), then fds per bit of the spawn's tag, in bit order: stderr's read
// end, stdin's write end, and last the fds the daemon asked to keep (ProcessSpec::keep_fds, one
// or more). kKeptTerminal holds none.
enum KeptFds : uint32_t {
  kKeptStderr = 1,
  kKeptStdin = 2,
  kKeptTerminal = 4,
  kKeptLog = 8,
  kKeptCopy = 16,  // a file writer (kCopy): holds none, means nothing to a daemon started later
};
// Where the fd of `bit` is among the held fds of a spawn tagged `tag`; -1 if it has none.
constexpr int HeldIndex(uint32_t tag, uint32_t bit) {
  if ((tag & bit) == 0 || bit == kKeptTerminal) return -1;
  int index = 2;
  for (uint32_t b = 1; b < bit; b <<= 1) index += (tag & b) != 0 && b != kKeptTerminal;
  return index;
}
static_assert(HeldIndex(kKeptStderr | kKeptStdin | kKeptLog, kKeptLog) == 4);
static_assert(HeldIndex(kKeptStdin, kKeptStdin) == 2);

// The keeper's other messages: a 16-byte KeeperMessage, with fds for kHold and kEntry.
enum KeeperMessageType : uint32_t {
  kHello = 0x4b535301,  // keeper -> daemon on every connection: version, keeper pid
  kHold = 0x4b535302,   // daemon -> keeper: the sandbox's own fds (replaces earlier ones)
  kList = 0x4b535303,   // daemon -> keeper: send every entry, then kEnd
  kEntry = 0x4b535304,  // keeper -> daemon: pid (0: the sandbox), tag, status, held fds
  kEnd = 0x4b535305,
  kForget = 0x4b535306,   // daemon -> keeper: drop what is held for pid
  kStop = 0x4b535307,     // daemon -> keeper: exit (the sandbox is being deleted)
  kListen = 0x4b535308,   // (retired: the socket later daemons connect to; PID 1 makes its own)
  kRelease = 0x4b535309,  // daemon -> keeper: close pid's held fd of KeptFds bit `tag` and clear
                          // the bit (stdin closed: the child must see EOF); none held, no-op
  kUpgrade = 0x4b53530a,  // daemon -> keeper: exec the keeper executable sent with it (one fd),
                          // handing everything over (KeeperState); it says kHello again
  kCopy =
      0x4b53530b,  // daemon -> keeper: a child copies the first fd to the second until EOF (fds:
                   // source, destination, exit pipe's write end); answered as a spawn.
                   // It runs in the sandbox's cgroups, so what it writes to the sandbox's
                   // tmpfs is charged to the sandbox's memory, not the daemon's. It exits
                   // 0, or with the errno that stopped it.
  kKillAll = 0x4b53530c,  // daemon -> PID 1: SIGKILL to every other process of the sandbox
  kKilled = 0x4b53530d,   // PID 1 -> daemon: done (status 0), or ENOTSUP from a keeper apart
  kReplace = 0x4b53530e,  // daemon -> keeper: hold the fd sent (one) instead of pid's held fd of
                          // KeptFds bit `tag` (after a restore, the daemon's output log replaces
                          // the restored copy); none held there, the fd is closed
};

// The hand-over of kUpgrade: a keeper execs the new executable in place (its children stay its
// children) with every fd it holds left open and this table in a memfd, named by the
// environment variable kKeeperStateEnv. The message types above, KeeperMessage and this layout
// never change: a keeper of any later version reads them.
inline constexpr const char* kKeeperStateEnv = "SANDSTREAM_KEEPER_STATE";
inline constexpr uint32_t kKeeperStateMagic = 0x5353544bu;  // "KTSS"
struct KeeperStateHeader {
  uint32_t magic;
  uint32_t version;  // of the keeper that wrote it
  int32_t control;   // the connected daemon, or -1
  int32_t listener;
  uint32_t sandbox_held_count;
  int32_t sandbox_held[kMaxHeldFds];
  uint32_t entries;  // KeeperStateEntry records that follow
};
struct KeeperStateEntry {
  int32_t pid;
  int32_t status;  // once reaped, else -1
  uint32_t tag;
  uint32_t flags;  // 1: reaped, 2: forget once reaped
  int32_t pidfd;
  int32_t exit_fd;  // -1 once the status is written
  uint32_t held_count;
  int32_t held[kMaxHeldFds];
};

struct KeeperMessage {
  uint32_t type;
  int32_t pid;     // kHello: the keeper's own pid
  uint32_t tag;    // kHello: kKeeperVersion; kEntry: the spawn's tag
  int32_t status;  // kEntry: the wait status once reaped, else -1
};
static_assert(sizeof(KeeperMessage) == 16);

struct ParsedSpawnRequest {
  LaunchSpec launch;
  sock_fprog filter{};
  int exit_fd = -1;  // where the keeper writes the wait status once it reaps the process
  const int* held = nullptr;
  uint32_t held_count = 0;
  uint32_t tag = 0;
};

// Points `out` into `buf` (which must be pointer-aligned) and `fds`; false if the message is
// malformed in any way or the fds do not match its flags.
bool ParseSpawnRequest(char* buf, size_t len, const int* fds, size_t fd_count,
                       ParsedSpawnRequest* out);

}  // namespace sandstream::sandbox
