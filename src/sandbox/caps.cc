// Capabilities and credentials in the keeper and its children: only raw syscalls, no
// allocation.
#include "sandbox/caps.h"

#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "sandbox/child_report.h"

namespace sandstream::sandbox {
namespace {

// Drops every capability outside `keep` from the bounding set (needs CAP_SETPCAP). 0 or errno.
int CutBoundingSet(uint64_t keep) {
  for (int cap = 0; cap <= 63; ++cap) {
    if ((keep & CapBit(cap)) != 0) continue;
    // EINVAL: past the kernel's last capability.
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) return errno;
  }
  return 0;
}

// Permitted and effective = `set`, inheritable empty. 0 or errno.
int SetCapabilities(uint64_t set) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  data[0].effective = data[0].permitted = static_cast<uint32_t>(set);
  data[1].effective = data[1].permitted = static_cast<uint32_t>(set >> 32);
  return ::syscall(SYS_capset, &header, data) == 0 ? 0 : errno;
}

}  // namespace

int KeepKeeperCapabilities() {
  if (const int err = CutBoundingSet(kKeeperCapabilities); err != 0) return err;
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) return errno;
  return SetCapabilities(kKeeperCapabilities);
}

void SetCredentialsInChild(uid_t uid, gid_t gid, const sock_fprog* seccomp, int report_fd) {
  const gid_t groups[] = {gid};
  if (::syscall(SYS_setgroups, 1, groups) != 0) ReportAndExit(report_fd, "caps: setgroups", errno);
  if (::syscall(SYS_setresgid, gid, gid, gid) != 0) {
    ReportAndExit(report_fd, "caps: setresgid", errno);
  }
  if (const int err = CutBoundingSet(kRootCapabilities); err != 0) {
    ReportAndExit(report_fd, "caps: drop bounding set", err);
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) {
    ReportAndExit(report_fd, "caps: clear ambient set", errno);
  }
  // With CAP_SYS_ADMIN the filter needs no no_new_privs, which would make setuid binaries
  // (sudo, su) run without their privileges. Everything below is allowed by it.
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, seccomp, 0, 0) != 0) {
    ReportAndExit(report_fd, "seccomp: load", errno);
  }
  // Securebits are the defaults: leaving uid 0 clears the permitted and effective sets, and an
  // execve as uid 0 grants the bounding set, as everywhere.
  if (::syscall(SYS_setresuid, uid, uid, uid) != 0) {
    ReportAndExit(report_fd, "caps: setresuid", errno);
  }
  if (const int err = SetCapabilities(uid == 0 ? kRootCapabilities : 0); err != 0) {
    ReportAndExit(report_fd, "caps: capset", err);
  }
}

void SetRlimitsInChild(int64_t open_files, int report_fd) {
  const rlim_t nofile = static_cast<rlim_t>(open_files);
  const struct rlimit files{nofile, nofile};
  if (::setrlimit(RLIMIT_NOFILE, &files) != 0) ReportAndExit(report_fd, "rlimit: NOFILE", errno);
  const struct rlimit core{0, 0};
  if (::setrlimit(RLIMIT_CORE, &core) != 0) ReportAndExit(report_fd, "rlimit: CORE", errno);
}

}  // namespace sandstream::sandbox
