// A running sandbox of the namespace runtime over its life: processes spawned through its
// keeper, sockets in its network namespace, kills through its PID 1, destruction, and its
// adoption by a daemon started later. It is created by SetUpSandbox (namespace_setup.h), which
// records each resource here as it is acquired; NamespaceRuntime is the entry point to both.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "platform/unique_fd.h"
#include "sandbox/cgroup.h"
#include "sandbox/namespace_runtime.h"
#include "sandbox/op.h"
#include "sandbox/runtime.h"
#include "sandbox/spawner.h"

namespace sandstream::sandbox {

class NamespaceSandbox final : public Sandbox {
 public:
  NamespaceSandbox(std::shared_ptr<NamespaceRuntime::State> state, const SandboxSpec& spec,
                   std::string dir);
  // Destroy() is the way to end a sandbox; this only makes sure nothing is left running.
  ~NamespaceSandbox() override { DestroyNow(); }

  const std::string& id() const override { return id_; }
  std::string RootPath() const override;
  // PID 1 holds the layer's tmpfs open as fd 4 (BuildRootInChild); nothing mounts it anywhere.
  std::string WritableLayer() const override;
  uint64_t OomKills() const override { return cgroup_ ? cgroup_->OomKills() : 0; }
  std::optional<ResourceUsage> Usage() const override;
  Op<Result<void>> Freeze() override;
  Result<void> Thaw() override;
  bool Frozen() const override { return cgroup_ && cgroup_->Frozen(); }
  // With CRIU (checkpoint.cc), into CheckpointDir().
  Op<Result<void>> Checkpoint() override;
  Op<Result<void>> CheckpointTo(std::string dir, bool durable) override;
  Op<Result<void>> Restore() override;
  bool Checkpointed() const override { return checkpointed_; }
  std::string CheckpointDir() const { return dir_ + "/checkpoint"; }
  // Whether CheckpointDir() holds a whole checkpoint (its last file is written last).
  bool HasCheckpoint() const;
  // Takes back a sandbox an earlier daemon checkpointed: its cgroups (made again if the host
  // rebooted), no PID 1. What a dying daemon left of the tree (stopped for the copy of its layer)
  // is killed: the checkpoint is whole.
  Result<void> AdoptCheckpoint();
  // A new sandbox (its ids acquired, nothing else made) made from the checkpoint in `from`
  // (SandboxSpec::checkpoint): its state directory, its own links to the images, then Restore,
  // which gives it its own ids and hostname.
  Op<Result<void>> StartFromCheckpoint(const std::string& from);
  // A daemon that died checkpointing left the tree stopped (for the copy of its layer) and no
  // whole checkpoint: it goes on.
  void ContinueCutCheckpoint() const;
  // A daemon that died restoring, after CRIU's restore and before the restored PID 1 ran its
  // executable again: the next one finishes it (FinishRestore) once it has taken PID 1 back.
  bool RestoreUnfinished() const;
  Op<Result<void>> FinishRestore();
  bool LimitsView() const override { return limits_view_; }
  std::optional<uint32_t> HostId(uint32_t inside) const override;
  // The index of its id range: what names its egress link, table and addresses.
  std::optional<uint32_t> Slot() const;
  std::optional<EgressAddresses> Egress() const override;

  Op<Result<SpawnedProcess>> Spawn(ProcessSpec spec) override;
  Op<Result<std::optional<FileWriter>>> StartFileWriter(int file) override;
  Result<UniqueFd> Socket() override;

  // The keeper's connection broke while PID 1 lives: it is reached again at its socket.
  Op<Result<void>> EnsureKeeper();
  // Takes back what an earlier daemon left: the keeper at its socket, the cgroups, PID 1's
  // pidfd and every kept process (for TakeAdopted). A frozen sandbox is thawed for it and
  // frozen again.
  Op<Result<void>> Reattach();
  Op<Result<void>> ReattachKeeper();
  // Where the keeper of an earlier build's sandbox listens for a daemon started later (PID 1 as
  // the keeper listens on kKeeperSocketName in the sandbox's network namespace).
  std::string KeeperSocket() const { return dir_ + "/keeper.sock"; }

