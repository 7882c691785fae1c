// Starting a process in a running sandbox: a forked helper joins the sandbox's cgroups and
// namespaces (one setns on init's pidfd) and clones the process with CLONE_PARENT, so that it
// is the daemon's own child; the process drops every privilege, loads seccomp and execs.
#pragma once

#include <linux/filter.h>

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "sandbox/runtime.h"

namespace sandstream::sandbox {

struct SpawnContext {
  int init_pidfd = -1;
  std::vector<int> cgroup_procs;  // cgroup.procs fds to write "0" to
  const sock_fprog* seccomp = nullptr;
  int64_t open_files = 1024;
  std::string ptmx;         // for a pty: the sandbox's own ptmx as the daemon sees it
  uid_t host_id_base = 0;   // host uid and gid of the sandbox's root (a terminal's owner is mapped)
};

// Errors: kInvalidRequest when argv[0] cannot be exec'd ("spawn: execve sh: ENOENT"),
// kSandboxSetupFailed for any other step.
Result<SpawnedProcess> SpawnInSandbox(const SpawnContext& ctx, const ProcessSpec& spec);

}  // namespace sandstream::sandbox
