// Credentials of a sandboxed process: its uid/gid inside, every capability dropped (bounding
// and ambient sets too), securebits locked, no_new_privs, rlimits. Child side, async-signal-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace sandstream::sandbox {

// Switches to `uid`/`gid` of the sandbox's user namespace and drops every capability except
// those in `keep_mask` (bit n = capability n), which stay permitted and effective.
void DropPrivilegesInChild(uid_t uid, gid_t gid, uint64_t keep_mask, int report_fd);

// RLIMIT_NOFILE = `open_files`, RLIMIT_CORE = 0.
void SetRlimitsInChild(int64_t open_files, int report_fd);

}  // namespace sandstream::sandbox
