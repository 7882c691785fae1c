// lxcfs under the daemon's supervision: started on demand, taken over from an earlier daemon
// through its pidfile, restarted when it has died; its files handed out as detached mounts.
#include "sandbox/limits_view.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <sstream>

#include "base/log.h"
#include "platform/fd.h"
#include "platform/signals.h"
#include "sandbox/thread_op.h"

extern char** environ;

namespace sandstream::sandbox {
namespace {

// lxcfs mounts itself within milliseconds; its first start reads every cgroup hierarchy.
constexpr auto kStartTimeout = std::chrono::seconds(5);
// open_tree on each file is one FUSE lookup: far longer means lxcfs is stuck.
constexpr auto kFilesTimeout = std::chrono::seconds(2);

// mountinfo escapes space, tab, newline and backslash in paths as octal.
std::string Unescape(const std::string& field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const std::string octal = field.substr(i + 1, 3);
      if (octal.find_first_not_of("01234567") == std::string::npos) {
        out += static_cast<char>(std::strtol(octal.c_str(), nullptr, 8));
        i += 3;
        continue;
      }
    }
    out += field[i];
  }
  return out;
}

}  // namespace

bool HasMountAt(const std::string& mountinfo, const std::string& mountpoint,
                const std::string& fstype) {
  std::istringstream in(mountinfo);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, point;
    if (!(fields >> id >> parent >> dev >> root >> point)) continue;
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream post(line.substr(dash + 3));
    std::string type;
    post >> type;
    if (type == fstype && Unescape(point) == mountpoint) return true;
  }
  return false;
}

LimitsView::LimitsView(std::string binary, std::string dir)
    : binary_(std::move(binary)), dir_(std::move(dir)) {}

bool LimitsView::Serving() const {
  if (!pidfd_) return false;
  pollfd p{pidfd_.get(), POLLIN, 0};
  if (::poll(&p, 1, 0) != 0) return false;  // exited
  auto mountinfo = ReadFile("/proc/self/mountinfo");
  return mountinfo && HasMountAt(*mountinfo, dir_, "fuse.lxcfs");
}

bool LimitsView::Adopt() {
  auto text = ReadFile(dir_ + ".pid");
  if (!text) return false;
  const pid_t pid = static_cast<pid_t>(std::strtol(text->c_str(), nullptr, 10));
  if (pid <= 1) return false;
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd) return false;
  // With the pidfd held the number names that process: check it is lxcfs.
  auto comm = ReadFile("/proc/" + std::to_string(pid) + "/comm");
  if (!comm || *comm != "lxcfs\n") return false;
  pidfd_ = std::move(pidfd);
  pid_ = pid;
  child_ = false;
  return Serving();
}

