// The spawner's wire format (spawner.h): one SOCK_SEQPACKET message per process, a flat
// buffer plus its fds by SCM_RIGHTS, answered by one SpawnReply. Parsing allocates nothing
// and bounds every count and length by the message it came in.
#pragma once

#include <linux/filter.h>

#include <cstddef>
#include <cstdint>

#include "sandbox/launch.h"

namespace sandstream::sandbox {

inline constexpr uint32_t kSpawnRequestMagic = 0x31505353;  // "SSP1"
inline constexpr size_t kMaxSpawnRequestBytes = size_t{4} << 20;
inline constexpr uint32_t kMaxSeccompInstructions = BPF_MAXINSNS;
inline constexpr uid_t kMaxSpawnUid = 65534;
// stdin (with kSpawnStdin), stdout, stderr, the report pipe's write end, in this order.
inline constexpr size_t kMaxSpawnFds = 4;

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
  uint32_t argc;  // >= 1
  uint32_t envc;
  uint32_t filter_len;  // 1 .. kMaxSeccompInstructions
};
static_assert(sizeof(SpawnRequestHeader) % alignof(char*) == 0);
static_assert(sizeof(sock_filter) % alignof(char*) == 0);

// The spawner's answer: the new process's host pid, or -1 and the errno of clone() (EBADMSG,
// which clone never returns, for a request it refused). At start-up, pid 0 and err 0 say it
// is ready; pid -1 and an errno that it could not start.
struct SpawnReply {
  int32_t pid;
  int32_t err;
};

struct ParsedSpawnRequest {
  LaunchSpec launch;
  sock_fprog filter{};
};

// Points `out` into `buf` (which must be pointer-aligned) and `fds`; false if the message is
// malformed in any way or the fds do not match its flags.
bool ParseSpawnRequest(char* buf, size_t len, const int* fds, size_t fd_count,
                       ParsedSpawnRequest* out);

}  // namespace sandstream::sandbox
