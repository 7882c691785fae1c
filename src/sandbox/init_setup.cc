// The post-clone3 zone: the child's setup of a sandbox, from the clone to the exec of PID 1,
// as one ordered list of steps. It runs in a copy of the daemon's address space whose other
// threads are gone (their locks may be held forever), so it must:
// - allocate nothing (no new, no std::string or std::vector, no malloc through libc), throw
//   nothing and log nothing: everything it needs was prepared by the parent (InitLaunch);
// - take no lock and call only async-signal-safe functions (raw syscalls, memcpy);
// - report a failure only as {step, errno} on the close-on-exec report pipe, then _exit
//   (ReportAndExit): the parent names the step in its error. EOF on that pipe means PID 1
//   was exec'd. A parent that gave up or died ends the child with a plain _exit(1);
// - touch only what InitLaunch names (its fds, the state directory and the plan's paths below
//   it) and the settings of the new namespaces it is in (ids, hostname, shm_rmid_forced, lo).
// Every step passes through InjectedFault() so that the fault tests can fail each in turn.
#include "sandbox/init_setup.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>

#include "platform/scm_rights.h"
#include "sandbox/child_report.h"
#include "sandbox/embedded.h"
#include "sandbox/fault.h"
#include "sandbox/net.h"
#include "sandbox/runtime.h"
#include "sandbox/userns.h"

namespace sandstream::sandbox {
namespace {

// Reads the parent's go-ahead, with the template's layers and the volumes as detached mounts,
// and puts them under the numbers the plan names. False if the parent gave up.
bool AwaitGoAhead(const InitLaunch& l) {
  char go = 0;
  ReceivedFds<kMaxSetupMounts> layers;
  if (ReceiveWithFds(l.sync_fd, &go, 1, layers) != 1) return false;
  if (layers.count != l.layer_count || !layers.complete) {
    ReportAndExit(l.report_fd, "template: receive layers", EPROTO);
  }
  for (size_t i = 0; i < layers.count; ++i) {
    const int fd = layers.fds[i];
    if (InjectedFault() || ::dup3(fd, l.layer_fds[i], O_CLOEXEC) < 0) {
      ReportAndExit(l.report_fd, "template: receive layers", errno);
    }
    ::close(fd);
  }
  return true;
}

}  // namespace

[[noreturn]] void RunInitSetup(const InitLaunch& l) {
  for (int fd : l.parent_fds) ::close(fd);
  if (!AwaitGoAhead(l)) ::_exit(1);  // the parent gave up, or died; it reports its own error

  // Still the host's uid 0 here, so the path's ancestors are searchable whatever their mode;
  // from now on every path of the plan is relative to this directory.
  if (InjectedFault() || ::chdir(l.dir) != 0) ReportAndExit(l.report_fd, "state: chdir", errno);
  BecomeNamespaceRootInChild(l.report_fd);
  // Only now, inside the sandbox's cgroups, so that they are the namespace's root.
  if (InjectedFault() || ::unshare(CLONE_NEWCGROUP) != 0) {
    ReportAndExit(l.report_fd, "cgroupns: unshare", errno);
  }
  if (InjectedFault() || ::sethostname(l.hostname, l.hostname_len) != 0) {
    ReportAndExit(l.report_fd, "uts: sethostname", errno);
  }
  // A SysV segment outlives its processes by default: memory the OOM killer could not free.
  // The setting is the sandbox's IPC namespace's; the sandbox's /proc/sys will be read-only.
  const int rmid = ::open("/proc/sys/kernel/shm_rmid_forced", O_WRONLY | O_CLOEXEC);
  if (rmid < 0 || InjectedFault() || ::write(rmid, "1", 1) != 1) {
    ReportAndExit(l.report_fd, "ipc: shm_rmid_forced", errno);
  }
  ::close(rmid);
  const int layer = BuildRootInChild(*l.plan, l.report_fd);
  if (l.loopback) LoopbackUpInChild(l.report_fd);
  if (InjectedFault() || ::setsid() < 0) ReportAndExit(l.report_fd, "init: setsid", errno);
  // From its path inside the new root, where a checkpoint finds it again.
  const int exe = ::open(kInitPathInside, O_PATH | O_CLOEXEC);
  if (InjectedFault() || exe < 0) ReportAndExit(l.report_fd, "init: open executable", errno);
  char name[] = "sandstream-init";
  char* const argv[] = {name, nullptr};
  ExecEmbeddedInChild(exe, argv, l.control_fd, l.report_fd, layer);
}

}  // namespace sandstream::sandbox