Result<void> LimitsView::Start() {
  // A mount left by an lxcfs that died answers ENOTCONN: make way for the new one.
  if (auto mountinfo = ReadFile("/proc/self/mountinfo");
      mountinfo && HasMountAt(*mountinfo, dir_, "fuse.lxcfs")) {
    ::umount2(dir_.c_str(), MNT_DETACH);
  }
  if (::mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST) {
    return SysError(ErrorCode::kInternal, "lxcfs: mkdir " + dir_, errno);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  const std::string log_path = dir_ + ".log";
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                   0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  // Nothing else of the daemon's: it outlives the daemon, and Asio's sockets are not
  // close-on-exec, so a listening socket it kept would take a dead daemon's connections.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own session and default signals: a daemon's ^C or SIGTERM to its group is not for it.
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  const std::string pidfile = dir_ + ".pid";
  // --enable-cfs: cpuinfo, stat and cpu/online count the CPUs of the cpu quota too.
  std::vector<std::string> args = {binary_, "-f", "--enable-cfs", "-p", pidfile, dir_};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int err = ::posix_spawn(&pid, binary_.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (err != 0) return SysError(ErrorCode::kInternal, "lxcfs: start " + binary_, err);
  auto pidfd = OpenPidFd(pid);
  if (!pidfd) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return std::move(pidfd).error();
  }
  pidfd_ = std::move(*pidfd);
  pid_ = pid;
  child_ = true;
  log::Info("lxcfs started", {{"pid", std::to_string(pid)}, {"dir", dir_}});
  return Ok{};
}

Op<Result<void>> LimitsView::Ensure() {
  while (starting_) (void)co_await Sleep(std::chrono::milliseconds(10));
  if (Serving()) co_return Ok{};
  starting_ = true;
  Result<void> started = co_await StartAndWait();
  starting_ = false;
  co_return started;
}

Op<Result<void>> LimitsView::StartAndWait() {
  if (pidfd_) {
    log::Warn("lxcfs is gone; starting another (views of running sandboxes are lost)",
              {{"pid", std::to_string(pid_)}});
    if (child_) {
      siginfo_t info{};
      (void)::waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &info, WEXITED | WNOHANG);
    }
    pidfd_.reset();
  }
  if (Adopt()) {
    log::Info("lxcfs taken over", {{"pid", std::to_string(pid_)}, {"dir", dir_}});
    co_return Ok{};
  }
  pidfd_.reset();
  if (auto started = Start(); !started) co_return std::move(started).error();
  const Deadline deadline =
      In(std::chrono::duration_cast<std::chrono::milliseconds>(kStartTimeout));
  while (!Serving()) {
    pollfd p{pidfd_.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) != 0) {
      siginfo_t info{};
      (void)::waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &info, WEXITED | WNOHANG);
      pidfd_.reset();
      co_return Error{ErrorCode::kInternal, "lxcfs: exited at start (see " + dir_ + ".log)"};
    }
    if (std::chrono::steady_clock::now() > deadline) {
      co_return Error{ErrorCode::kInternal, "lxcfs: no mount at " + dir_ + " after 5 s"};
    }
    (void)co_await Sleep(std::chrono::milliseconds(10));
  }
  // Mounted is not yet serving: a sandbox made now would open files that do not answer yet.
  // Read one through the mount (off the event loop: a FUSE read waits for lxcfs) until it does.
  // (The call is named, not a temporary in the co_await: GCC 12 destroys those twice.)
  const auto answers = [path = dir_ + "/proc/meminfo"] {
    auto text = ReadFile(path);
    return text.ok() && text->starts_with("MemTotal:");
  };
  for (;;) {
    auto read = co_await OnThread(answers, kFilesTimeout);
    if (read && *read) co_return Ok{};
    if (std::chrono::steady_clock::now() > deadline) {
      co_return Error{ErrorCode::kInternal, "lxcfs: mounted at " + dir_ + " but not answering"};
    }
    (void)co_await Sleep(std::chrono::milliseconds(10));
  }
}

Op<Result<std::vector<UniqueFd>>> LimitsView::Files() {
  if (auto ensured = co_await Ensure(); !ensured) co_return std::move(ensured).error();
  auto open = [dir = dir_]() -> Result<std::vector<UniqueFd>> {
    std::vector<UniqueFd> files;
    for (const char* name : kViewFiles) {
      const std::string path = dir + "/" + name;
      files.emplace_back(::open_tree(AT_FDCWD, path.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
      if (!files.back()) return SysError(ErrorCode::kInternal, "lxcfs: open_tree " + path, errno);
      mount_attr attr{};
      attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
      if (::mount_setattr(files.back().get(), "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
        return SysError(ErrorCode::kInternal, "lxcfs: read-only " + path, errno);
      }
    }
    return files;
  };
  auto files = co_await OnThread(std::move(open), kFilesTimeout);
  if (!files) co_return Error{ErrorCode::kInternal, "lxcfs: its files did not open in 2 s"};
  co_return std::move(*files);
}

void LimitsView::Stop() {
  // One an earlier daemon started, for sandboxes this one has ended without a Create of its own.
  if (!pidfd_) (void)Adopt();
  if (!pidfd_) return;
  (void)SignalPidfd(pidfd_.get(), SIGTERM);
  if (child_) {
    // lxcfs unmounts and exits on SIGTERM at once; wait briefly, then make sure.
    pollfd p{pidfd_.get(), POLLIN, 0};
    if (::poll(&p, 1, 1000) == 0) (void)SignalPidfd(pidfd_.get(), SIGKILL);
    siginfo_t info{};
    (void)::waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &info, WEXITED);
  }
  ::umount2(dir_.c_str(), MNT_DETACH);
  ::unlink((dir_ + ".pid").c_str());
  pidfd_.reset();
}

}  // namespace sandstream::sandbox
