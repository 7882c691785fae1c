// The isolating runtime: every sandbox is a small PID 1 in its own user, pid, mount, network,
// uts, ipc and cgroup namespaces, with its own root filesystem, cgroup limits and a dedicated
// unprivileged host uid range; every process it runs is cloned by the sandbox's spawner
// (spawner.h) and dropped to no capabilities under seccomp.
// Not thread-safe: one caller (the daemon's io_context thread) at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/egress.h"
#include "sandbox/runtime.h"

namespace sandstream::sandbox {

struct NamespaceRuntimeOptions {
  // Private directory per sandbox (its mount point); <data-dir>/sandboxes. Never inside a sandbox.
  std::string state_dir;
  // Where the init executable is written as a file (embedded.h); empty: state_dir.
  std::string init_dir;
  // Host uid/gid of root in the first sandbox; sandbox i maps 0.. to base + i * range.
  uint32_t host_id_base = 1000000;
  // Ids mapped per sandbox (inside: 0 .. range - 1); must cover 65534 (nobody).
  uint32_t host_id_range = 65536;
  // How many sandboxes can exist at once (number of id ranges).
  uint32_t max_sandboxes = 4096;
  // Sandbox cgroups live in <daemon's own cgroup>/<cgroup_parent>/<id>, in every hierarchy, or
  // in <cgroup_parent>/<id> when it is absolute ("/sandstream").
  std::string cgroup_parent = "sandstream";
  // Egress for sandboxes that ask for it; null: none.
  std::shared_ptr<net::Egress> egress;
  // The lxcfs executable that shows each sandbox its limits in /proc/meminfo and the like
  // (limits_view.h); empty: sandboxes see the host's.
  std::string lxcfs;
  // Where lxcfs is mounted (and its .pid and .log beside it).
  std::string lxcfs_dir;
  // The CRIU executable that checkpoints and restores sandboxes (checkpoint.cc), as
  // scripts/install-criu builds it; empty: sandboxes cannot be checkpointed.
  std::string criu;
  // Where a restore assembles what CRIU takes as paths (the writable layer, a devpts): a
  // directory every ancestor of which the sandbox's ids can search, as CRIU's restored tasks
  // resolve those paths as the sandbox's root.
  std::string restore_dir = "/run/sandstream/restore";
};

class NamespaceRuntime final : public Runtime {
 public:
  // Finds the cgroups, compiles the seccomp profiles and loads the init executable; a problem
  // is kept in ready() and returned by every Create.
  explicit NamespaceRuntime(NamespaceRuntimeOptions options);
  ~NamespaceRuntime() override;

  std::string_view name() const override { return "namespace"; }
  const Result<void>& ready() const { return ready_; }
  // The root of a sandbox is the host's system directories (read-only) when spec.layers is
  // empty, else the template's layers, idmapped to the sandbox's ids, under an overlay whose
  // writable layer is a tmpfs of limits.disk_mb.
  Op<Result<std::unique_ptr<Sandbox>>> Create(SandboxSpec spec) override;
  // Reconnects to the sandbox's keeper at <state_dir>/<id>/keeper.sock and takes back PID 1,
  // the cgroups, the id range (the owner of the state directory) and the kept processes.
  Op<Result<std::unique_ptr<Sandbox>>> Adopt(SandboxSpec spec) override;
  void CleanupLeftovers(const std::vector<std::string>& keep) override;
  // Where sandbox cgroups are created: one directory per hierarchy (v1) or one (v2).
  std::vector<std::string> CgroupParents() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
  Result<void> ready_;
};

}  // namespace sandstream::sandbox
