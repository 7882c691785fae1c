// Credentials of a sandboxed process: its uid/gid inside, the capabilities root of the sandbox's
// user namespace holds (Docker's default set, namespaced), the seccomp filter loaded before the
// uid switch, rlimits. Child side, async-signal-safe.
#pragma once

#include <linux/capability.h>
#include <linux/filter.h>
#include <sys/types.h>

#include <cstdint>

namespace sandstream::sandbox {

constexpr uint64_t CapBit(int cap) {
  return uint64_t{1} << cap;
}

// Docker's default set: what root of a sandbox holds, in its own user namespace only (over
// files of its own ids, in its own network namespace, over its own processes). It is also the
// bounding set of every process, so no setuid binary or file capability gains more.
inline constexpr uint64_t kRootCapabilities =
    CapBit(CAP_CHOWN) | CapBit(CAP_DAC_OVERRIDE) | CapBit(CAP_FOWNER) | CapBit(CAP_FSETID) |
    CapBit(CAP_KILL) | CapBit(CAP_SETGID) | CapBit(CAP_SETUID) | CapBit(CAP_SETPCAP) |
    CapBit(CAP_NET_BIND_SERVICE) | CapBit(CAP_NET_RAW) | CapBit(CAP_SYS_CHROOT) |
    CapBit(CAP_MKNOD) | CapBit(CAP_AUDIT_WRITE) | CapBit(CAP_SETFCAP);

// The keeper's: the root set, which its children start with, plus CAP_SYS_ADMIN in the
// sandbox's user namespace, with which a child loads its seccomp filter without no_new_privs
// (and then drops it from its bounding set).
inline constexpr uint64_t kKeeperCapabilities = kRootCapabilities | CapBit(CAP_SYS_ADMIN);

// In the keeper, root of the sandbox's user namespace: bounding, permitted and effective sets
// cut to kKeeperCapabilities, inheritable and ambient sets empty. Securebits stay at their
// defaults (nothing locked), so that uid changes in its children work as they do anywhere.
// 0 or the errno of the step that failed.
int KeepKeeperCapabilities();

// In a child of the keeper, before execve: supplementary groups and gid, the bounding set cut
// to kRootCapabilities, the seccomp filter (loaded while CAP_SYS_ADMIN is still held), then the
// uid. Root keeps kRootCapabilities; any other uid has none (the kernel clears them when root
// switches to it) until it execs a setuid binary or one with file capabilities.
void SetCredentialsInChild(uid_t uid, gid_t gid, const sock_fprog* seccomp, int report_fd);

// RLIMIT_NOFILE = `open_files`, RLIMIT_CORE = 0.
void SetRlimitsInChild(int64_t open_files, int report_fd);

}  // namespace sandstream::sandbox
