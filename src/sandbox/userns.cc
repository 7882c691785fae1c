// User namespace ids: the range pool, the maps written from the parent, the child's switch.
#include "sandbox/userns.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "platform/unique_fd.h"
#include "sandbox/child_report.h"

namespace sandstream::sandbox {

IdRangePool::IdRangePool(uint32_t base, uint32_t size, uint32_t count)
    : base_(base), size_(size), used_(count, false) {}

std::optional<uint32_t> IdRangePool::Acquire() {
  // Round-robin, so a just-freed range (whose last processes may still be exiting) is the
  // last to be handed out again.
  for (size_t n = 0; n < used_.size(); ++n) {
    size_t i = (next_ + n) % used_.size();
    if (!used_[i]) {
      used_[i] = true;
      next_ = i + 1;
      return base_ + static_cast<uint32_t>(i) * size_;
    }
  }
  return std::nullopt;
}

void IdRangePool::Release(uint32_t first) {
  size_t i = (first - base_) / size_;
  if (i < used_.size()) used_[i] = false;
}

Result<void> WriteIdMapsFromParent(pid_t pid, uint32_t host_first, uint32_t count) {
  const std::string line = "0 " + std::to_string(host_first) + " " + std::to_string(count) + "\n";
  for (const char* map : {"uid_map", "gid_map"}) {
    const std::string path = "/proc/" + std::to_string(pid) + "/" + map;
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd || ::write(fd.get(), line.data(), line.size()) < 0) {
      return SysError(ErrorCode::kSandboxSetupFailed, std::string("userns: write ") + path, errno);
    }
  }
  return Ok{};
}

void BecomeNamespaceRootInChild(int report_fd) {
  if (::syscall(SYS_setgroups, 0, nullptr) != 0)
    ReportAndExit(report_fd, "userns: setgroups", errno);
  if (::syscall(SYS_setresgid, 0, 0, 0) != 0)
    ReportAndExit(report_fd, "userns: setresgid 0", errno);
  if (::syscall(SYS_setresuid, 0, 0, 0) != 0)
    ReportAndExit(report_fd, "userns: setresuid 0", errno);
}

}  // namespace sandstream::sandbox
