// Loading and exec'ing the embedded executables.
#include "sandbox/embedded.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>

#include "platform/fd.h"
#include "sandbox/child_report.h"
#include "sandbox/fault.h"

// Defined by the generated init_blob.cc (.incbin of the executable).
extern "C" const char sandstream_init_blob[];
extern "C" const char sandstream_init_blob_end[];

namespace sandstream::sandbox {

Result<UniqueFd> LoadInitExecutable() {
  const char* name = "sandstream-init";
  const char* begin = sandstream_init_blob;
  const char* end = sandstream_init_blob_end;
  const std::string context = std::string(name) + ": ";
  UniqueFd fd(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return SysError(ErrorCode::kInternal, context + "memfd_create", errno);
  if (auto r = WriteAll(fd.get(), std::string_view(begin, static_cast<size_t>(end - begin))); !r) {
    return std::move(r).error();
  }
  if (::fchmod(fd.get(), 0555) != 0) {
    return SysError(ErrorCode::kInternal, context + "fchmod", errno);
  }
  const int seals = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE;
  if (::fcntl(fd.get(), F_ADD_SEALS, seals) != 0) {
    return SysError(ErrorCode::kInternal, context + "seal memfd", errno);
  }
  return fd;
}

std::string InitExecutableName(std::string_view bytes) {
  uint64_t digest = 14695981039346656037ull;  // FNV-1a
  for (const char c : bytes) digest = (digest ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  char name[64];
  std::snprintf(name, sizeof name, "sandstream-init-%016llx",
                static_cast<unsigned long long>(digest));
  return name;
}

Result<std::string> WriteInitExecutable(const std::string& dir) {
  const std::string_view bytes(
      sandstream_init_blob, static_cast<size_t>(sandstream_init_blob_end - sandstream_init_blob));
  const std::string path = dir + "/." + InitExecutableName(bytes);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && static_cast<size_t>(st.st_size) == bytes.size()) {
    return path;
  }
  const std::string temporary = path + ".new";
  const std::string context = "sandstream-init: write " + temporary;
  UniqueFd fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0555));
  if (!fd) return SysError(ErrorCode::kInternal, context, errno);
  if (auto r = WriteAll(fd.get(), bytes); !r) return std::move(r).error();
  if (::fchmod(fd.get(), 0555) != 0) return SysError(ErrorCode::kInternal, context, errno);
  fd.reset();
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    return SysError(ErrorCode::kInternal, "sandstream-init: rename to " + path, errno);
  }
  return path;
}

void ExecEmbeddedInChild(int exe_fd, char* const argv[], int control_fd, int report_fd,
                         int keep_fd) {
  // fds 3 and 4 are where the executable expects its control socket and the kept fd; move
  // anything else that sits there.
  for (int* fd : {&report_fd, &exe_fd, &keep_fd}) {
    if (*fd == 3 || (*fd == 4 && fd != &keep_fd)) *fd = ::fcntl(*fd, F_DUPFD_CLOEXEC, 5);
  }
  if (report_fd < 0 || exe_fd < 0) ::_exit(127);
  if (control_fd != 3) {
    if (::dup2(control_fd, 3) < 0) ReportAndExit(report_fd, "exec: dup2 control", errno);
  } else if (::fcntl(3, F_SETFD, 0) != 0) {
    ReportAndExit(report_fd, "exec: keep control fd", errno);
  }
  if (keep_fd >= 0 && (keep_fd != 4 ? ::dup2(keep_fd, 4) : ::fcntl(4, F_SETFD, 0)) < 0) {
    ReportAndExit(report_fd, "exec: keep fd", errno);
  }
  // Whatever else the daemon had open must not reach the sandbox.
  if (::syscall(SYS_close_range, keep_fd >= 0 ? 5 : 4, ~0u, CLOSE_RANGE_CLOEXEC) != 0) {
    ReportAndExit(report_fd, "exec: close_range", errno);
  }
  char* const envp[] = {nullptr};
  if (!InjectedFault()) ::syscall(SYS_execveat, exe_fd, "", argv, envp, AT_EMPTY_PATH);
  ReportAndExit(report_fd, "exec: execveat", errno);
}

}  // namespace sandstream::sandbox
