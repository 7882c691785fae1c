// Dropping privileges in a child after clone()/setns(): only raw syscalls, no allocation.
#include "sandbox/caps.h"

#include <grp.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "sandbox/child_report.h"

namespace sandstream::sandbox {

void DropPrivilegesInChild(uid_t uid, gid_t gid, uint64_t keep_mask, int report_fd) {
  const gid_t groups[] = {gid};
  if (::syscall(SYS_setgroups, 1, groups) != 0) ReportAndExit(report_fd, "caps: setgroups", errno);
  if (::syscall(SYS_setresgid, gid, gid, gid) != 0)
    ReportAndExit(report_fd, "caps: setresgid", errno);
  // Keep capabilities across the uid switch so the sets can be cut exactly below; without
  // NOROOT an exec as uid 0 would regain the full set.
  const unsigned long bits = SECBIT_KEEP_CAPS | SECBIT_NOROOT | SECBIT_NOROOT_LOCKED |
                             SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED |
                             SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
  if (::prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0) {
    ReportAndExit(report_fd, "caps: securebits", errno);
  }
  if (::syscall(SYS_setresuid, uid, uid, uid) != 0)
    ReportAndExit(report_fd, "caps: setresuid", errno);
  for (int cap = 0; cap <= 63; ++cap) {
    if (keep_mask & (uint64_t{1} << cap)) continue;
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) {
      ReportAndExit(report_fd, "caps: drop bounding set", errno);
    }
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) {
    ReportAndExit(report_fd, "caps: clear ambient set", errno);
  }
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  data[0].effective = data[0].permitted = static_cast<uint32_t>(keep_mask);
  data[1].effective = data[1].permitted = static_cast<uint32_t>(keep_mask >> 32);
  if (::syscall(SYS_capset, &header, data) != 0) ReportAndExit(report_fd, "caps: capset", errno);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    ReportAndExit(report_fd, "caps: no_new_privs", errno);
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
