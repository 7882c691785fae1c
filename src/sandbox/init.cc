// Loading and exec'ing the embedded init executable.
#include "sandbox/init.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "platform/fd.h"
#include "sandbox/child_report.h"

// Defined by the generated init_blob.cc (an .incbin of the sandstream-init executable).
extern "C" const char sandstream_init_blob[];
extern "C" const char sandstream_init_blob_end[];

namespace sandstream::sandbox {

Result<UniqueFd> LoadInitExecutable() {
  UniqueFd fd(::memfd_create("sandstream-init", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return SysError(ErrorCode::kInternal, "init: memfd_create", errno);
  const size_t size = static_cast<size_t>(sandstream_init_blob_end - sandstream_init_blob);
  if (auto r = WriteAll(fd.get(), std::string_view(sandstream_init_blob, size)); !r) {
    return std::move(r).error();
  }
  if (::fchmod(fd.get(), 0555) != 0) return SysError(ErrorCode::kInternal, "init: fchmod", errno);
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) != 0) {
    return SysError(ErrorCode::kInternal, "init: seal memfd", errno);
  }
  return fd;
}

void ExecInitInChild(int init_fd, int control_fd, int report_fd) {
  // fd 3 is where init expects its control socket; move anything else that sits there.
  if (report_fd == 3) report_fd = ::fcntl(3, F_DUPFD_CLOEXEC, 4);
  if (init_fd == 3) init_fd = ::fcntl(3, F_DUPFD_CLOEXEC, 4);
  if (report_fd < 0 || init_fd < 0) ::_exit(127);
  if (control_fd != 3) {
    if (::dup2(control_fd, 3) < 0) ReportAndExit(report_fd, "init: dup2 control", errno);
  } else if (::fcntl(3, F_SETFD, 0) != 0) {
    ReportAndExit(report_fd, "init: keep control fd", errno);
  }
  // Whatever else the daemon had open must not reach the sandbox.
  if (::syscall(SYS_close_range, 4, ~0u, CLOSE_RANGE_CLOEXEC) != 0) {
    ReportAndExit(report_fd, "init: close_range", errno);
  }
  char name[] = "sandstream-init";
  char* const argv[] = {name, nullptr};
  char* const envp[] = {nullptr};
  ::syscall(SYS_execveat, init_fd, "", argv, envp, AT_EMPTY_PATH);
  ReportAndExit(report_fd, "init: execveat", errno);
}

}  // namespace sandstream::sandbox
