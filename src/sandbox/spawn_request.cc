// Parsing a spawn request (spawn_request.h): compiled into the sandbox's PID 1 and the library.
#include "sandbox/spawn_request.h"

#include <cstring>

namespace sandstream::sandbox {
namespace {

// The NUL-terminated string at `*pos`, advancing past it; nullptr when none ends before `end`.
char* NextString(char* buf, size_t end, size_t* pos) {
  if (*pos >= end) return nullptr;
  char* s = buf + *pos;
  void* nul = std::memchr(s, '\0', end - *pos);
  if (nul == nullptr) return nullptr;
  *pos = static_cast<size_t>(static_cast<char*>(nul) - buf) + 1;
  return s;
}

}  // namespace

bool ParseSpawnRequest(char* buf, size_t len, const int* fds, size_t fd_count,
                       ParsedSpawnRequest* out) {
  if (reinterpret_cast<uintptr_t>(buf) % alignof(char*) != 0) return false;
  SpawnRequestHeader h;
  if (len < sizeof h) return false;
  std::memcpy(&h, buf, sizeof h);
  if (h.magic != kSpawnRequestMagic) return false;
  if ((h.flags & ~uint32_t{kSpawnTty | kSpawnStdin | kSpawnSearchPath}) != 0) return false;
  if (h.open_files <= 0 || h.uid > kMaxSpawnUid || h.gid > kMaxSpawnUid || h.reserved != 0 ||
      h.argc == 0)
    return false;
  if (h.filter_len == 0 || h.filter_len > kMaxSeccompInstructions) return false;
  const bool has_stdin = (h.flags & kSpawnStdin) != 0;
  if (h.held > kMaxHeldFds) return false;
  const size_t child_fds = has_stdin ? 4u : 3u;
  if (fd_count != child_fds + 1 + h.held) return false;
  for (size_t i = 0; i < fd_count; ++i) {
    if (fds[i] < 0) return false;
  }

  // 64-bit sums of 32-bit counts cannot overflow; each is checked against what is left.
  size_t pos = sizeof h;
  const uint64_t filter_bytes = uint64_t{h.filter_len} * sizeof(sock_filter);
  if (filter_bytes > len - pos) return false;
  sock_filter* filter = reinterpret_cast<sock_filter*>(buf + pos);
  pos += filter_bytes;
  const uint64_t slots = uint64_t{h.argc} + h.envc + 2;
  if (slots * sizeof(char*) > len - pos) return false;
  char** argv = reinterpret_cast<char**>(buf + pos);
  char** envp = argv + h.argc + 1;
  pos += slots * sizeof(char*);

  const char* cwd = NextString(buf, len, &pos);
  if (cwd == nullptr || cwd[0] != '/') return false;
  const char* search_path = nullptr;
  if (h.flags & kSpawnSearchPath) {
    search_path = NextString(buf, len, &pos);
    if (search_path == nullptr) return false;
  }
  for (uint32_t i = 0; i < h.argc; ++i) {
    argv[i] = NextString(buf, len, &pos);
    if (argv[i] == nullptr) return false;
  }
  argv[h.argc] = nullptr;
  for (uint32_t i = 0; i < h.envc; ++i) {
    envp[i] = NextString(buf, len, &pos);
    if (envp[i] == nullptr) return false;
  }
  envp[h.envc] = nullptr;
  if (pos != len) return false;
  // Without a '/', argv[0] must be searched for: execve would take it relative to the cwd.
  if (search_path == nullptr && std::strchr(argv[0], '/') == nullptr) return false;

  *out = ParsedSpawnRequest{};
  out->filter.len = static_cast<unsigned short>(h.filter_len);
  out->filter.filter = filter;
  LaunchSpec& l = out->launch;
  l.argv = argv;
  l.envp = envp;
  l.search_path = search_path;
  l.cwd = cwd;
  l.seccomp = &out->filter;
  l.open_files = h.open_files;
  l.uid = h.uid;
  l.gid = h.gid;
  l.tty = (h.flags & kSpawnTty) != 0;
  size_t f = 0;
  l.stdin_fd = has_stdin ? fds[f++] : -1;
  l.stdout_fd = fds[f++];
  l.stderr_fd = fds[f++];
  l.report_fd = fds[f++];
  out->exit_fd = fds[f++];
  out->held = fds + f;
  out->held_count = h.held;
  out->tag = h.tag;
  return true;
}

}  // namespace sandstream::sandbox