  std::vector<AdoptedProcess> TakeAdopted() override;
  void Release() override;
  void Forget(pid_t pid) override { spawner_.Forget(pid); }
  void CloseStdin(pid_t pid) override { spawner_.Release(pid, kKeptStdin); }
  void KeepLog(pid_t pid, int log) override { spawner_.Replace(pid, kKeptLog, log); }
  void SignalGroup(pid_t pgid, int sig) override {
    if (cgroup_) cgroup_->SignalGroup(pgid, sig, pid_level_);
  }
  int LifeFd() const override { return init_pidfd_.get(); }
  bool Ended() const override;
  std::string LostCause() const override;
  Op<Result<void>> KillAll() override;
  Op<Result<void>> Destroy() override;

  // Set by Create as each resource is acquired, so Destroy frees exactly those.
  std::optional<uint32_t> ids_first_;
  std::unique_ptr<SandboxCgroup> cgroup_;
  std::optional<uint32_t> egress_slot_;  // set once its network may have been attached
  UniqueFd init_pidfd_;
  pid_t init_pid_ = -1;  // in the host's pid namespace
  // PID 1, which is the keeper (spawner.h): it holds PID 1's pidfd and every process's pipes for
  // a daemon started later. Its pids, and so the processes', are the sandbox's own.
  Spawner spawner_;
  // How deep the pid namespace that numbers the processes is below the daemon's: the
  // sandbox's (1, unless the daemon itself runs in a pid namespace's child), or 0 for an
  // earlier build's sandbox, whose keeper apart numbers them as the host does.
  int pid_level_ = 0;
  // Of a sandbox an earlier build made, whose keeper ran apart from PID 1 (its pids are the
  // host's): PID 1's own control socket, on which 'K' kills the rest.
  UniqueFd apart_init_control_;
  bool limits_view_ = false;  // lxcfs's files over its own (limits_view.h)
  // Written to disk, its processes ended (Checkpoint, until Restore); no PID 1 meanwhile.
  bool checkpointed_ = false;

 private:
  // Why this sandbox cannot be checkpointed, if it cannot.
  Result<void> CheckpointPossible() const;
  // Checkpoint and CheckpointTo: into `images`, then the sandbox ends or runs on.
  Op<Result<void>> Dump(const std::string& images, bool leave_running, bool durable);
  // A checkpoint taken of another sandbox, in CheckpointDir(), made this one's: the user
  // namespace's maps and the hostname in CRIU's images (criu_images.h).
  Result<void> AdoptImages(const std::string& facts);
  // The same in its restored layer: /etc/hostname and /etc/hosts, which name the sandbox.
  Result<void> RenameInLayer(const std::string& root, const std::string& from_id);
  // A socket made in the sandbox's network namespace.
  Result<UniqueFd> SocketInside(int family, int type, const std::string& context);
  // A socket connected to PID 1 where it listens, checked to be PID 1's.
  Result<UniqueFd> ConnectToInit();
  // PID 1's host pid, found among the cgroup's processes; -1 if none is.
  pid_t FindInit() const;
  void KillInit();
  // Reaps PID 1 if it has exited, else leaves it to be reaped later.
  void ReapInit();
  void FreeStateAndIds(Result<void>& result);
  // Without waiting: what a sandbox that was never Destroy()ed must not leave running. Its
  // cgroups go if already empty, else at the next start's CleanupLeftovers.
  void DestroyNow();

  std::shared_ptr<NamespaceRuntime::State> state_;
  std::string id_;
  std::string dir_;
  Limits limits_;
  bool allow_nested_userns_;
  bool layered_;
  bool has_volumes_;
  uid_t user_uid_;
  gid_t user_gid_;
  bool destroyed_ = false;
  bool adopted_init_ = false;  // PID 1 is an earlier daemon's child: not this one's to reap
  std::vector<AdoptedProcess> adopted_;
};

// What a restore of sandbox `id` by a daemon that died left in `restore_dir` (checkpoint.cc):
// none of a daemon's own is under way when it starts. (Other daemons' sandboxes have theirs.)
void RemoveRestoreStage(const std::string& restore_dir, const std::string& id);

// Shared with namespace_setup.cc:
// How many pid namespaces below this process's the process `pid` is in (its NSpid fields less
// one); 0 when that cannot be read.
int PidNamespaceLevel(pid_t pid);
// PID 1 must outlive whatever fills the sandbox's memory: the OOM killer of its cgroup takes
// one of the sandbox's processes instead (launch.cc). Lowering the score needs
// CAP_SYS_RESOURCE; without it PID 1 keeps the daemon's, still below the processes'.
Result<void> ExemptFromOomKiller(pid_t pid);

}  // namespace sandstream::sandbox
