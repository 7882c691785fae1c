// The sandbox's root filesystem as a plan of typed steps: the parent builds the plan (reading
// the host, allocating); the child executes it after clone() without allocating, then pivots.
// Never exposes the host's /root, /home, /var, /tmp or the daemon's data directory.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sandbox/cgroup.h"
#include "sandbox/runtime.h"

namespace sandstream::sandbox {

enum class MountOp {
  kTmpfs,         // mount a tmpfs at path with `options`
  kOverlay,       // mount an overlay at path with `options`
  kBindReadOnly,  // bind `source` (recursively) at the directory path, read-only, nosuid, nodev
  kReadOnly,      // make path, if it exists, a read-only bind of itself (recursively)
  kMask,          // hide path, if it exists: /dev/null over a file, an empty read-only tmpfs over
                  // a directory
  kBind,          // bind `source` at path
  kBindDevice,    // bind the host device node `source` onto the file path
  kBindFile,      // bind `source` over path if path exists (template files that must differ)
  kMkdir,         // mkdir path with mode and owner; an existing directory is fine
  kSymlink,       // symlink path -> source
  kWriteFile,     // create path with `source` as its content, mode and owner
  kProc,          // a new proc instance (of the sandbox's pid namespace)
  kDevpts,        // a new devpts instance with `options`
  kAttach,        // attach the detached mount `fd` (a template layer, a view file) at path
  kCgroup,        // a cgroup filesystem (fstype `source`, controllers `options`), read-only, of
                  // the sandbox's cgroup namespace
  kSeal,          // make the mount at path read-only (that mount only, not those under it)
};

struct MountStep {
  MountOp op;
  std::string path;         // where, as seen before pivot_root
  std::string source;       // bind source, symlink target or file content
  std::string options;      // filesystem data ("size=64m,mode=0755")
  unsigned long flags = 0;  // MS_* flags of the mount
  mode_t mode = 0755;
  uid_t uid = 0;  // owner inside the sandbox
  gid_t gid = 0;
  std::string label;  // "mounts: bind-ro: /usr", the failing step's name
  int fd = -1;        // kAttach: the mount's fd number in the child
  // kWriteFile, kSymlink: replaces a file or link already there (a snapshot's copy).
  bool replace = false;
  // The path's directories are resolved without a symlink and without leaving the root's
  // mount (a volume's mount point: never under /dev, /proc or /sys by a template's link).
  bool strict = false;
  // The path is the client's (a volume's): a failure there is the request's to mend.
  bool client_path = false;
};

struct RootPlan {
  std::string new_root;
  std::vector<MountStep> steps;
  std::string pivot_label;
  // A directory PID 1 holds open for the daemon once the old root is gone: the overlay's
  // writable layer, which snapshots copy. Empty: none.
  std::string keep;

  // The step a child's failure report names (its label, cut as the report cuts it), or null.
  const MountStep* Find(std::string_view reported) const;
};

// Every devpts instance but the host's draws from kernel.pty.max together.
inline constexpr int kPtysPerSandbox = 64;
// "tty" in Debian's /etc/group: the group of a sandbox's terminals, devpts' gid= option.
inline constexpr gid_t kTtyGroupId = 5;

// What the `base` template takes from the host, read once when the runtime starts.
struct HostSystem {
  std::vector<std::string> dirs;                               // bound read-only: /usr ...
  std::vector<std::pair<std::string, std::string>> links;      // /bin -> usr/bin ...
  std::vector<std::string> etc_dirs;                           // /etc/ssl ... read-only
  std::vector<std::pair<std::string, std::string>> etc_files;  // name, content
  std::vector<std::pair<std::string, std::string>> etc_links;  // name, target
  // The cgroup filesystems every sandbox mounts under /sys/fs/cgroup (Cgroups::fs_mounts).
  std::vector<CgroupFsMount> cgroup_fs;
  static HostSystem Scan();
};

// The writable space of a sandbox in MiB (its root or overlay layer, /tmp and /dev/shm share
// it): `disk_mb`, but at most `memory_mb` less a quarter (at least 32 MiB), since tmpfs pages
// are charged to the memory limit and a full tmpfs must leave room to run something.
int64_t WritableMb(const Limits& limits);

// Paths in the plan are relative to `sandbox_dir`, the sandbox's private state directory
// (owned by its root, so that no ancestor needs to be searchable by the sandbox's ids); the
// root is assembled at <sandbox_dir>/root in the child's mount namespace, invisible to the
// host. The template's layers (spec.layers) are detached mounts the child holds as
// `layer_fds`, in the same order; `view_fds`, empty or one per kViewFiles (limits_view.h), the
// files lxcfs serves, attached over the sandbox's own; `volume_fds`, one per spec.volumes, their
// detached mounts, attached last; `init_fd`, if not -1, the detached mount of the init
// executable, attached at kInitPathInside (embedded.h).
RootPlan BuildRootPlan(const HostSystem& host, const SandboxSpec& spec,
                       const std::string& sandbox_dir, const std::vector<int>& layer_fds,
                       const std::vector<int>& view_fds = {},
                       const std::vector<int>& volume_fds = {}, int init_fd = -1);

// In the child (root of its user and mount namespaces, cwd the sandbox's directory): makes
// every mount private, executes the plan and pivots into the new root. Returns plan.keep
// opened (O_PATH), or -1. Async-signal-safe; on failure reports and exits.
int BuildRootInChild(const RootPlan& plan, int report_fd);

}  // namespace sandstream::sandbox
