// Per-sandbox resource limits through cgroups: v2 where the host gives the daemon's cgroup the
// memory, pids and cpu controllers, v1 otherwise. Parent side only; a child joins by writing
// "0" to the cgroup.procs fds it inherited (v1 has no CLONE_INTO_CGROUP).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "platform/unique_fd.h"
#include "sandbox/op.h"
#include "sandbox/runtime.h"

namespace sandstream::sandbox {

enum class CgroupVersion { kV1, kV2 };

// A cgroup filesystem as the sandbox mounts it from inside its cgroup namespace, read-only,
// under /sys/fs/cgroup: one per v1 hierarchy it is in, or the one v2 tree.
struct CgroupFsMount {
  std::string dir;      // under /sys/fs/cgroup: "memory", "cpu,cpuacct"; "" for v2 (the top)
  std::string fstype;   // "cgroup" or "cgroup2"
  std::string options;  // the hierarchy's controllers ("cpu,cpuacct"), as it must be named
  std::vector<std::string> links;  // names linked to `dir`: "cpu" and "cpuacct" for "cpu,cpuacct"
};

// One sandbox's cgroups: one directory per v1 hierarchy (memory, pids, cpu, then cpuset, cpuacct
// and freezer where the host has them apart), or one in v2.
class SandboxCgroup {
 public:
  SandboxCgroup(CgroupVersion version, std::vector<std::string> dirs, std::vector<UniqueFd> procs,
                std::string oom_file, std::string freezer_dir);
  ~SandboxCgroup();
  SandboxCgroup(const SandboxCgroup&) = delete;
  SandboxCgroup& operator=(const SandboxCgroup&) = delete;

  // Moves `pid` into every hierarchy.
  Result<void> Attach(pid_t pid) const;
  // Open cgroup.procs files; a forked child writes "0" to each to join before it execs.
  std::vector<int> ProcsFds() const;
  uint64_t OomKills() const;
  // CPU time (v1 cpuacct.usage, v2 cpu.stat) and memory (usage less inactive file cache, as
  // `docker stats` counts it) now; nullopt when the files cannot be read.
  std::optional<ResourceUsage> Usage() const;
  // Host pids of every process still in the cgroup.
  std::vector<pid_t> Pids() const;
  // `sig` to the members of process group `pgid`, each pinned by a pidfd and checked to be a
  // member still, so a reused number outside the cgroup is never hit. `pgid` is the number
  // the pid namespace `level` below the daemon's gives the group (the sandbox's: 1 where the
  // daemon runs in the host's), or with `level` 0 the daemon's own.
  void SignalGroup(pid_t pgid, int sig, int level) const;
  // SIGKILLs what is left and removes the directories, waiting (as an Op) for the last
  // processes to go. Idempotent.
  Op<Result<void>> Remove();
  // SIGKILLs what is left and removes the directories that are empty already, without
  // waiting; what remains goes at the next start's CleanupLeftovers.
  void KillAndForget();
  // Lets go of the cgroups without touching them: the sandbox lives on for the next daemon.
  void Leave();

  // The freezer: every process of the cgroup stopped where it is, its memory kept (v2's
  // cgroup.freeze, v1's freezer hierarchy). Freeze waits, as an Op, until the kernel says all
  // are frozen, at most until `deadline`; past it they are thawed again and the error says so.
  bool CanFreeze() const { return !freezer_dir_.empty(); }
  Op<Result<void>> Freeze(Deadline deadline);
  Result<void> Thaw();
  // Whether the kernel holds the cgroup frozen (or freezing) now.
  bool Frozen() const;

 private:
  CgroupVersion version_;
  std::vector<std::string> dirs_;
  std::vector<UniqueFd> procs_;
  std::string oom_file_;
  std::string freezer_dir_;  // where the freezer's files are; empty without one
  bool removed_ = false;
};

// The daemon's parent cgroups, found once at start-up from /proc/self/{cgroup,mountinfo}.
class Cgroups {
 public:
  // Nests `parent_name` under the daemon's own cgroup in each hierarchy; an absolute one
  // ("/sandstream") is that cgroup of each hierarchy, made if missing, outside the daemon's.
  static Result<Cgroups> Detect(const std::string& parent_name);

  CgroupVersion version() const { return version_; }
  // Creates the sandbox's cgroups with every limit set; nothing is left on failure. Where the
  // cpuset controller is there, the sandbox gets as many CPUs as its cpu limit rounds up to,
  // chosen by `slot` (PickCpus), so that nproc and every runtime that sizes itself by its
  // CPUs see what it can use.
  Result<std::unique_ptr<SandboxCgroup>> Create(const std::string& id, const Limits& limits,
                                                uint32_t slot) const;
  // Opens the cgroups an earlier daemon created for sandbox `id`, as they are.
  Result<std::unique_ptr<SandboxCgroup>> Open(const std::string& id) const;
  // Kills the processes of, and removes, every sandbox cgroup under the parents but those of
  // the sandboxes in `keep`.
  void CleanupLeftovers(const std::vector<std::string>& keep) const;
  const std::vector<std::string>& parents() const { return parents_; }
  // The cgroup filesystems a sandbox mounts to see its own limits.
  const std::vector<CgroupFsMount>& fs_mounts() const { return fs_mounts_; }

 private:
  std::vector<std::string> DirsOf(const std::string& id) const;
  Result<std::unique_ptr<SandboxCgroup>> OpenDirs(std::vector<std::string> dirs) const;

  CgroupVersion version_ = CgroupVersion::kV1;
  // v1: memory, pids, cpu parents in that order, then cpuset, cpuacct and freezer if the host
  // has those hierarchies apart (`cpuset_`, `cpuacct_`, `freezer_`: their index, or -1); v2: one.
  std::vector<std::string> parents_;
  int cpuset_ = -1;
  int cpuacct_ = -1;
  int freezer_ = -1;
  bool v2_cpuset_ = false;  // v2: the cpuset controller is handed down to the sandboxes
  std::vector<CgroupFsMount> fs_mounts_;
};

}  // namespace sandstream::sandbox
