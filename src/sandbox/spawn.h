// Starting a process in a running sandbox: the daemon prepares its pipes (or terminal) and one
// request for the sandbox's keeper, its PID 1 (spawner.h), which clones the process as its own
// child; the process drops every privilege, loads seccomp and execs (launch.h). The daemon gets
// its pidfd and reads its report pipe.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <cstdint>
#include <string>

#include "sandbox/runtime.h"
#include "sandbox/spawner.h"

namespace sandstream::sandbox {

struct SpawnContext {
  Spawner* spawner = nullptr;
  const sock_fprog* seccomp = nullptr;
  int64_t open_files = 1024;
  std::string ptmx;        // for a pty: the sandbox's own ptmx as the daemon sees it
  uid_t host_id_base = 0;  // host uid and gid of the sandbox's root (owner of its kept files)
  uid_t user_uid = 1000;   // the sandbox's user (SandboxSpec::user_uid)
  gid_t user_gid = 1000;
};

// The process a kept entry describes, its fds moved out of `entry`.
Result<AdoptedProcess> FromKept(KeptEntry& entry);

// Errors: kInvalidRequest when argv[0] cannot be exec'd ("spawn: execve sh: ENOENT"),
// kSandboxSetupFailed for any other step. `ctx.spawner` must outlive the Op.
Op<Result<SpawnedProcess>> SpawnInSandbox(SpawnContext ctx, ProcessSpec spec);

}  // namespace sandstream::sandbox
