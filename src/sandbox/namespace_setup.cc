// SetUpSandbox (namespace_setup.h): the parent's steps of a sandbox's creation, in order, with
// the clone3 of its PID 1 among them; the child's steps are init_setup.cc's.
#include "sandbox/namespace_setup.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "base/log.h"
#include "platform/fd.h"
#include "platform/scm_rights.h"
#include "sandbox/child_report.h"
#include "sandbox/fault.h"
#include "sandbox/init_setup.h"
#include "sandbox/mounts.h"
#include "sandbox/namespace_state.h"
#include "sandbox/spawner.h"
#include "sandbox/thread_op.h"
#include "sandbox/userns.h"

namespace sandstream::sandbox {
namespace {

constexpr uint64_t kCloneFlags =
    CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC;
// A veth pair and a table take about a millisecond; far longer means the kernel is stuck.
constexpr std::chrono::seconds kNetTimeout{30};

// Gives the sandbox its veth pair and its table, on a thread (netlink may wait on the
// kernel). The slot is recorded first, so Destroy detaches whatever a failure left.
Op<Result<void>> AttachEgress(NamespaceRuntime::State& s, NamespaceSandbox& sandbox,
                              const net::EgressPolicy& policy) {
  const std::string path = "/proc/" + std::to_string(sandbox.init_pid_) + "/ns/net";
  auto netns = std::make_shared<UniqueFd>(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (InjectedFault() || !*netns) {
    co_return SysError(ErrorCode::kSandboxSetupFailed, "net: open " + path, errno);
  }
  const uint32_t slot = *sandbox.Slot();
  sandbox.egress_slot_ = slot;
  // Named, not a temporary in the co_await: g++ 12 destroys such a temporary's captures twice.
  auto attach = [egress = s.options.egress, slot, netns, policy] {
    return egress->Attach(slot, netns->get(), policy);
  };
  auto attached = co_await OnThread(std::move(attach), kNetTimeout);
  if (!attached) {
    co_return Error{ErrorCode::kSandboxSetupFailed,
                    "net: attach did not finish in " + std::to_string(kNetTimeout.count()) + " s"};
  }
  co_return std::move(*attached);
}

// A tree the sandbox's setup receives as a detached mount: a template layer (read-only) or a
// volume (read-only if mounted so), opened O_PATH, and the step's name when it fails.
struct SetupTree {
  int fd;
  const char* kind;  // "template", "volume": a failed step is "<kind>: <step>: <name>"
  std::string name;  // the layer's path, the volume's path inside
  bool read_only;
  std::string Step(std::string_view step) const {
    return std::string(kind) + ": " + std::string(step) + ": " + name;
  }
};

// Each tree as a detached mount that shows its files' owners through the user namespace of
// `pid` (the sandbox's PID 1): the tree's uid 0 is the sandbox's root. Only the host's root can
// make it (the tree's filesystem belongs to the host's user namespace).
Result<std::vector<UniqueFd>> IdmapTrees(pid_t pid, const std::vector<SetupTree>& trees) {
  std::vector<UniqueFd> mounts;
  if (trees.empty()) return mounts;
  const std::string userns_path = "/proc/" + std::to_string(pid) + "/ns/user";
  UniqueFd userns(::open(userns_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (InjectedFault() || !userns) {
    return SysError(ErrorCode::kSandboxSetupFailed, "template: open " + userns_path, errno);
  }
  for (const SetupTree& tree : trees) {
    mounts.emplace_back(
        ::open_tree(tree.fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH));
    if (InjectedFault() || !mounts.back()) {
      return SysError(ErrorCode::kSandboxSetupFailed, tree.Step("clone"), errno);
    }
    mount_attr attr{};
    attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if (tree.read_only) attr.attr_set |= MOUNT_ATTR_RDONLY;
    attr.userns_fd = static_cast<uint64_t>(userns.get());
    if (InjectedFault() ||
        ::mount_setattr(mounts.back().get(), "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
      return SysError(ErrorCode::kSandboxSetupFailed, tree.Step("idmap"), errno);
    }
  }
  return mounts;
}

// The failure the setup child reported. A volume's path the template cannot give (a file or a
// link on the way, a read-only directory) is the request's to mend: 400, naming the step.
Error SetupFailure(const RootPlan& plan, const ChildFailure& failure) {
  Error e = SysError(ErrorCode::kSandboxSetupFailed, failure.step, failure.err);
  const MountStep* step = plan.Find(failure.step);
  const int err = failure.err;
  if (step && step->client_path &&
      (err == EROFS || err == ENOTDIR || err == EEXIST || err == EINVAL || err == ELOOP ||
       err == EXDEV || err == EACCES)) {
    e.code = ErrorCode::kInvalidRequest;
    e.message = "volumes: the path cannot be a mount point in this template (" + e.message + ")";
  }
  return e;
}

// The child's go-ahead: one byte, with the layers' and volumes' mounts.
Result<void> SendGoAhead(int sync_fd, const std::vector<UniqueFd>& mounts) {
  const char go = 'g';
  std::vector<int> fds;
  fds.reserve(mounts.size());
  for (const UniqueFd& mount : mounts) fds.push_back(mount.get());
  if (InjectedFault() ||
      SendWithFds<kMaxSetupMounts>(sync_fd, &go, 1, fds.data(), fds.size()) != 1) {
    return SysError(ErrorCode::kSandboxSetupFailed, "sync: write", errno);
  }
  return Ok{};
}

}  // namespace

Op<Result<void>> SetUpSandbox(NamespaceRuntime::State& s, NamespaceSandbox& sandbox,
                              const SandboxSpec& spec, const std::string& dir) {
  if (InjectedFault() || ::mkdir(dir.c_str(), 0700) != 0) {
    const int err = errno;
    co_return SysError(err == EEXIST ? ErrorCode::kConflict : ErrorCode::kSandboxSetupFailed,
                       "state: mkdir: " + dir, err);
  }
  const std::string root = dir + "/root";
  if (InjectedFault() || ::mkdir(root.c_str(), 0755) != 0) {
    co_return SysError(ErrorCode::kSandboxSetupFailed, "state: mkdir: " + root, errno);
  }
  if (!spec.layers.empty()) {
    const std::string layer = dir + "/layer";
    if (InjectedFault() || ::mkdir(layer.c_str(), 0755) != 0) {
      co_return SysError(ErrorCode::kSandboxSetupFailed, "state: mkdir: " + layer, errno);
    }
  }
  // Owned by the sandbox's root: the child works below it after leaving the host's uid 0.
  if (InjectedFault() || ::chown(dir.c_str(), *sandbox.ids_first_, *sandbox.ids_first_) != 0) {
    co_return SysError(ErrorCode::kSandboxSetupFailed, "state: chown: " + dir, errno);
  }
  // Each layer's number is reserved here, before the clone, so that the plan can name it: the
  // child puts the layer's idmapped mount there once the parent has made it.
  if (spec.layers.size() > kMaxTemplateLayers) {
    co_return Error{ErrorCode::kInvalidRequest,
                    "template: more than " + std::to_string(kMaxTemplateLayers) + " layers"};
  }
  if (spec.volumes.size() > kMaxVolumeMounts) {
    co_return Error{ErrorCode::kInvalidRequest,
                    "volumes: more than " + std::to_string(kMaxVolumeMounts) + " mounts"};
  }
  // The trees the child receives as mounts, layers first: their numbers here are the ones the
  // plan names, under which the child keeps each mount.
  std::vector<UniqueFd> opened;
  std::vector<SetupTree> trees;
  const auto add_tree = [&](const std::string& path, SetupTree tree) -> Result<void> {
    opened.emplace_back(::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (InjectedFault() || !opened.back()) {
      return SysError(ErrorCode::kSandboxSetupFailed, tree.Step("open"), errno);
    }
    tree.fd = opened.back().get();
    trees.push_back(std::move(tree));
    return Ok{};
  };
  for (const auto& path : spec.layers) {
    if (auto r = add_tree(path, {-1, "template", path, true}); !r) co_return std::move(r).error();
  }
  for (const auto& volume : spec.volumes) {
    if (auto r = add_tree(volume.source, {-1, "volume", volume.path, volume.read_only}); !r) {
      co_return std::move(r).error();
    }
  }
  std::vector<int> tree_fds;
  tree_fds.reserve(trees.size());
  for (const SetupTree& tree : trees) tree_fds.push_back(tree.fd);
  const std::vector<int> layer_fds(tree_fds.begin(), tree_fds.begin() + spec.layers.size());
  const std::vector<int> volume_fds(tree_fds.begin() + spec.layers.size(), tree_fds.end());
  auto cgroup = s.cgroups->Create(spec.id, spec.limits, *sandbox.Slot());
  if (!cgroup) co_return std::move(cgroup).error();
  sandbox.cgroup_ = std::move(*cgroup);

  // The files lxcfs answers from the sandbox's limits; without them it sees the host's.
  std::vector<UniqueFd> view;
  std::vector<int> view_fds;
  if (s.view) {
    auto files = co_await s.view->Files();
    if (files) {
      view = std::move(*files);
      for (const auto& fd : view) view_fds.push_back(fd.get());
    } else {
      log::Warn("sandbox sees the host's /proc/meminfo, cpuinfo, stat",
                {{"sandbox", spec.id}, {"error", files.error().message}});
    }
  }
  sandbox.limits_view_ = !view.empty();
  // PID 1's executable, bound read-only where the sandbox execs it (embedded.h).
  UniqueFd init_tree(
      ::open_tree(AT_FDCWD, s.init_path.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (InjectedFault() || !init_tree) {
    co_return SysError(ErrorCode::kSandboxSetupFailed, "init: open_tree " + s.init_path, errno);
  }
  mount_attr init_attr{};
  init_attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (::mount_setattr(init_tree.get(), "", AT_EMPTY_PATH, &init_attr, sizeof init_attr) != 0) {
    co_return SysError(ErrorCode::kSandboxSetupFailed, "init: read-only " + s.init_path, errno);
  }
  const RootPlan plan =
      BuildRootPlan(s.host, spec, dir, layer_fds, view_fds, volume_fds, init_tree.get());
  int sync[2];
  if (InjectedFault() || ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sync) != 0) {
    co_return SysError(ErrorCode::kSandboxSetupFailed, "socketpair", errno);
  }
  UniqueFd sync_parent(sync[0]), sync_child(sync[1]);
  auto control = MakeControlPair();
  if (!control) co_return std::move(control).error();
  auto report = MakePipe(false);
  if (!report) co_return std::move(report).error();

  const InitLaunch launch{&plan,
                          dir.c_str(),
                          tree_fds.data(),
                          tree_fds.size(),
                          spec.id.c_str(),
                          spec.id.size(),
                          sync_child.get(),
                          control->init.get(),
                          report->write.get(),
                          spec.network == NetworkMode::kLoopback,
                          {sync_parent.get(), control->daemon.get(), report->read.get()}};
  int pidfd = -1;
  clone_args args{};
  args.flags = kCloneFlags | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  pid_t pid = -1;
  int clone_err = 0;
  {
    auto owner = NamespaceOwner::Assume(*sandbox.ids_first_);
    if (!owner) co_return std::move(owner).error();
    pid = InjectedFault() ? -1 : static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
    clone_err = errno;
    if (pid == 0) RunInitSetup(launch);
  }
  if (pid < 0) co_return SysError(ErrorCode::kSandboxSetupFailed, "clone3", clone_err);

  sandbox.init_pidfd_.reset(pidfd);
  sandbox.init_pid_ = pid;
  sandbox.pid_level_ = PidNamespaceLevel(pid);
  sync_child.reset();
  control->init.reset();
  report->write.reset();

  if (auto r = WriteIdMapsFromParent(pid, *sandbox.ids_first_, s.options.host_id_range); !r) {
    co_return std::move(r).error();
  }
  if (auto r = sandbox.cgroup_->Attach(pid); !r) co_return std::move(r).error();
  if (auto r = ExemptFromOomKiller(pid); !r) co_return std::move(r).error();
  if (spec.egress) {
    auto attached = co_await AttachEgress(s, sandbox, *spec.egress);
    if (!attached) co_return std::move(attached).error();
  }
  auto idmapped = IdmapTrees(pid, trees);
  if (!idmapped) co_return std::move(idmapped).error();
  if (auto r = SendGoAhead(sync_parent.get(), *idmapped); !r) co_return std::move(r).error();
  Result<std::optional<ChildFailure>> failure = co_await ReadChildReport(report->read.get());
  if (!failure) co_return Error{ErrorCode::kSandboxSetupFailed, failure.error().message};
  if (*failure) co_return SetupFailure(plan, **failure);
  // PID 1 says hello once it runs, and is the sandbox's keeper from then on.
  std::vector<int> held(1, sandbox.init_pidfd_.get());
  co_return co_await sandbox.spawner_.Attach(std::move(control->daemon), std::move(held));
}

}  // namespace sandstream::sandbox
