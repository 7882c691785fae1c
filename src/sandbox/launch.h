// The steps of a sandboxed process between clone() and execve(), run by the sandbox's PID 1
// (init_main.cc) in each new process: no allocation, no C++ runtime, only raw syscalls.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <cstdint>

namespace sandstream::sandbox {

// Everything the process needs; the pointers refer to memory prepared before clone().
struct LaunchSpec {
  char* const* argv = nullptr;  // argv[0] is the command, null-terminated
  char* const* envp = nullptr;  // null-terminated
  // The PATH to search argv[0] in, like execvp; nullptr when argv[0] names a file (has a '/').
  const char* search_path = nullptr;
  const char* cwd = nullptr;
  const sock_fprog* seccomp = nullptr;
  int64_t open_files = 1024;
  uid_t uid = 0;
  gid_t gid = 0;
  bool tty = false;   // 0, 1 and 2 are a terminal: become its session leader
  int stdin_fd = -1;  // -1: /dev/null
  int stdout_fd = -1;
  int stderr_fd = -1;
  int report_fd = -1;  // close-on-exec; gets a ChildFailure record on failure
};

// In the new process, inside the sandbox's namespaces and cgroups, still root of its user
// namespace with the keeper's capabilities: new session or process group, default signals,
// stdio, rlimits, credentials and seccomp (caps.h), cwd, execve. Reports the failed step on
// `report_fd` and exits 127.
[[noreturn]] void RunProcessInChild(const LaunchSpec& l);

}  // namespace sandstream::sandbox
