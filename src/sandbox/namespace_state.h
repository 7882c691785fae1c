// What the namespace runtime shares with its sandboxes (they hold it by shared_ptr and may
// outlive the runtime's owner for a while): options, host facts, the compiled seccomp
// profiles, the embedded executables, the id ranges and the inits still to be reaped.
#pragma once

#include <sys/wait.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "platform/unique_fd.h"
#include "sandbox/cgroup.h"
#include "sandbox/limits_view.h"
#include "sandbox/mounts.h"
#include "sandbox/namespace_runtime.h"
#include "sandbox/seccomp.h"
#include "sandbox/userns.h"

namespace sandstream::sandbox {

struct NamespaceRuntime::State {
  explicit State(NamespaceRuntimeOptions o)
      : options(std::move(o)),
        ids(options.host_id_base, options.host_id_range, options.max_sandboxes) {}

  NamespaceRuntimeOptions options;
  HostSystem host;
  std::optional<Cgroups> cgroups;
  SeccompProgram seccomp;         // default profile
  SeccompProgram seccomp_userns;  // the same, nested user namespaces allowed
  UniqueFd init_exe;      // every sandbox's PID 1 and keeper (init_main.cc), to upgrade keepers
  std::string init_path;  // the same as a file, bound into each sandbox (embedded.h)
  int64_t nofile_hard = 0;
  UniqueFd host_netns;               // the daemon's own network namespace, to come back to (Socket)
  std::unique_ptr<LimitsView> view;  // null: sandboxes see the host's /proc/meminfo ...
  // Sandboxes let go alive for the next daemon: lxcfs must outlive this one for them.
  size_t released = 0;

  std::mutex mu;  // guards ids and dying
  IdRangePool ids;
  // Pidfds of killed inits that could not be reaped yet: PID 1 stays until the daemon has
  // reaped its own children in that namespace.
  std::vector<UniqueFd> dying;

  void Dying(UniqueFd pidfd) {
    std::lock_guard lock(mu);
    dying.push_back(std::move(pidfd));
  }

  void ReapDying() {
    std::lock_guard lock(mu);
    std::erase_if(dying, [](const UniqueFd& fd) {
      siginfo_t info{};
      return ::waitid(P_PIDFD, static_cast<id_t>(fd.get()), &info, WEXITED | WNOHANG) == 0 &&
             info.si_pid != 0;
    });
  }
};

}  // namespace sandstream::sandbox
