// NamespaceRuntime, the entry point of the isolating runtime: its start-up checks, creating
// (namespace_setup.cc, whose child side is init_setup.cc) and adopting sandboxes
// (namespace_sandbox.cc), and the leftovers of an earlier daemon.
#include "sandbox/namespace_runtime.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <mutex>
#include <system_error>
#include <utility>

#include "base/log.h"
#include "sandbox/embedded.h"
#include "sandbox/fault.h"
#include "sandbox/namespace_sandbox.h"
#include "sandbox/namespace_setup.h"
#include "sandbox/namespace_state.h"

namespace sandstream::sandbox {

namespace fs = std::filesystem;

namespace {

// The init executables' files in the state directory (embedded.h): no sandbox id starts with a
// dot.
constexpr std::string_view kInitFilePrefix = ".sandstream-init";

// A sandbox id names its state directory and cgroups: a plain name, nothing to resolve.
Result<void> CheckPlainId(const std::string& id) {
  if (id.empty() || id.find('/') != std::string::npos || id[0] == '.') {
    return Error{ErrorCode::kInvalidRequest, "sandbox id must be a plain name: " + id};
  }
  return Ok{};
}

}  // namespace

NamespaceRuntime::NamespaceRuntime(NamespaceRuntimeOptions options)
    : state_(std::make_shared<State>(std::move(options))) {
  auto& s = *state_;
  if (s.options.host_id_range < 65536) {
    ready_ = Error{ErrorCode::kInternal, "namespace runtime: host_id_range must be >= 65536"};
    return;
  }
  ready_ = CheckHostIdRanges(s.options.host_id_base, s.options.host_id_range,
                             s.options.max_sandboxes, HostIdFiles::Read());
  if (!ready_) return;
  std::error_code ec;
  fs::create_directories(s.options.state_dir, ec);
  if (ec) {
    ready_ = Error{ErrorCode::kInternal, "mkdir " + s.options.state_dir + ": " + ec.message()};
    return;
  }
  ::chmod(s.options.state_dir.c_str(), 0700);
  auto cgroups = Cgroups::Detect(s.options.cgroup_parent);
  if (!cgroups) {
    ready_ = std::move(cgroups).error();
    return;
  }
  s.cgroups = std::move(*cgroups);
  auto seccomp = SeccompProgram::Build(false);
  auto seccomp_userns = SeccompProgram::Build(true);
  if (!seccomp || !seccomp_userns) {
    ready_ = !seccomp ? seccomp.error() : seccomp_userns.error();
    return;
  }
  s.seccomp = std::move(*seccomp);
  s.seccomp_userns = std::move(*seccomp_userns);
  auto init = LoadInitExecutable();
  if (!init) {
    ready_ = std::move(init).error();
    return;
  }
  s.init_exe = std::move(*init);
  const std::string& init_dir =
      s.options.init_dir.empty() ? s.options.state_dir : s.options.init_dir;
  std::error_code made;
  fs::create_directories(init_dir, made);
  ::chmod(init_dir.c_str(), 0700);
  auto written = WriteInitExecutable(init_dir);
  if (!written) {
    ready_ = std::move(written).error();
    return;
  }
  s.init_path = std::move(*written);
  s.host = HostSystem::Scan();
  s.host.cgroup_fs = s.cgroups->fs_mounts();
  if (!s.options.lxcfs.empty()) {
    if (::access(s.options.lxcfs.c_str(), X_OK) == 0 && ::access("/dev/fuse", R_OK | W_OK) == 0) {
      s.view = std::make_unique<LimitsView>(s.options.lxcfs, s.options.lxcfs_dir);
    } else {
      log::Warn("no lxcfs or no /dev/fuse: sandboxes see the host's /proc/meminfo, cpuinfo, stat",
                {{"lxcfs", s.options.lxcfs}});
    }
  }
  struct rlimit nofile {};
  ::getrlimit(RLIMIT_NOFILE, &nofile);
  s.nofile_hard = static_cast<int64_t>(nofile.rlim_max);
  if (s.options.egress) s.options.egress->SetFaultPoint(&InjectedFault);
  s.host_netns = UniqueFd(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!s.host_netns) {
    ready_ = SysError(ErrorCode::kInternal, "open /proc/thread-self/ns/net", errno);
    return;
  }
}

NamespaceRuntime::~NamespaceRuntime() {
  // lxcfs stays for sandboxes that outlive the daemon, and goes with the last one.
  if (state_->view && state_->released == 0) state_->view->Stop();
  // The daemon is going: its cgroup parents go too once empty (a busy one stays, harmlessly,
  // for CleanupLeftovers at the next start).
  for (const auto& parent : CgroupParents()) ::rmdir(parent.c_str());
}

Op<Result<std::unique_ptr<Sandbox>>> NamespaceRuntime::Create(SandboxSpec spec) {
  if (!ready_) co_return ready_.error();
  auto& s = *state_;
  s.ReapDying();
  if (auto plain = CheckPlainId(spec.id); !plain) co_return std::move(plain).error();
  if ((spec.network == NetworkMode::kEgress) != spec.egress.has_value()) {
    co_return Error{ErrorCode::kInvalidRequest, "network: egress needs its policy, and only it"};
  }
  if (spec.egress && !s.options.egress) {
    co_return Error{ErrorCode::kInvalidRequest,
                    "network: egress is off in this daemon's configuration (egress_pool)"};
  }
  SandboxSpec resolved = spec;

  const std::string dir = s.options.state_dir + "/" + spec.id;
  auto sandbox = std::make_unique<NamespaceSandbox>(state_, spec, dir);
  {
    std::lock_guard lock(s.mu);
    sandbox->ids_first_ = s.ids.Acquire();
  }
  if (!sandbox->ids_first_) {
    co_return Error{ErrorCode::kQuotaExceeded, "userns: every host id range is in use"};
  }
  if (resolved.egress) {
    // Its resolver, on its gateway; no search domains of the host's, whose names it would
    // only refuse.
    resolved.resolv_conf = "nameserver " +
                           net::FormatAddress(s.options.egress->Gateway(*sandbox->Slot())) +
                           "\noptions ndots:1 timeout:2 attempts:2\n";
  }
  if (!spec.checkpoint.empty() && spec.egress) {
    (void)co_await sandbox->Destroy();
    co_return Error{ErrorCode::kNotImplemented,
                    "restore: a sandbox with network \"egress\" cannot be made from a checkpoint "
                    "yet"};
  }
  // A step that fails leaves what it made in `sandbox`; Destroy frees exactly that.
  Result<void> set_up = Ok{};
  if (spec.checkpoint.empty()) {
    set_up = co_await SetUpSandbox(s, *sandbox, resolved, dir);
  } else {
    set_up = co_await sandbox->StartFromCheckpoint(spec.checkpoint);
  }
  if (!set_up) {
    (void)co_await sandbox->Destroy();
    co_return std::move(set_up).error();
  }
  co_return std::unique_ptr<Sandbox>(std::move(sandbox));
}

std::vector<std::string> NamespaceRuntime::CgroupParents() const {
  if (!state_->cgroups) return {};
  return state_->cgroups->parents();
}

Op<Result<std::unique_ptr<Sandbox>>> NamespaceRuntime::Adopt(SandboxSpec spec) {
  if (!ready_) co_return ready_.error();
  auto& s = *state_;
  if (auto plain = CheckPlainId(spec.id); !plain) co_return std::move(plain).error();
  const std::string dir = s.options.state_dir + "/" + spec.id;
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    co_return SysError(ErrorCode::kNotFound, "state: " + dir, errno);
  }
  auto sandbox = std::make_unique<NamespaceSandbox>(state_, spec, dir);
  // The directory belongs to the sandbox's root: its owner is the first id of its range.
  bool acquired = false;
  {
    std::lock_guard lock(s.mu);
    acquired = s.ids.AcquireAt(st.st_uid);
  }
  if (!acquired) {
    co_return Error{ErrorCode::kNotFound, "userns: " + dir + " is owned by uid " +
                                              std::to_string(st.st_uid) +
                                              ", which starts no free id range of this daemon"};
  }
  sandbox->ids_first_ = st.st_uid;
  // Its link and table are kernel state that outlived the daemon.
  if (spec.egress && s.options.egress) {
    sandbox->egress_slot_ = sandbox->Slot();
    s.options.egress->Adopted(*sandbox->egress_slot_);
  }
  sandbox->ContinueCutCheckpoint();
  Result<void> reattached = co_await sandbox->Reattach();
  if (!reattached && sandbox->HasCheckpoint()) {
    // Checkpointed: no PID 1 until it is restored, its cgroups made again after a reboot.
    reattached = sandbox->AdoptCheckpoint();
  } else if (reattached && sandbox->RestoreUnfinished()) {
    reattached = co_await sandbox->FinishRestore();
  }
  if (!reattached) {
    (void)co_await sandbox->Destroy();
    co_return std::move(reattached).error();
  }
  co_return std::unique_ptr<Sandbox>(std::move(sandbox));
}

void NamespaceRuntime::CleanupLeftovers(const std::vector<std::string>& keep) {
  if (!ready_) return;
  state_->cgroups->CleanupLeftovers(keep);
  if (state_->options.egress) {
    std::vector<uint32_t> live;
    {
      std::lock_guard lock(state_->mu);
      live = state_->ids.UsedIndexes();
    }
    state_->options.egress->CleanupLeftovers(live);
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(state_->options.state_dir, ec)) {
    const std::string name = entry.path().filename().string();
    RemoveRestoreStage(state_->options.restore_dir, name);
    if (std::find(keep.begin(), keep.end(), name) != keep.end() ||
        name.starts_with(kInitFilePrefix)) {
      continue;
    }
    log::Info("removing leftover sandbox directory", {{"path", entry.path().string()}});
    fs::remove_all(entry.path(), ec);
  }
}

}  // namespace sandstream::sandbox
